"""The gateway's `/healthz` and `/metrics` (port 8080 by default).

`/healthz` is 200 while passes finish: a pass that hangs (a member's API server that accepts
and never answers, past every timeout) would freeze the fleet's views unnoticed, so 503 then
lets the kubelet's liveness probe restart the Pod. The metrics are read from the last pass at
scrape time:

- `gpustack_fleet_passes_total`: passes finished;
- `gpustack_fleet_members`: Active members read and summed by the last pass;
- `gpustack_fleet_members_unreadable`: Active members the last pass could not read;
- `gpustack_fleet_pools`: pools of the last pass's answer;
- `gpustack_fleet_pool_conflicts`: pools whose members disagree, kept as last written;
- `gpustack_fleet_pools_unmirrored`: pools a member lacks namespaces for (or whose members'
  LocalQueues could not be listed);
- `gpustack_fleet_write_failures`: `FleetPool` writes of the last pass that did not land (the
  next pass makes them again).
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from probes import Heartbeat, Probe
from probes import serve as probes_serve
from workergateway.gateway import Gateway


class Liveness(Heartbeat):
    """Healthy while the last pass finished less than `stale_after` seconds ago (and, before
    the first, while the process is younger than that)."""

    def passed(self) -> None:
        self.beat()

    def alive(self) -> bool:
        return self.fresh()


def registry(gateway: Gateway) -> CollectorRegistry:
    """The gateway's metrics, each read from `gateway` when scraped."""
    found = CollectorRegistry(auto_describe=True)
    readings: dict[str, tuple[str, Callable[[], float]]] = {
        "gpustack_fleet_passes_total": ("Passes finished.", lambda: gateway.passes),
        "gpustack_fleet_members": (
            "Active members the last pass read and summed.",
            lambda: len(gateway.last.members),
        ),
        "gpustack_fleet_members_unreadable": (
            "Active members the last pass could not read (counted as inactive).",
            lambda: len(gateway.last.unreadable),
        ),
        "gpustack_fleet_pools": (
            "Pools of the last pass's answer.",
            lambda: gateway.pools,
        ),
        "gpustack_fleet_pool_conflicts": (
            "Pools whose members disagree on the hardware, kept as last written.",
            lambda: len(gateway.last.conflicts),
        ),
        "gpustack_fleet_pools_unmirrored": (
            "Pools a member lacks namespaces for, or whose members' LocalQueues could not be "
            "listed (the FleetPool's NamespacesMirrored condition says which).",
            lambda: len(gateway.last.unmirrored),
        ),
        "gpustack_fleet_write_failures": (
            "FleetPool writes of the last pass that did not land.",
            lambda: len(gateway.last.failed_writes),
        ),
    }
    for name, (text, read) in readings.items():
        Gauge(name, text, registry=found).set_function(read)
    return found


def serve(liveness: Liveness, metrics: CollectorRegistry, port: int) -> ThreadingHTTPServer:
    """`/healthz` and `/metrics` on a daemon thread; the server (its port when `port` is 0)."""
    probes = {"/healthz": Probe(liveness.alive, b"no pass finished lately\n")}
    return probes_serve(probes, port, "0.0.0.0", "probes", metrics=lambda: generate_latest(metrics))
