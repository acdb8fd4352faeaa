"""A share and a whole card asked together on a 2-card node, through the real gRPC plugins
(#35: the v0.1.0 agent refused the kubelet's exclusive pick, "held in Shared mode").

The kubelet admits Pods one at a time, but two things it reads lag behind a grant: its own
device list (the agent's ListAndWatch update marking the card Unhealthy in the other modes
arrives after the Allocate answer, and the kubelet applies it on another goroutine) and the
agent's Pod cache (the grant's annotation is journaled and written after the answer; the Pod
watch brings it later). So the next Pod's GetPreferredAllocation is asked with the card just
granted still offered, and the hint must not pick it: only this process's reservations know it
is taken. The first test is that interleaving made deterministic (the kubelet's device list
held, the Pod cache frozen); the second runs two Allocate calls for one card in parallel
many times: exactly one is granted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from nodeagent.plugin import node as node_module
from nodeagent.plugin import protos
from nodeagent.plugin.node import Pod
from testbed.kubelet import AdmissionError
from tests.unit.nodeagent.plugin.fakes import (
    GPU,
    SHARED,
    FakeCluster,
    Rig,
    WatchAway,
    rig,
    t4_spec,
)

grpc = protos.grpc_runtime()
L4X2 = t4_spec("l4x2")
CARDS = [card.id for _, card in L4X2.cards()]
ROUNDS = 40


class LaggingWatch:
    """The agent's Pod cache: what the API server holds, or, while `frozen`, the list as the
    watch had it then (the grant's annotation not in it yet)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.seen: list[dict[str, Any]] | None = None

    def pods(self) -> Sequence[Pod]:
        return self.cluster.pods() if self.seen is None else self.seen

    @contextmanager
    def frozen(self) -> Iterator[None]:
        self.seen = self.cluster.pods()
        try:
            yield
        finally:
            self.seen = None


def _cards(r: Rig, name: str) -> set[str]:
    return {
        claim.row.id
        for record in parse_allocated(r.cluster.annotation(name)).values()
        for claim in record.claims()
    }


def _modes(r: Rig, name: str) -> set[Mode]:
    return {
        claim.row.mode
        for record in parse_allocated(r.cluster.annotation(name)).values()
        for claim in record.claims()
    }


@pytest.mark.parametrize("first", ["share", "whole"])
def test_the_kubelet_admits_both_while_its_device_list_and_the_pod_cache_lag(first: str) -> None:
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        watch = LaggingWatch(r.cluster)
        r.node.source = watch
        pods = {
            "share": r.cluster.add("share", ("main", {SHARED: "1"})),
            "whole": r.cluster.add("whole", ("main", {GPU: "1"})),
        }
        second = "whole" if first == "share" else "share"
        # The second Pod's resource: the kubelet has not applied the agent's update yet.
        stale = r.kubelet.wait_endpoint(GPU if second == "whole" else SHARED).changed
        with watch.frozen(), stale:
            r.kubelet.admit(pods[first])
            try:
                r.kubelet.admit(pods[second])
            except AdmissionError as refused:
                pytest.fail(f"the kubelet's pick was refused: {refused}")
        assert _cards(r, "share") and _cards(r, "whole")
        assert not _cards(r, "share") & _cards(r, "whole"), r.kubelet.hints
        assert _modes(r, "share") == {Mode.SHARED} and _modes(r, "whole") == {Mode.EXCLUSIVE}


def _allocate(r: Rig, resource: str, ids: list[str]) -> Any:
    api = protos.deviceplugin()
    return r.kubelet.wait_endpoint(resource).stub.Allocate(
        api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]),
        timeout=10,
    )


