"""`GET /healthz` for the verdict driver: 200 while its loop finishes passes, else 503.

A pass that hangs (a stuck connection, say) would silently stop every verdict; answering 503 then
lets the kubelet's liveness probe restart the replica. Followers finish passes too (they only
fail to take the Lease), so both replicas report healthy.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from probes import Heartbeat as LoopHeartbeat
from probes import Probe, serve


class Heartbeat(LoopHeartbeat):
    """When the loop last finished a pass, on the monotonic clock."""

    def healthy(self) -> bool:
        return self.fresh()


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
