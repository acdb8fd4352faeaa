"""The allocator's small parts without gRPC: NUMA hints, the deliver-or-abandon race, and how
a container is picked among pending Pods."""

from __future__ import annotations

import time
from typing import Any

from chain.devices import DevicesSpec
from chain.ledger import Mode
from nodeagent.plugin.allocator import Attempt, numa_nodes
from nodeagent.plugin.identify import identify
from tests.unit.nodeagent.plugin.fakes import GPU, FakeCluster, rig, t4_spec


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
