"""The allocator's small parts without gRPC: NUMA hints, the deliver-or-abandon race, and how
a container is picked among pending Pods."""

from __future__ import annotations

import time
from typing import Any

import pytest

from chain.allocation import Code, Refusal
from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from nodeagent.plugin.allocator import Allocator, Attempt, numa_nodes
from nodeagent.plugin.identify import identify
from nodeagent.plugin.node import NodeState, Unidentified
from tests.unit.nodeagent.plugin.fakes import GPU, NVIDIA, FakeCluster, rig, t4_spec


def test_numa_ranges() -> None:
    assert numa_nodes("0") == (0,)
    assert numa_nodes("0-1,3") == (0, 1, 3)
    assert numa_nodes("") == ()
    assert numa_nodes("x,2") == (2,)


def test_attempt_is_settled_once() -> None:
    delivered = Attempt(5.0)
    assert delivered.commit()
    assert not delivered.abandon()
    abandoned = Attempt(5.0)
    assert abandoned.abandon()
    assert not abandoned.commit()
    expired = Attempt(0.0)
    time.sleep(0.001)
    assert not expired.commit()  # past the deadline nothing is delivered


def test_list_and_watch_carries_numa_topology() -> None:
    spec = DevicesSpec(t4_spec("h100-80gb-x8").groups)
    with rig(modes=(Mode.EXCLUSIVE,), spec=spec) as r:
        r.ready()
        numa = r.kubelet.wait_endpoint(GPU).numa
        by_card = {token.split(":")[1]: nodes for token, nodes in numa.items()}
        cards = [card for _, card in spec.cards()]
        assert [by_card[card.id] for card in cards] == [(0,)] * 4 + [(1,)] * 4


def pods(cluster: FakeCluster) -> list[dict[str, Any]]:
    return cluster.pods()


def test_identify_ranks_unserved_feasible_first() -> None:
    cluster = FakeCluster()
    cluster.add("a", ("main", {GPU: "1"}))
    cluster.add("b", ("init", {GPU: "2"}), ("main", {GPU: "1"}))
    cluster.add("done", ("main", {GPU: "1"}))
    cluster.set_phase("done", "Running")

    def pick(**kwargs: Any) -> str:
        options: dict[str, Any] = {
            "kubelet": None,
            "served": lambda _: False,
            "feasible": lambda _: True,
        }
        options.update(kwargs)
        found = identify(pods(cluster), GPU, 1, **options)
        return f"{found.allocations.name}/{found.holder.container}"

    assert pick() == "a/main"
    assert pick(served=lambda c: c.allocations.name == "a") == "b/main"
    assert pick(feasible=lambda c: c.allocations.name == "b") == "b/main"
    assert pick(kubelet={("default", "b"): {}}) == "b/main"
    # Kubelet naming none of the candidates leaves the heuristic alone.
    assert pick(kubelet={("default", "zzz"): {}}) == "a/main"
    # A container kubelet already gave devices of the resource is not waiting for them.
    assert pick(kubelet={("default", "a"): {"main": True}, ("default", "b"): {}}) == "b/main"
    found = identify(pods(cluster), GPU, 2, None, lambda _: False, lambda _: True)
    assert found.holder.container == "init"


def test_a_served_container_kubelet_holds_devices_for_is_not_replayed_for_another() -> None:
    """The e2e race: kubelet asks for a Pod bound a moment ago that the Pod cache has not shown
    yet, while the cache holds served, still Pending Pods asking the same. Replaying one of
    them would give the new Pod its card with no record of it (past what the card holds)."""
    cluster = FakeCluster()
    cluster.add("old", ("main", {GPU: "1"}))
    cluster.add("older", ("main", {GPU: "1"}))
    view = {
        ("default", "old"): {"main": True},
        ("default", "older"): {"main": True},
        ("default", "new"): {"main": False},
    }
    asked: list[int] = []

    def kubelet() -> Any:
        asked.append(1)
        return view

    def served(_: Any) -> bool:
        return True

    with pytest.raises(LookupError):  # the caller then lists afresh and finds the new Pod
        identify(pods(cluster), GPU, 1, kubelet, served, lambda _: True, offered=["t-new"])
    cluster.by_key.pop(("default", "older"))
    with pytest.raises(LookupError):  # one served candidate: kubelet is asked all the same
        identify(pods(cluster), GPU, 1, kubelet, served, lambda _: True, offered=["t-new"])
    assert asked == [1, 1]
    # Kubelet cannot be asked (or lost its checkpoint): the served one stays the last resort.
    found = identify(pods(cluster), GPU, 1, lambda: None, served, lambda _: True)
    assert found.allocations.name == "old"


class LaggingCache:
    """A watch-fed Pod source that has not seen the newest Pods yet; `fresh_pods` has."""

    def __init__(self, cluster: FakeCluster, seen: int) -> None:
        self.cluster = cluster
        self.seen = seen
        self.fresh_lists = 0

    def pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods()[: self.seen]

    def fresh_pods(self) -> list[dict[str, Any]]:
        self.fresh_lists += 1
        return self.cluster.pods()


