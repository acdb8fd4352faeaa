"""The hooks' gunicorn settings, run for real: every line carries time, level and component, and
the kubelet's probes leave no access line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from testbed.harness import free_port


def test_probes_leave_no_access_line_and_every_line_has_time_level_and_component() -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            f"--bind=127.0.0.1:{port}",
            "--workers=1",
            "--access-logfile=-",
            "--config=python:hooks.gunicorn_conf",
            "hooks.entrance.app:app",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for _ in range(3):
            urllib.request.urlopen(f"{base}/healthz", timeout=5).read()
        bad = urllib.request.Request(
            f"{base}/sync",
            data=json.dumps({"not": "a request"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(bad, timeout=5)
        except urllib.error.HTTPError as error:
            assert error.code == 400
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
    lines = [line for line in output.splitlines() if line.strip()]
    access = [line for line in lines if " gunicorn.access " in line]
    assert len(access) == 1 and '"POST /sync' in access[0], output
    assert not any("/healthz" in line for line in lines), output
    for line in lines:
        day, clock, level, component, _ = line.split(" ", 4)
        assert len(day) == 10 and ":" in clock, line  # 2026-12-02 01:26:47,123
        assert level in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, line
        assert component.startswith(("gunicorn.", "hooks")), line
