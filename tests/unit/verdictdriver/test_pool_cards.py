"""The pool-cards keeper's pass: what it writes, what it leaves alone, and when it holds back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from builders.instancetypes import type_spec
from chain.ledger import Mode
from chain.pool_cards import PoolCards, pool_cards
from chain.pools import PoolIdentity
from kubeapi import KubeError
from tests.unit.hooks.instancetype.world import (
    card,
    devices,
    group,
    instance_type,
    row,
    settings,
)
from verdictdriver import pool_cards as keeper_module
from verdictdriver.pool_cards import PoolCardsKeeper

Obj = dict[str, Any]
T4 = "nvidia-tesla-t4"
T4_TYPE = instance_type("gpustack--nvidia-tesla-t4-linux-amd64", type_spec(T4))
CPU_TYPE = instance_type("gpustack--generic-linux-amd64", type_spec())


class FakeKube:
    def __init__(self, fail: int | None = None) -> None:
        self.fail = fail
        self.applied: list[Obj] = []

    def apply(self, obj: Obj, manager: str = "") -> Obj:
        assert manager == "gpustack-pool-cards"
        if self.fail is not None:
            raise KubeError(self.fail, "gone")
        self.applied.append(copy.deepcopy(obj))
        return obj


def _node(name: str, mode: Mode = Mode.NONE, rv: str = "1", gkey: str = "amd-epyc-7763") -> Obj:
    first = card(name, 0)
    rows = [] if mode == Mode.NONE else [row(first, mode, remaining=480_000)]
    obj = devices(name, [group(T4, [first, card(name, 1)], "12.4")], rows, gkey=gkey)
    obj["metadata"]["resourceVersion"] = rv
    return obj


def _keeper(
    kube: FakeKube,
    types: list[Obj],
    nodes: list[Obj],
    written: list[Obj] | None = None,
    chain_settings: Obj | None = None,
    leading: bool = True,
    node_objects: list[Obj] | None = None,
) -> PoolCardsKeeper:
    keeper = PoolCardsKeeper(kube, leading=lambda: leading)  # type: ignore[arg-type]
    keeper.types.replace(types, "1")
    keeper.settings.replace([chain_settings] if chain_settings else [], "1")
    keeper.devices.replace(nodes, "1")
    keeper.nodes.replace(node_objects or [], "1")
    keeper.written.replace(written or [], "1")
    return keeper


def _expected(nodes: list[Obj], aware: bool = False, general: str = "generic") -> Obj:
    cards = pool_cards(PoolIdentity(True, general, T4, "linux", "amd64"), aware, nodes)
    assert cards is not None
    return cards.render()


def test_nothing_is_written_before_every_cache_is_listed_or_while_not_leading() -> None:
    kube = FakeKube()
    keeper = PoolCardsKeeper(kube)  # type: ignore[arg-type]
    keeper.types.replace([T4_TYPE], "1")
    assert keeper.keep_once() == 0
    assert _keeper(kube, [T4_TYPE], [_node("t4-1")], leading=False).keep_once() == 0
    assert kube.applied == []


def test_a_card_type_gets_its_pool_tallied_and_a_cpu_type_gets_none() -> None:
    kube = FakeKube()
    nodes = [_node("t4-2", Mode.SHARED), _node("t4-1")]
    assert _keeper(kube, [T4_TYPE, CPU_TYPE], nodes).keep_once() == 1
    [written] = kube.applied
    assert written["metadata"]["name"] == T4_TYPE["metadata"]["name"]
    assert written["metadata"]["ownerReferences"][0]["uid"] == T4_TYPE["metadata"]["uid"]
    assert written["spec"] == _expected(nodes)
    assert PoolCards.parse(written["spec"], "").views.shared.remaining == 3 * 10 + 3


def test_what_the_server_holds_is_not_written_again_nor_tallied_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = FakeKube()
    nodes = [_node("t4-1")]
    keeper = _keeper(kube, [T4_TYPE], nodes)
    keeper.keep_once()
    keeper.written.replace(kube.applied, "2")
    tallies: list[int] = []
    real = keeper_module.tally
    monkeypatch.setattr(keeper_module, "tally", lambda n, d: tallies.append(1) or real(n, d))
    assert keeper.keep_once() == 0
    assert tallies == []
    # A ledger change: a new version of one node is tallied again and written.
    keeper.devices.replace([_node("t4-1", Mode.EXCLUSIVE, rv="2")], "3")
    assert keeper.keep_once() == 1
    assert tallies == [1]
    # A PoolCards that lost its owner reference (or was made by hand) is written again.
    orphan = copy.deepcopy(kube.applied[-1])
    del orphan["metadata"]["ownerReferences"]
    keeper.written.replace([orphan], "4")
    assert keeper.keep_once() == 1


def test_cpu_awareness_narrows_the_pool() -> None:
    aware_type = instance_type(
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
        type_spec(T4, general="amd-epyc-7763"),
    )
    nodes = [_node("t4-1"), _node("t4-x", gkey="intel-xeon-platinum-8259cl")]
    kube = FakeKube()
    on = settings(instance_type_aware_cpu_manufacturer=True)
    _keeper(kube, [aware_type], nodes, chain_settings=on).keep_once()
    assert kube.applied[0]["spec"]["nodes"] == 1
    assert kube.applied[0]["spec"] == _expected(nodes, aware=True, general="amd-epyc-7763")


def test_an_unreadable_devices_is_left_out_and_the_rest_still_counts() -> None:
    broken = _node("t4-2")
    broken["spec"]["groups"][0]["accelerators"][0]["status"]["logicalSliced"]["count"] = "x"
    unlabelled = _node("t4-3")
    unlabelled["metadata"]["labels"] = ["gpustack.ai/managed=true"]
    kube = FakeKube()
    _keeper(kube, [T4_TYPE], [_node("t4-1"), broken, unlabelled]).keep_once()
    assert kube.applied[0]["spec"] == _expected([_node("t4-1")])


def test_a_refused_write_waits_for_the_next_pass() -> None:
    kube = FakeKube(fail=404)
    assert _keeper(kube, [T4_TYPE], [_node("t4-1")]).keep_once() == 0


RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


def _node_object(name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def test_the_pool_is_tallied_per_rack_under_a_rack_profile() -> None:
    kube = FakeKube()
    nodes = [_node("t4-1"), _node("t4-2", Mode.EXCLUSIVE), _node("t4-3")]
    racked = [
        _node_object("t4-1", {HOST: "t4-1", RACK: "rack-1"}),
        _node_object("t4-2", {HOST: "t4-2", RACK: "rack-1"}),
        _node_object("t4-3", {HOST: "t4-3"}),  # no rack label: hostname-only, in no domain
    ]
    rack_profile = settings(topology_levels=[RACK, HOST])
    keeper = _keeper(kube, [T4_TYPE], nodes, chain_settings=rack_profile, node_objects=racked)
    assert keeper.keep_once() == 1
    # t4-2's first card is held exclusively: one whole card free of two.
    assert kube.applied[-1]["spec"]["domains"] == [
        {"name": "rack-1", "freeWholeCards": [2, 1], "idleNodes": 1}
    ]
    # The node moves to another rack: the pool is tallied again though no Devices changed.
    keeper.written.replace(kube.applied, "2")
    moved = [racked[0], _node_object("t4-2", {HOST: "t4-2", RACK: "rack-2"}), racked[2]]
    keeper.nodes.replace(moved, "3")
    assert keeper.keep_once() == 1
    assert [d["name"] for d in kube.applied[-1]["spec"]["domains"]] == ["rack-1", "rack-2"]
    # The hostname-only profile: no domains at all, as before profiles existed.
    keeper.settings.replace([], "4")
    assert keeper.keep_once() == 1
    assert "domains" not in kube.applied[-1]["spec"]
