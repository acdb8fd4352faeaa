"""The agent's liveness and readiness, served over HTTP for the kubelet's probes.

`/healthz` answers 200 while the detect loop keeps turning: every wake-up of the loop beats, and
a loop that has not beaten for `stale_after` seconds (stuck in a driver call, say) answers 503,
so the kubelet restarts the Pod. `/readyz` answers 200 once a report has reached the API server
(the node's NodeFeature and Devices are written) and the loop is alive: until then the node's
pools do not know its cards. Both are plain text. `/metrics` serves `nodeagent.metrics` in
Prometheus' text format when the agent hands it over (`metrics`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from probes import Heartbeat, Probe
from probes import serve as probes_serve


class Health(Heartbeat):
    def __init__(self, stale_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(stale_after, clock)
        self.reported = False

    def mark_reported(self) -> None:
        self.reported = True
        self.beat()

    def live(self) -> bool:
        return self.fresh()

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
    probes = {
        "/healthz": Probe(health.live, b"healthz failing\n"),
        "/readyz": Probe(health.ready, b"readyz failing\n"),
    }
    return probes_serve(probes, port, host, "health", metrics=metrics, not_found=b"not found\n")
