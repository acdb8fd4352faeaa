"""A hook app under a real gunicorn on a free loopback port, for the tests that need the server
the Deployments run."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests

from testbed.harness import free_port


@contextmanager
def gunicorn(
    app: str, *flags: str, capture: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`(server, base URL)` once `/healthz` answers; stopped on the way out. With `capture`,
    its output (stdout and stderr) stays readable from `server.stdout` after the block."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", f"--bind=127.0.0.1:{port}", "--workers=1", *flags, app],
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                requests.get(f"{url}/healthz", timeout=1)
                break
            # The socket is bound before the worker boots: on a loaded machine a connection can
            # be accepted and then wait past the read timeout. Both mean "not up yet".
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.1)
        yield server, url
    finally:
        server.terminate()
        server.wait(30)
