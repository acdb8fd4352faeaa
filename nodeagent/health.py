"""The agent's liveness and readiness, served over HTTP for the kubelet's probes.

`/healthz` answers 200 while the detect loop keeps turning: every wake-up of the loop beats, and
a loop that has not beaten for `stale_after` seconds (stuck in a driver call, say) answers 503,
so the kubelet restarts the Pod. `/readyz` answers 200 once a report has reached the API server
(the node's NodeFeature and Devices are written) and the loop is alive: until then the node's
pools do not know its cards. Both are plain text. `/metrics` serves `nodeagent.metrics` in
Prometheus' text format when the agent hands it over (`metrics`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class Health:
    def __init__(self, stale_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after = stale_after
        self.clock = clock
        self.last_beat = clock()
        self.reported = False

    def beat(self) -> None:
        self.last_beat = self.clock()

    def mark_reported(self) -> None:
        self.reported = True
        self.beat()

    def live(self) -> bool:
        return self.clock() - self.last_beat <= self.stale_after

    def ready(self) -> bool:
        return self.reported and self.live()


def serve(
    health: Health,
    port: int,
    host: str = "",
    metrics: Callable[[], bytes] | None = None,
) -> ThreadingHTTPServer:
    """Answer the probes (and the scrapes) from a daemon thread; `shutdown()` the returned
    server to stop."""
    answers: dict[str, Callable[[], bool]] = {"/healthz": health.live, "/readyz": health.ready}

    class Probe(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics" and metrics is not None:
                self._answer(200, metrics().decode(), PROMETHEUS_TEXT)
                return
            check = answers.get(self.path)
            if check is None:
                self._answer(404, "not found\n")
            elif check():
                self._answer(200, "ok\n")
            else:
                self._answer(503, f"{self.path.strip('/')} failing\n")

        def _answer(self, code: int, text: str, kind: str = "text/plain") -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the agent's log

    server = ThreadingHTTPServer((host, port), Probe)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
