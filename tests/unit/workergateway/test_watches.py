"""The watches that wake the gateway (docs/fleet.md, "The gateway process"): what rings the bell,
which members are watched, that a member's change wakes a pass without waiting for the resync,
and that a burst of changes costs a bounded number of passes. Passes are counted, never timed:
the bursts run on a clock of the test's own."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from kubeapi.watch import Event
from workergateway import health
from workergateway.cli import HOLD, run
from workergateway.gateway import Api
from workergateway.watches import (
    Doorbell,
    MemberWatches,
    RingingCache,
    member_credentials,
    spec_and_status,
    spec_only,
)

from .fakes import Clock, MemoryCluster
from .test_gateway import Fleet

Obj = dict[str, Any]
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"


def _obj(kind: str, name: str, spec: Obj, status: Obj, version: str = "1") -> Obj:
    return {
        "kind": kind,
        "metadata": {"name": name, "resourceVersion": version},
        "spec": spec,
        "status": status,
    }


def test_a_watch_rings_on_its_first_list_and_then_only_when_what_the_pass_reads_changed() -> None:
    bell = Doorbell()
    types = RingingCache(bell, spec_and_status)
    queues = RingingCache(bell, spec_only)
    a_type = _obj(INSTANCE_TYPE, "t4", {"os": "linux"}, {"phase": "Active"})
    a_queue = _obj(CLUSTER_QUEUE, "t4", {"resourceGroups": []}, {"admittedWorkloads": 0})
    types.replace([a_type], "1")
    queues.replace([a_queue], "1")
    assert bell.rings == 2  # a first list always rings, even of what the pass already read
    types.replace([a_type], "2")  # a relist (after a 410) that found nothing new
    types.apply(Event("BOOKMARK", {"metadata": {"resourceVersion": "3"}}))
    # Only the server's bookkeeping moved, or a queue's usage: nothing the pass reads.
    types.apply(Event("MODIFIED", {**a_type, "metadata": {"name": "t4", "resourceVersion": "4"}}))
    queues.apply(Event("MODIFIED", {**a_queue, "status": {"admittedWorkloads": 3}}))
    assert bell.rings == 2
    types.apply(Event("MODIFIED", {**a_type, "status": {"phase": "Inactive"}}))
    queues.apply(Event("MODIFIED", {**a_queue, "spec": {"resourceGroups": [{}]}}))
    assert bell.rings == 4
    types.apply(Event("ADDED", _obj(INSTANCE_TYPE, "a100", {}, {})))
    types.apply(Event("DELETED", a_type))
    types.apply(Event("DELETED", a_type))  # already gone: no change
    assert bell.rings == 6
    types.replace([], "9")  # a relist that lost an object
    assert bell.rings == 7


def _secret(name: str, data: Obj, version: str = "1") -> Obj:
    return {"kind": "Secret", "metadata": {"name": name, "resourceVersion": version}, "data": data}


def test_a_members_secret_rings_when_its_data_changes_and_no_other_secret_does() -> None:
    """A rotated token wakes the pass that reads it (docs/fleet.md, "Rotating the gateway's
    token"); a Secret of the namespace that is not a member's rings only by coming or going."""
    bell = Doorbell()
    secrets = RingingCache(bell, member_credentials)
    member = _secret("gpustack-gateway-west", {"kubeconfig": "b2xk"})
    other = _secret("notes", {"text": "YQ=="})
    secrets.replace([member, other], "1")
    assert bell.rings == 1
    labelled = {**member, "metadata": {**member["metadata"], "labels": {"team": "a"}}}
    secrets.apply(Event("MODIFIED", labelled))
    secrets.apply(Event("MODIFIED", {**other, "data": {"text": "Yg=="}}))
    assert bell.rings == 1
    secrets.apply(Event("MODIFIED", {**member, "data": {"kubeconfig": "bmV3"}}))
    assert bell.rings == 2
    secrets.apply(Event("ADDED", _secret("gpustack-gateway-east", {"kubeconfig": "ZQ=="})))
    assert bell.rings == 3


def test_the_doorbell_answers_at_once_when_it_rang_since() -> None:
    bell = Doorbell()
    assert bell.wait(0, 0.0) == 0
    bell.ring()
    assert bell.wait(0, 3600.0) == 1  # would block for an hour if the ring were missed


class Watched:
    """A member's watch over its cluster in memory: two ringing caches filled by a list, then
    kept by the cluster's own change events, as a list and a watch keep them."""

    def __init__(self, bell: Doorbell, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.caches = {
            INSTANCE_TYPE: RingingCache(bell, spec_and_status),
            CLUSTER_QUEUE: RingingCache(bell, spec_only),
        }
        self.caches[INSTANCE_TYPE].replace(cluster.list(WORKER_API, INSTANCE_TYPE), "1")
        self.caches[CLUSTER_QUEUE].replace(cluster.list(KUEUE_API, CLUSTER_QUEUE), "1")
        self.stopped = False
        cluster.watchers.append(self.event)

    def event(self, kind: str, obj: Obj) -> None:
        cache = self.caches.get(obj["kind"])
        if cache is not None:
            cache.apply(Event(kind, obj))

    def stop(self) -> None:
        self.stopped = True
        self.cluster.watchers.remove(self.event)


class WatchedFleet(Fleet):
    """A fleet whose gateway watches its members through `Watched`."""

    def __init__(self, fixture: str) -> None:
        super().__init__(fixture)
        self.bell = Doorbell()
        self.started: list[Watched] = []
        self.gateway.watches = self.watches = MemberWatches(self.start)

    def start(self, name: str, client: Api) -> Watched:
        assert client is self.members[name]  # the pass's client of that member
        watched = Watched(self.bell, self.members[name])
        self.started.append(watched)
        return watched

    def change_remaining(self, member: str, percent: int) -> None:
        """What a member's status hook writes when a slice is taken or freed on it."""
        obj = self.members[member].get(WORKER_API, INSTANCE_TYPE, T4)
        assert obj is not None
        obj["status"]["acceleratorSliced"]["remaining"] = str(percent)
        self.members[member].put(obj)

    def fleet_remaining(self) -> str:
        return str(self.pools()[T4]["acceleratorSliced"]["remaining"])


def test_each_active_member_is_watched_from_the_pass_that_finds_it_until_it_leaves() -> None:
    fleet = WatchedFleet("three-members")
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["east", "north", "west"]
    fleet.gateway.run_pass()
    assert fleet.watches.started == 3  # a pass that changes nothing starts nothing
    fleet.set_active("north", False)
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["east", "west"]
    assert [w.stopped for w in fleet.started] == [False, True, False]
    assert fleet.members["north"].watchers == []  # torn down, not left listening
    fleet.unreachable.add("west")  # its Secret is gone: no client, so no watch
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["east"]
    fleet.unreachable.clear()
    fleet.set_active("north", True)
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["east", "north", "west"]
    assert fleet.watches.started == 5


def test_a_member_whose_client_was_made_anew_is_watched_anew() -> None:
    starts: list[tuple[str, Api]] = []
    stops: list[str] = []

    class Stub:
        def __init__(self, name: str) -> None:
            self.name = name

        def stop(self) -> None:
            stops.append(self.name)

    def start(name: str, client: Api) -> Stub:
        starts.append((name, client))
        return Stub(name)

    watches = MemberWatches(start)
    first, rotated = MemoryCluster(), MemoryCluster()
    watches.follow({"east": first})
    watches.follow({"east": first})
    watches.follow({"east": rotated})  # a rotated Secret: SecretClients made a new client
    assert [client for _, client in starts] == [first, rotated]
    assert stops == ["east"]
    watches.stop()
    assert stops == ["east", "east"] and watches.members == []


def test_a_members_change_wakes_a_pass_without_waiting_for_the_resync() -> None:
    fleet = WatchedFleet("two-members")
    stopping = threading.Event()
    passes = threading.Semaphore(0)
    real = fleet.gateway.run_pass

    def counted() -> Any:
        report = real()
        passes.release()
        return report

    fleet.gateway.run_pass = counted  # type: ignore[method-assign]
    loop = threading.Thread(
        target=run,
        args=(fleet.gateway, fleet.bell.wait, 3600.0, stopping, health.Liveness(3600)),
        daemon=True,
    )
    loop.start()
    try:
        assert passes.acquire(timeout=30)  # the pass at start
        # The watches' first lists rang: the pass they wake finds nothing new. Then the loop
        # only waits, for an hour, unless a member changes.
        assert passes.acquire(timeout=30)
        before = fleet.gateway.passes
        fleet.change_remaining("west", 7)
        assert passes.acquire(timeout=30), "no pass came: only the resync, an hour away, would"
        assert fleet.gateway.passes == before + 1
        east = fleet.members["east"].get(WORKER_API, INSTANCE_TYPE, T4)
        assert east is not None
        assert fleet.fleet_remaining() == str(
            int(east["status"]["acceleratorSliced"]["remaining"]) + 7
        )
    finally:
        stopping.set()
        loop.join(timeout=30)
    assert not loop.is_alive()


def _passes(rings: list[float], end: float, pass_cost: float = 0.05) -> list[float]:
    """When each pass began, for a doorbell rung at `rings`, a resync of an hour."""
    stopping = threading.Event()
    clock = Clock(rings, end, stopping)
    began: list[float] = []

    class Gateway:
        def run_pass(self) -> Any:
            began.append(clock.now)
            clock.advance(clock.now + pass_cost)
            return _Report()

    run(
        Gateway(),  # type: ignore[arg-type]
        clock.wake,
        3600.0,
        stopping,
        health.Liveness(3600),
        debounce=0.1,
        clock=lambda: clock.now,
    )
    return began


class _Report:
    applied: list[str] = []  # noqa: RUF012 (read only)
    deleted: list[str] = []  # noqa: RUF012
    unreadable: dict[str, str] = {}  # noqa: RUF012
    failed_writes: dict[str, str] = {}  # noqa: RUF012


@pytest.mark.parametrize("changes", [1, 10, 1000])
def test_changes_that_come_at_once_cost_one_pass(changes: int) -> None:
    began = _passes([10.0] * changes, end=60.0)
    assert len(began) == 2  # the pass at start, and one for all of them
    assert 10.0 < began[1] <= 10.0 + 0.1 + 1e-9  # after the debounce's quiet, not the resync


@pytest.mark.parametrize("changes", [10, 100, 1000])
def test_a_burst_costs_a_bounded_number_of_passes(changes: int) -> None:
    """`changes` rings spread evenly over one second: whatever their number, one pass per HOLD
    seconds of burst and one for its tail, besides the one at start."""
    rings = [10.0 + index / changes for index in range(changes)]
    began = _passes(rings, end=60.0)
    bound = 1 + int(1.0 / HOLD) + 1
    assert 2 <= len(began) <= bound, began
    # No ring waits for the resync: the last pass began after the last ring.
    assert began[-1] >= rings[-1]


def test_a_change_during_a_pass_wakes_the_next() -> None:
    began = _passes([10.0, 10.12], end=60.0, pass_cost=0.05)
    # The first ring's pass runs 10.1..10.15; the ring at 10.12 lands inside it.
    assert len(began) == 3 and began[2] > 10.12


def test_a_watch_that_cannot_start_fails_no_pass_and_is_tried_again() -> None:
    fleet = WatchedFleet("two-members")
    real = fleet.start
    failing = {"east"}

    def start(name: str, client: Api) -> Watched:
        if name in failing:
            raise OSError("no room for the client's files")
        return real(name, client)

    fleet.watches.start = start
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["west"]
    assert list(fleet.pools()) == [T4]  # the pass summed both members all the same
    failing.clear()
    fleet.gateway.run_pass()
    assert fleet.watches.members == ["east", "west"]