def test_a_pod_the_cache_has_not_seen_is_found_in_a_fresh_list() -> None:
    cluster = FakeCluster()
    cluster.add("old", ("main", {GPU: "1"}))
    cluster.set_phase("old", "Running")
    cluster.add("new", ("main", {GPU: "1"}))
    source = LaggingCache(cluster, seen=1)
    state = NodeState(t4_spec, source, cluster)
    allocator = Allocator(state, NVIDIA, Mode.EXCLUSIVE)
    card = next(iter(t4_spec().cards()))
    token = f"{t4_spec().groups[0].id}:{card[1].id}:0000"
    allocator.allocate([token], Attempt(5.0))
    assert source.fresh_lists == 1
    assert "main" in parse_allocated(cluster.annotation("new"))
    cluster.add("newer", ("main", {GPU: "1"}))
    source.seen = 3  # the cache has caught up: no second list
    other = next(iter(list(t4_spec().cards())[1:]))
    allocator.allocate([f"{t4_spec().groups[0].id}:{other[1].id}:0000"], Attempt(5.0))
    assert source.fresh_lists == 1


def test_without_a_cache_an_unknown_pod_is_refused_at_once() -> None:
    cluster = FakeCluster()
    state = NodeState(t4_spec, cluster, cluster)
    allocator = Allocator(state, NVIDIA, Mode.EXCLUSIVE)
    card = next(iter(t4_spec().cards()))
    with pytest.raises(Unidentified):
        allocator.allocate([f"{t4_spec().groups[0].id}:{card[1].id}:0000"], Attempt(5.0))


def test_the_hint_finds_a_pod_the_cache_has_not_seen_and_sizes_it() -> None:
    """Kubelet asks for the hint as soon as it admits a Pod, maybe before the watch brings it:
    without the Pod the slice would be packed without its size onto the fullest card, which
    cannot hold it, and Allocate would refuse (seen once in test_device_plugin's e2e run). The
    hint reads afresh, as Allocate does."""
    sliced = GPU + ".sliced"
    whole = str(1_600_000)

    def slice_of(units: str, percent: str) -> dict[str, str]:
        return {sliced: "1", sliced + ".units": units, sliced + ".memory-percentage": percent}

    cluster = FakeCluster()
    cluster.add("half", ("main", slice_of("800000", "50")))
    source = LaggingCache(cluster, seen=1)
    allocator = Allocator(NodeState(t4_spec, source, cluster), NVIDIA, Mode.SLICED)
    tokens = [a.id for a in allocator.advertised()]
    allocator.allocate(allocator.preferred(tokens, [], 1), Attempt(5.0))
    [held] = parse_allocated(cluster.annotation("half"))["main"].device_ids
    cluster.set_phase("half", "Running")
    cluster.add("whole", ("main", slice_of(whole, "100")))  # bound; not in the cache yet
    [hint] = allocator.preferred([t for t in tokens if t != held], [], 1)
    assert source.fresh_lists == 1
    assert hint.split(":")[1] != held.split(":")[1]  # the half-full card cannot hold it


class FlakyWriter:
    """Writes through to the cluster, except the `failing` writes after the first one."""

    def __init__(self, cluster: FakeCluster, failing: int) -> None:
        self.cluster = cluster
        self.failing = failing
        self.calls = 0

    def write(self, namespace: str, name: str, value: str) -> None:
        self.calls += 1
        if 1 < self.calls <= 1 + self.failing:
            raise RuntimeError("the API server is briefly unreachable")
        self.cluster.write(namespace, name, value)


def test_a_give_back_that_fails_is_retried_until_it_lands() -> None:
    """The grant is recorded, then its answer fails (here: the work dir cannot be made), so the
    kubelet will not start the container; the give-back write fails twice, and lands on the
    third try instead of leaving the card charged to nobody (upstream: "retried until it lands
    or the Pod is gone")."""
    sliced = GPU + ".sliced"
    limits = {sliced: "1", sliced + ".units": "800000", sliced + ".memory-percentage": "50"}
    cluster = FakeCluster()
    cluster.add("doomed", ("main", limits))
    writer = FlakyWriter(cluster, failing=2)

    def no_dirs(path: str) -> None:
        raise OSError("read-only file system")

    allocator = Allocator(
        NodeState(t4_spec, cluster, writer), NVIDIA, Mode.SLICED, make_dirs=no_dirs
    )
    tokens = [a.id for a in allocator.advertised()]
    with pytest.raises(Exception, match="read-only file system"):
        allocator.allocate(allocator.preferred(tokens, [], 1), Attempt(5.0))
    assert parse_allocated(cluster.annotation("doomed"))  # the record is still there, for now
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and parse_allocated(cluster.annotation("doomed")):
        time.sleep(0.05)
    assert parse_allocated(cluster.annotation("doomed")) == {}
    assert writer.calls == 4  # the grant, two failed give-backs, the one that landed


