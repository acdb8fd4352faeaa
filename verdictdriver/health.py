"""`GET /healthz` for the verdict driver: 200 while its loop finishes passes, else 503.

A pass that hangs (a stuck connection, say) would silently stop every verdict; answering 503 then
lets the kubelet's liveness probe restart the replica. Followers finish passes too (they only
fail to take the Lease), so both replicas report healthy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from probes import Probe, serve


class Heartbeat:
    """When the loop last finished a pass, on the monotonic clock."""

    def __init__(
        self,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        started: bool = True,
    ) -> None:
        self.stale_after = stale_after
        self.clock = clock
        # Starting counts as a beat (the first pass may take a moment) unless `started` is False:
        # then unhealthy until the first beat.
        self._beat = clock() if started else -float("inf")

    def beat(self) -> None:
        self._beat = self.clock()

    def healthy(self) -> bool:
        return self.clock() - self._beat <= self.stale_after


def serve_health(
    heartbeat: Heartbeat,
    port: int,
    host: str = "0.0.0.0",
    metrics: Callable[[], bytes] | None = None,
) -> ThreadingHTTPServer:
    """Serve `/healthz` (and `/metrics`, given `metrics`) on a daemon thread; returns the server
    (its port when `port` is 0)."""
    probes = {"/healthz": Probe(heartbeat.healthy, b"no pass finished recently\n")}
    return serve(probes, port, host, "healthz", metrics=metrics)
