"""PoolCards: the tally is the views over every node at once, its wire form reads back exactly,
and a Devices object the tally cannot read is named down to the field.

The numbers themselves are checked against hand-worked answers by the status hook's fixtures
(each relates the PoolCards of its case's Devices); here, the properties."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders.instancetypes import type_spec
from chain.ledger import Mode
from chain.pool_cards import (
    Membership,
    PoolCards,
    pool_cards,
    pool_cards_object,
    runtime_versions,
    tally,
)
from chain.pool_nodes import pool_node
from chain.pools import PoolIdentity
from chain.views import accelerator_views
from tests.unit.hooks.instancetype.world import card, devices, group, instance_type, row

T4 = "nvidia-tesla-t4"
IDENTITY = PoolIdentity(True, "generic", T4, "linux", "amd64")


def _node(name: str, modes: list[Mode], runtime: str = "12.4", kind: str = "sliced") -> Any:
    cards = [card(name, number, kind) for number in range(len(modes))]
    rows = [
        row(c, mode, remaining=0 if mode == Mode.EXCLUSIVE else 800_000)
        for c, mode in zip(cards, modes, strict=True)
        if mode != Mode.NONE
    ]
    return devices(name, [group(T4, cards, runtime)], rows)


_modes = st.lists(
    st.sampled_from([Mode.NONE, Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED]), max_size=4
)
_pools = st.lists(st.tuples(_modes, st.sampled_from(["12.4", "12.8", "11.8"])), max_size=5)


@given(_pools)
def test_the_tally_is_the_views_over_the_members_and_reads_back_exactly(shape: Any) -> None:
    objects = [_node(f"t4-{n}", modes, runtime) for n, (modes, runtime) in enumerate(shape)]
    cards = pool_cards(IDENTITY, False, reversed(objects))
    assert cards is not None
    nodes = sorted(
        (node for obj in objects if (node := pool_node(obj, T4)) is not None),
        key=lambda node: node.name,
    )
    assert cards.views == accelerator_views(nodes)
    assert cards.nodes == len(nodes)
    assert list(cards.runtime_versions) == runtime_versions(runtime for _, runtime in shape)
    assert PoolCards.parse(cards.render(), "spec") == cards


def test_pools_without_cards_have_none() -> None:
    assert Membership.of(PoolIdentity(False, "generic", "", "linux", "amd64"), False) is None
    assert Membership.of(PoolIdentity(True, "generic", "", "linux", "amd64"), False) is None
    assert pool_cards(PoolIdentity(False, "generic", "", "linux", "amd64"), False, []) is None
    assert tally([]) == PoolCards()


def test_members_are_chosen_by_label_and_a_node_without_the_group_is_no_node() -> None:
    mine = _node("t4-1", [Mode.NONE])
    unmanaged = _node("t4-2", [Mode.NONE])
    unmanaged["metadata"]["labels"]["gpustack.ai/managed"] = "false"
    other = devices("a10g-1", [group("nvidia-a10g", [card("a10g-1", 0)])])
    other["metadata"]["labels"]["acceleratable.feature.gpustack.ai/" + T4] = "true"
    membership = Membership.of(IDENTITY, False)
    assert membership is not None
    members = membership.members([mine, unmanaged, other])
    assert members == [mine, other]
    assert [node.name for node in membership.nodes(members)] == ["t4-1"]


@pytest.mark.parametrize(
    ("spoil", "field"),
    [
        (
            lambda o: o["spec"]["groups"][0]["accelerators"][0]["status"]["logicalSliced"].update(
                count="128"
            ),
            "spec.groups[0].accelerators[0].status.logicalSliced.count",
        ),
        (
            lambda o: o["status"]["groups"][0]["accelerators"][0].update(mode=9),
            "status.groups[0].accelerators[0].mode",
        ),
        (lambda o: o["metadata"].update(labels=["managed"]), "metadata.labels"),
    ],
)
def test_an_unreadable_devices_is_named_or_skipped(spoil: Any, field: str) -> None:
    broken = _node("t4-1", [Mode.SHARED])
    spoil(broken)
    membership = Membership.of(IDENTITY, False)
    assert membership is not None
    with pytest.raises(ValueError, match="^" + re.escape(field)):
        membership.nodes(membership.members([broken]))
    if field == "metadata.labels":
        skipped: list[Any] = []
        assert membership.members([broken], skip=lambda o, e: skipped.append(o)) == []
        assert skipped == [broken]


@pytest.mark.parametrize(
    ("spoil", "field"),
    [
        (
            lambda s: s["views"]["acceleratorSliced"].update(remaining="-3"),
            "views.acceleratorSliced",
        ),
        (lambda s: s["views"].pop("accelerator"), "views.accelerator"),
        (lambda s: s.update(runtimeVersions="12.4"), "runtimeVersions"),
        (lambda s: s["slicedDetail"]["logical"].update(count=True), "slicedDetail.logical.count"),
    ],
)
def test_a_malformed_spec_is_named(spoil: Any, field: str) -> None:
    spec = copy.deepcopy(PoolCards().render())
    spoil(spec)
    with pytest.raises(ValueError, match=field):
        PoolCards.parse(spec, "")


def test_the_object_is_named_after_its_type_and_owned_by_it() -> None:
    target = instance_type("gpustack--nvidia-tesla-t4-linux-amd64", type_spec(T4))
    obj = pool_cards_object(target, PoolCards())
    assert obj["metadata"]["name"] == target["metadata"]["name"]
    [owner] = obj["metadata"]["ownerReferences"]
    assert owner["uid"] == target["metadata"]["uid"]
    assert "controller" not in owner and "blockOwnerDeletion" not in owner
    del target["metadata"]["uid"]
    assert "ownerReferences" not in pool_cards_object(target, PoolCards())["metadata"]


def _with_ports(obj: Any, *ports: tuple[bool, bool]) -> Any:
    """A Devices object listing network ports, each (rdma, up)."""
    out = copy.deepcopy(obj)
    out["spec"]["interfaces"] = [
        {"name": f"p{n}", "pciAddress": "0000:1c:00.0", "linkLayer": "Ethernet", "rdma": r, "up": u}
        for n, (r, u) in enumerate(ports)
    ]
    return out


def test_the_tally_counts_the_nodes_with_an_rdma_port_up() -> None:
    objects = [
        _with_ports(_node("t4-1", [Mode.NONE]), (False, True), (True, True)),
        _with_ports(_node("t4-2", [Mode.NONE]), (True, False)),  # its RDMA port is down
        _with_ports(_node("t4-3", [Mode.NONE]), (False, True)),  # Ethernet only
        _node("t4-4", [Mode.NONE]),  # no ports listed
        _with_ports(_node("t4-5", [Mode.NONE]), (True, True)),
    ]
    cards = pool_cards(IDENTITY, False, objects)
    assert cards is not None and (cards.nodes, cards.rdma_nodes) == (5, 2)
    assert PoolCards.parse(cards.render(), "spec") == cards
    # A PoolCards written before the count existed reads as none.
    older = {key: value for key, value in cards.render().items() if key != "rdmaNodes"}
    assert PoolCards.parse(older, "spec").rdma_nodes == 0


@given(_pools, st.lists(st.sampled_from(["rack-1", "rack-2", None]), min_size=5, max_size=5))
def test_domains_count_each_nodes_free_whole_cards(shape: Any, racks: list[str | None]) -> None:
    objects = [_node(f"t4-{n}", modes) for n, (modes, _) in enumerate(shape)]
    domain_of = {f"t4-{n}": rack for n, rack in enumerate(racks) if rack is not None}
    nodes = sorted(
        (node for obj in objects if (node := pool_node(obj, T4)) is not None),
        key=lambda node: node.name,
    )
    cards = tally(nodes, domain_of)
    # The oracle: a whole card is one with no row (Mode.NONE in `_node`).
    expected: dict[str, list[int]] = {}
    idle: dict[str, int] = {}
    for n, (modes, _) in enumerate(shape):
        rack = domain_of.get(f"t4-{n}")
        if rack is None or not modes:
            continue
        free = modes.count(Mode.NONE)
        expected.setdefault(rack, []).append(free)
        idle[rack] = idle.get(rack, 0) + (free == len(modes))
    assert {d.name: list(d.free) for d in cards.domains} == {
        rack: sorted(free, reverse=True) for rack, free in expected.items()
    }
    assert {d.name: d.idle for d in cards.domains} == idle
    assert [d.name for d in cards.domains] == sorted(expected)
    assert PoolCards.parse(cards.render(), "spec") == cards
    if not cards.domains:
        assert "domains" not in cards.render()


def test_a_malformed_domain_is_named() -> None:
    spec = {**PoolCards().render(), "domains": [{"name": "rack-1", "freeWholeCards": [2, -1]}]}
    with pytest.raises(ValueError, match=r"domains\[0\]\.freeWholeCards\[1\]"):
        PoolCards.parse(spec, "")
    summary = PoolCards.parse(
        {**spec, "domains": [{"name": "rack-1", "freeWholeCards": [8, 8, 6], "idleNodes": 2}]}, ""
    ).domains[0]
    assert summary.summary() == "rack-1:2/3"