def _at_once(r: Rig, calls: dict[str, tuple[str, list[str]]], hint: bool = False) -> dict[str, str]:
    """Each named Allocate (resource, device IDs) from its own thread, released together:
    "granted", or the refusal's code and message. With `hint`, each thread first asks the
    hint with those IDs available, as the kubelet does, and allocates what it names."""
    start = threading.Barrier(len(calls))
    outcome: dict[str, str] = {}

    def call(name: str, resource: str, ids: list[str]) -> None:
        start.wait()
        try:
            _allocate(r, resource, _hinted(r, resource, ids) if hint else ids)
            outcome[name] = "granted"
        except grpc.RpcError as error:
            outcome[name] = f"{error.code()}: {error.details()}"

    threads = [
        threading.Thread(target=call, args=(name, resource, ids))
        for name, (resource, ids) in calls.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


def _token(devices: dict[str, str], card: str) -> str:
    return min(d for d in devices if d.split(":")[1] == card)


def test_two_modes_asking_one_card_at_once_get_it_once() -> None:
    """Both calls name the same card (a kubelet whose lists lag on both resources): every
    round exactly one is granted and the other refused naming the mode that holds the card,
    whichever thread the mutex lets in first. A different card each: both granted."""
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        whole_ids = r.kubelet.wait_devices(GPU, lambda d: len(d) == 2)
        share_ids = r.kubelet.wait_devices(SHARED, lambda d: len(d) == 20)
        winners: dict[str, int] = {"share": 0, "whole": 0}
        for round_ in range(ROUNDS):
            same = round_ % 4 != 3
            share_card, whole_card = CARDS[0], CARDS[0] if same else CARDS[1]
            names = {"share": f"share-{round_}", "whole": f"whole-{round_}"}
            r.cluster.add(names["share"], ("main", {SHARED: "1"}))
            r.cluster.add(names["whole"], ("main", {GPU: "1"}))
            outcome = _at_once(
                r,
                {
                    "share": (SHARED, [_token(share_ids, share_card)]),
                    "whole": (GPU, [_token(whole_ids, whole_card)]),
                },
            )
            granted = sorted(name for name, said in outcome.items() if said == "granted")
            if same:
                assert len(granted) == 1, outcome
                (loser,) = {"share", "whole"} - set(granted)
                held = "Shared" if granted == ["share"] else "Exclusive"
                assert f"is held in {held} mode" in outcome[loser], outcome
                assert "FAILED_PRECONDITION" in outcome[loser], outcome
                winners[granted[0]] += 1
            else:
                assert granted == ["share", "whole"], outcome
                assert not _cards(r, names["share"]) & _cards(r, names["whole"])
            for name in names.values():
                r.cluster.remove(name)
            r.node.notify()
        assert sum(winners.values()) == ROUNDS - ROUNDS // 4


def _hinted(r: Rig, resource: str, available: list[str]) -> list[str]:
    """What the kubelet would allocate from `available`: the agent's hint."""
    api = protos.deviceplugin()
    answer = r.kubelet.wait_endpoint(resource).stub.GetPreferredAllocation(
        api.PreferredAllocationRequest(
            container_requests=[
                api.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, allocation_size=1
                )
            ]
        ),
        timeout=10,
    )
    return list(answer.container_responses[0].deviceIDs)


def test_hints_and_allocations_of_two_modes_in_parallel_never_share_a_card() -> None:
    """Two kubelets' worth of calls at once, each asking the hint over every card (its lists
    lagging) and then Allocate on what it named: with no kubelet ordering the two, both hints
    may come before either grant and name one card, and then Allocate refuses one. Whatever
    the interleaving, no card is ever granted in two modes, and every refusal names the mode
    that holds the card."""
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        whole_ids = sorted(r.kubelet.wait_devices(GPU, lambda d: len(d) == 2))
        share_ids = sorted(r.kubelet.wait_devices(SHARED, lambda d: len(d) == 20))
        refused = 0
        for round_ in range(ROUNDS):
            names = {"share": f"share-{round_}", "whole": f"whole-{round_}"}
            r.cluster.add(names["share"], ("main", {SHARED: "1"}))
            r.cluster.add(names["whole"], ("main", {GPU: "1"}))
            asked = {"share": (SHARED, share_ids), "whole": (GPU, whole_ids)}
            outcome = _at_once(r, asked, hint=True)
            for said in outcome.values():
                if said != "granted":
                    refused += 1
                    assert "FAILED_PRECONDITION" in said and "is held in" in said, outcome
            granted = [names[name] for name, said in outcome.items() if said == "granted"]
            assert granted, outcome
            if len(granted) == 2:
                assert not _cards(r, granted[0]) & _cards(r, granted[1]), outcome
            for name in names.values():
                r.cluster.remove(name)
            r.node.notify()
        print(f"{refused} of {2 * ROUNDS} calls refused: both hints came before either grant")