@pytest.mark.parametrize(
    ("memory", "units"),
    [
        ({GPU + ".sliced.memory-percentage": "80"}, 1_280_000),
        # 12,288 MiB of the simulated T4's 16,384: three quarters.
        ({GPU + ".sliced.memory-mib": "12288"}, 1_200_000),
        # A hand-written size below what the memory asks does not lower the charge.
        ({GPU + ".sliced.memory-percentage": "80", GPU + ".sliced.units": "1"}, 1_280_000),
    ],
)
def test_a_slice_that_bypassed_the_webhook_is_charged_what_its_memory_asks(
    memory: dict[str, str], units: int
) -> None:
    """A Pod without a Kueue queue label never meets the Pod webhook, so nothing folded its
    memory into units. Charged one unit, two 80 % slices would share one card's ledger while
    HAMi-core lets each use 80 % of its memory; the allocator folds the memory itself."""
    cluster = FakeCluster()
    cluster.add("first", ("main", {GPU + ".sliced": "1", **memory}))
    allocator = Allocator(NodeState(t4_spec, cluster, cluster), NVIDIA, Mode.SLICED)
    tokens = [a.id for a in allocator.advertised()]
    [token] = allocator.preferred(tokens, [], 1)
    allocator.allocate([token], Attempt(5.0))
    [claim] = parse_allocated(cluster.annotation("first"))["main"].claims()
    assert claim.row.allocated == units
    cluster.set_phase("first", "Running")
    cluster.add("second", ("main", {GPU + ".sliced": "1", **memory}))
    card = token.split(":")[1]
    same_card = [t for t in tokens if t.split(":")[1] == card and t != token]
    with pytest.raises(Refusal) as refused:
        allocator.allocate(same_card[:1], Attempt(5.0))
    assert refused.value.code == Code.FAILED_PRECONDITION
    [hint] = allocator.preferred(tokens, [], 1)
    assert hint.split(":")[1] != card  # the hint sends it to another card


def test_two_slices_in_one_container_are_refused_at_allocate() -> None:
    """A slice is one card's share: the Pod webhook refuses `.sliced: 2`, and a Pod that
    bypassed it (no queue label) meets the same rule here, before anything is charged; the
    HAMi-core environment describes one card's limits and cannot fence two."""
    cluster = FakeCluster()
    cluster.add(
        "greedy",
        ("main", {GPU + ".sliced": "2", GPU + ".sliced.memory-percentage": "10"}),
    )
    allocator = Allocator(NodeState(t4_spec, cluster, cluster), NVIDIA, Mode.SLICED)
    tokens = [a.id for a in allocator.advertised()]
    with pytest.raises(Refusal) as refused:
        allocator.allocate(tokens[:2], Attempt(5.0))
    assert refused.value.code == Code.INVALID_ARGUMENT
    assert "one slice per container" in refused.value.message
    assert cluster.annotation("greedy") == ""  # nothing recorded


@pytest.mark.parametrize("release_terminated", [True, False])
def test_a_finished_pods_reservation_holds_its_card_only_as_its_record_charges(
    release_terminated: bool,
) -> None:
    """A whole card granted to a Pod that has since Succeeded (the Pod still listed, as a
    finished Job's Pods are) is free in the ledger when finished Pods release their cards, so
    the verdict driver counts it free and may send a share there. This process's reservation of
    that grant lives as long as the Pod is listed: it must then charge what the record charges,
    not the whole card, or Allocate refuses the share and the card is advertised Unhealthy in
    Shared mode (#35; seen on the real nodes after a churn of mixed modes). With the release
    switched off the finished Pod keeps its card, and the share is still refused."""
    cluster = FakeCluster()
    node = NodeState(t4_spec, cluster, cluster, release_terminated=release_terminated)
    whole = Allocator(node, NVIDIA, Mode.EXCLUSIVE)
    shared = Allocator(node, NVIDIA, Mode.SHARED)
    cluster.add("whole", ("main", {GPU: "1"}))
    exclusive_tokens = [a.id for a in whole.advertised()]
    [token] = whole.preferred(exclusive_tokens, [], 1)
    whole.allocate([token], Attempt(5.0))
    card = token.split(":")[1]
    assert node.reservation(next(iter(node.reserved()))) is not None  # held by this process
    cluster.set_phase("whole", "Succeeded")

    cluster.add("share", ("main", {GPU + ".shared": "1"}))
    on_card = [a for a in shared.advertised() if a.id.split(":")[1] == card]
    assert on_card and all(a.healthy == release_terminated for a in on_card)
    if release_terminated:
        shared.allocate([on_card[0].id], Attempt(5.0))
        [claim] = parse_allocated(cluster.annotation("share"))["main"].claims()
        assert (claim.row.id, claim.row.mode) == (card, Mode.SHARED)
    else:
        with pytest.raises(Refusal) as refused:
            shared.allocate([on_card[0].id], Attempt(5.0))
        assert refused.value.code == Code.FAILED_PRECONDITION
        assert f"card {card} is held in {Mode.EXCLUSIVE} mode" in refused.value.message
