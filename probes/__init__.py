"""The one small HTTP server behind every credentialed process's probes and scrapes.

The verdict driver, the node agent and the worker gateway each decide what makes them healthy
(`Probe.check`, theirs to keep) and hand this server the paths to answer: `200 ok` while a
probe's check holds, `503` with the probe's own reason when it does not, `404` for any other
path, and `/metrics` in Prometheus' text format when given the exposition to serve. Each
liveness is a `Heartbeat`: alive while the process's loop keeps finishing passes. Standard
library only, so every process may import it whatever else it holds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
PLAIN_TEXT = "text/plain"
METRICS_PATH = "/metrics"


class Heartbeat:
    """When a loop last beat, on `clock` (monotonic): fresh while that was at most
    `stale_after` seconds ago. Starting counts as a beat (a first pass may take a while) unless
    `started` is False: then stale until the first beat."""

    def __init__(
        self,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        started: bool = True,
    ) -> None:
        self.stale_after = stale_after
        self.clock = clock
        self.last_beat = clock() if started else -float("inf")

    def beat(self) -> None:
        self.last_beat = self.clock()

    def fresh(self) -> bool:
        return self.clock() - self.last_beat <= self.stale_after


@dataclass(frozen=True)
class Probe:
    """One probed path: `check` says whether the process is healthy, `failing` is the 503's
    body that tells a reader of the probe's events why not."""

    check: Callable[[], bool]
    failing: bytes


def serve(
    probes: Mapping[str, Probe],
    port: int,
    host: str,
    thread: str,
    metrics: Callable[[], bytes] | None = None,
    not_found: bytes | None = None,
) -> ThreadingHTTPServer:
    """Answer `probes` (and `/metrics`, given `metrics`) from a daemon thread named `thread`;
    returns the server (its port when `port` is 0), `shutdown()` stops it. `not_found` is the
    404's plain-text body; without it the standard library's own error page answers."""

    class Answers(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == METRICS_PATH and metrics is not None:
                self._answer(200, metrics(), PROMETHEUS_TEXT)
                return
            probe = probes.get(self.path)
            if probe is not None:
                ok = probe.check()
                self._answer(200 if ok else 503, b"ok\n" if ok else probe.failing, PLAIN_TEXT)
            elif not_found is not None:
                self._answer(404, not_found, PLAIN_TEXT)
            else:
                self.send_error(404)

        def _answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a line per probe, every few seconds, would drown the process's own log

    server = ThreadingHTTPServer((host, port), Answers)
    threading.Thread(target=server.serve_forever, name=thread, daemon=True).start()
    return server
