"""One log line shape for every process of the chain: time, level, component (the logger's name),
message. `GPUSTACK_LOG_FORMAT=json` makes each line a JSON object with those four keys (and the
traceback, if any) for log pipelines that parse lines.

Used by the verdict driver, the lifecycle keeper and the node agent (`setup`), and by every
hook and webhook through their gunicorn settings (`hooks/gunicorn_conf.py`, `formatter`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

LINE = "%(asctime)s %(levelname)s %(name)s %(message)s"
FORMAT_ENV = "GPUSTACK_LOG_FORMAT"


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "component": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def formatter(environ: Mapping[str, str] = os.environ) -> logging.Formatter:
    if environ.get(FORMAT_ENV, "").lower() == "json":
        return JsonLines()
    return logging.Formatter(LINE)


def setup(level: int = logging.INFO, environ: Mapping[str, str] = os.environ) -> None:
    """The root logger writes to stderr in the chain's shape (replacing any earlier setup)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(environ))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
