"""The gateway's process around the pass: the loop's wake-ups, `/healthz` and `/metrics`, the
command line."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from kubeapi import KubeError
from workergateway import health
from workergateway.cli import build_parser, run
from workergateway.gateway import Gateway

from .fakes import Clock, MemoryCluster, Recorded
from .test_gateway import Fleet


def test_a_pass_runs_at_start_and_on_every_change_the_watches_report() -> None:
    fleet = Fleet("two-members")
    stopping = threading.Event()
    clock = Clock([10.0, 20.0], end=60.0, stopping=stopping)
    liveness = health.Liveness(stale_after=60)
    run(fleet.gateway, clock.wake, 3600, stopping, liveness, clock=lambda: clock.now)
    assert fleet.gateway.passes == 3
    assert list(fleet.pools()) == ["gpustack--nvidia-tesla-t4-linux-amd64"]


def test_without_a_change_a_pass_runs_every_resync() -> None:
    fleet = Fleet("two-members")
    stopping = threading.Event()
    clock = Clock([], end=95.0, stopping=stopping)
    run(fleet.gateway, clock.wake, 30, stopping, health.Liveness(60), clock=lambda: clock.now)
    assert fleet.gateway.passes == 4  # at 0, 30, 60 and 90


def test_a_pass_failing_on_the_manager_is_logged_and_made_again() -> None:
    fleet = Fleet("two-members")
    real = fleet.manager.list
    failures = [KubeError(503, "unavailable")]

    def flaky(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    fleet.manager.list = flaky  # type: ignore[method-assign]
    stopping = threading.Event()
    clock = Clock([10.0], end=60.0, stopping=stopping)
    run(fleet.gateway, clock.wake, 3600, stopping, health.Liveness(60), clock=lambda: clock.now)
    assert fleet.gateway.passes == 1
    assert list(fleet.pools()) == ["gpustack--nvidia-tesla-t4-linux-amd64"]


def test_healthz_and_metrics() -> None:
    now = [0.0]
    liveness = health.Liveness(stale_after=10, clock=lambda: now[0])
    gateway = Gateway(MemoryCluster(), lambda member: MemoryCluster(), Recorded())
    gateway.run_pass()
    server = health.serve(liveness, health.registry(gateway), port=0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/healthz") as answer:
            assert answer.status == 200
        with urllib.request.urlopen(f"{base}/metrics") as answer:
            text = answer.read().decode()
        assert "gpustack_fleet_passes_total 1.0" in text
        assert "gpustack_fleet_members_unreadable 0.0" in text
        assert "gpustack_fleet_pools_unmirrored 0.0" in text
        now[0] = 11.0
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"{base}/healthz")
        assert raised.value.code == 503
    finally:
        server.shutdown()
        server.server_close()


def test_the_command_line() -> None:
    args = build_parser().parse(["--resync", "5", "--orphan-grace", "0"])
    assert (args.resync, args.orphan_grace, args.fleet_namespace) == (5.0, 0.0, "gpustack-fleet")
    assert args.debounce == 0.1