class JournaledWrites:
    """The annotation writer as the journal runs it: the write lands after the answer (here,
    when `land` says)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.held: list[tuple[str, str, str]] = []

    def write(self, namespace: str, name: str, value: str) -> None:
        self.held.append((namespace, name, value))

    def land(self) -> None:
        for write in self.held:
            self.cluster.write(*write)
        self.held.clear()


def test_a_grant_made_while_the_pod_cache_lags_is_not_forgotten_by_it() -> None:
    """After the API server restarted, the agent's Pod watch waits out its backoff while Pods
    are created and admitted: Allocate finds each in a fresh list and reserves its card, and
    its annotation lands only after the answer. A ListAndWatch tick over the cache, which has
    not seen the Pod, must not take that reservation for a Pod gone: forgotten, the card reads
    free, its shares are offered again, and a share is granted on the card held whole (the
    restart test's wave after the API server's restart, #35). Once the cache lists the Pod and
    then no longer does, its card is free again."""
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        away, writes = WatchAway(r.cluster), JournaledWrites(r.cluster)
        r.node.source, r.node.writer = away, writes
        r.kubelet.admit(r.cluster.add("whole", ("main", {GPU: "1"})))
        r.node.live()  # a stream's tick over the cache that has not seen the Pod
        r.node.notify()
        time.sleep(0.5)  # the streams' rebuild after the tick has reached the kubelet
        r.kubelet.admit(r.cluster.add("share", ("main", {SHARED: "1"})))
        writes.land()
        assert _cards(r, "whole") and _cards(r, "share"), r.kubelet.hints
        assert not _cards(r, "share") & _cards(r, "whole"), r.kubelet.hints

        away.seen = r.cluster.pods()  # the watch is back: both Pods, both records
        r.node.live()
        r.cluster.remove("whole")
        away.seen = r.cluster.pods()
        _, reserved = r.node.live()
        assert {holder.pod_uid for holder in reserved} == {"uid-share"}


def test_a_pod_the_cache_never_saw_is_checked_in_a_fresh_list_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Pod admitted while the watch was away and deleted before it came back is never listed
    by the cache: after `UNSEEN_S` a tick lists afresh, and the Pod's card is free again."""
    monkeypatch.setattr(node_module, "UNSEEN_S", 0.0)
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        away = WatchAway(r.cluster)
        r.node.source = away
        r.kubelet.admit(r.cluster.add("whole", ("main", {GPU: "1"})))
        _, reserved = r.node.live()
        assert {holder.pod_uid for holder in reserved} == {"uid-whole"}  # still there afresh
        r.cluster.remove("whole")
        _, reserved = r.node.live()
        assert not reserved


def test_a_pod_deleted_before_the_cache_saw_it_frees_its_card_within_seconds() -> None:
    """While the watch is away nothing tells the agent that a Pod it admitted from a fresh list
    was deleted: no Pod event, no Allocate. The streams look afresh once the Pod has been unseen
    for `UNSEEN_S` (1 s), so the kubelet is offered the card again in seconds, without waiting
    for the watch (the restart test's next whole card was refused "Insufficient" when this
    waited 60 s)."""
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED), spec=L4X2) as r:
        r.ready()
        r.node.source = WatchAway(r.cluster)
        pod = r.cluster.add("whole", ("main", {GPU: "1"}))
        r.kubelet.admit(pod)
        # The card's shares go Unhealthy (held whole), and stay so while the Pod lives.
        r.kubelet.wait_devices(SHARED, lambda d: protos.UNHEALTHY in d.values())
        time.sleep(2.5)  # past `UNSEEN_S`: the fresh look finds the Pod still there
        assert protos.UNHEALTHY in r.kubelet.wait_devices(SHARED, lambda d: True).values()
        r.kubelet.forget(pod)
        r.cluster.remove("whole")
        r.kubelet.wait_devices(
            SHARED, lambda d: all(h == protos.HEALTHY for h in d.values()), timeout=5.0
        )
        assert r.node.reserved() == {}
