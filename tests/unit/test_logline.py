"""One log line shape for every process, or JSON lines."""

from __future__ import annotations

import json
import logging

from logline import formatter


def test_every_process_logs_one_line_shape_or_json_lines() -> None:
    record = logging.LogRecord("lifecycle", logging.WARNING, __file__, 1, "a %s", ("b",), None)
    _, _, level, component, message = formatter({}).format(record).split(" ", 4)
    assert (level, component, message) == ("WARNING", "lifecycle", "a b")
    line = json.loads(formatter({"GPUSTACK_LOG_FORMAT": "json"}).format(record))
    assert {k: line[k] for k in ("level", "component", "message")} == {
        "level": "WARNING",
        "component": "lifecycle",
        "message": "a b",
    }
    assert "time" in line
