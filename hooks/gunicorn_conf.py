"""gunicorn settings for every hook and webhook Deployment.

Loaded with `--config=python:hooks.gunicorn_conf`. One line shape for everything the process
logs (gunicorn's own lines, the access log, the hooks' loggers): time, level, component (the
logger's name), message. And no access line for the kubelet's probes and Prometheus' scrapes:
`/healthz` every few seconds from two probes per Pod would bury the requests that matter. With
`PROMETHEUS_MULTIPROC_DIR` set, the workers' metrics are kept there (`hooks/metrics.py`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from typing import Any

from prometheus_client import multiprocess

from hooks.metrics import MULTIPROC_ENV
from logline import formatter

PROBE_PATHS = frozenset({"/healthz", "/metrics"})


class NoProbes(logging.Filter):
    """Drops gunicorn access records of probe requests (their atoms name the path as `U`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        atoms = record.args
        return not (isinstance(atoms, Mapping) and atoms.get("U") in PROBE_PATHS)


logconfig_dict: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"no_probes": {"()": NoProbes}},
    "formatters": {"line": {"()": formatter}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "line",
            "stream": "ext://sys.stderr",
        },
        "access": {
            "class": "logging.StreamHandler",
            "formatter": "line",
            "filters": ["no_probes"],
            "stream": "ext://sys.stdout",
        },
    },
    "root": {"handlers": ["stderr"], "level": "INFO"},
    "loggers": {
        "gunicorn.error": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
}


def on_starting(server: Any) -> None:
    """Start with an empty metrics directory: files a previous run left would add its counts
    to this one's (multiprocess mode, `hooks/metrics.py`)."""
    folder = os.environ.get(MULTIPROC_ENV)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    """A worker that exited leaves its gauges' files; they no longer count."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
