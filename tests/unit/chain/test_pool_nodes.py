from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    Devices,
    DevicesGroup,
    DevicesSpec,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
    Placement,
)
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.pool_nodes import PoolCard, PoolNode, pool_devices_selector, pool_node
from chain.quantity import format_quantity
from chain.units import RESOURCE_MAX_UNITS

A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"


def test_devices_selector_of_a_card_pool() -> None:
    labels = {
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        A + "nvidia-tesla-t4": "true",
        G + "amd-epyc-7763": "true",
        "resource.gpustack.ai/type": "instancetypes",
    }
    assert pool_devices_selector(labels) == {
        "gpustack.ai/managed": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        A + "nvidia-tesla-t4": "true",
        G + "amd-epyc-7763": "true",
    }


def test_cpu_pool_selects_no_devices() -> None:
    labels = {"feature.gpustack.ai/acceleratable": "false", G + "amd-epyc-7763": "true"}
    assert pool_devices_selector(labels) is None
    assert pool_devices_selector({"kubernetes.io/os": "linux"}) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (72, "72"),
        (Fraction(57, 2), "28500m"),
        (Fraction(1, 1000), "1m"),
        (Fraction(1, 10**6), "1u"),
        (Fraction(1, 3), "333333334n"),
    ],
)
def test_format_quantity(value: int | Fraction, text: str) -> None:
    assert format_quantity(value) == text


# --- pool_node: the fast reader agrees with the typed parser ------------------------------------

_names = st.text("abcdef0123456789-", min_size=1, max_size=10)
_profiles = st.builds(
    PartitionProfile,
    _names,
    st.integers(0, 100_000),
    st.integers(0, 7),
    st.integers(0, 7),
    st.integers(0, 8),
    st.lists(st.builds(Placement, st.integers(0, 7), st.integers(1, 8)), max_size=2).map(tuple),
)
_capability = st.builds(
    AcceleratorStatus,
    st.booleans(),
    st.builds(LogicalSliced, st.integers(0, 128), st.booleans()),
    st.builds(PhysicalSliced, st.integers(0, 7), st.lists(_profiles, max_size=3).map(tuple)),
)
_counts = st.lists(st.builds(ProfileCount, _names, st.integers(0, 7)), max_size=3).map(tuple)


@st.composite
def _devices(draw: st.DrawFn) -> Devices:
    ids = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
    cards = tuple(
        Accelerator(ident, index, status=draw(_capability)) for index, ident in enumerate(ids)
    )
    rows = tuple(
        AcceleratorAllocation(
            ident,
            index,
            draw(st.sampled_from([m for m in Mode if m != Mode.VISIBILITY])),
            remaining=draw(st.integers(0, RESOURCE_MAX_UNITS)),
            allocated_slices=draw(st.integers(0, 8)),
            allocated_profiles=draw(_counts),
            remaining_profiles=draw(_counts),
        )
        for index, ident in enumerate(ids)
        if draw(st.booleans())
    )
    other = DevicesGroup("a10g", "nvidia", "NVIDIA A10G", 23028, accelerators=cards[:1])
    group = DevicesGroup(
        "tesla-t4",
        "nvidia",
        "Tesla T4",
        15360,
        runtime_version=draw(st.sampled_from(["", "12.4"])),
        compute_capability="7.5",
        accelerators=cards,
    )
    ledger = DevicesStatus((DevicesAllocationGroup("tesla-t4", "nvidia", rows),))
    return Devices("node-a", DevicesSpec((other, group)), ledger)


def _reference(devices: Devices) -> PoolNode:
    """What the views should see, from the typed parser."""
    group = devices.spec.group("nvidia", "tesla-t4")
    assert group is not None
    cards = tuple(
        PoolCard(card.id, card.status, devices.status.row("nvidia", "tesla-t4", card.id))
        for card in group.accelerators
    )
    return PoolNode(devices.name, "nvidia", group.runtime_version, group.compute_capability, cards)


def _seen(card: PoolCard) -> tuple[Any, ...]:
    """The fields the views read (the fast reader skips placements and transport fields)."""
    physical = card.capability.physical_sliced
    row = card.row
    return (
        card.id,
        card.capability.logical_sliced,
        physical.count,
        [(p.name, p.count, p.memory_mib) for p in physical.profiles],
        card.remaining,
        card.mode,
        card.ledger_ready,
        None if row is None else (row.allocated_profiles, row.remaining_profiles),
    )


@given(_devices())
def test_fast_reader_matches_the_typed_parser(devices: Devices) -> None:
    obj = devices.render()
    node = pool_node(obj, "nvidia-tesla-t4")
    expected = _reference(Devices.parse(obj))
    assert node is not None
    assert (node.name, node.runtime_version, node.compute_capability) == (
        expected.name,
        expected.runtime_version,
        expected.compute_capability,
    )
    assert [_seen(c) for c in node.cards] == [_seen(c) for c in expected.cards]


def _one_card(status: dict[str, Any] | None = None, rows: list[Any] | None = None) -> Any:
    card: dict[str, Any] = {"id": "GPU-0", "index": 0}
    if status is not None:
        card["status"] = status
    obj: dict[str, Any] = {
        "metadata": {"name": "node-a"},
        "spec": {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": [card]}]},
    }
    if rows is not None:
        obj["status"] = {"groups": [{"id": "a10g", "manufacturer": "nvidia", "accelerators": rows}]}
    return obj


def test_ledger_wire_rules() -> None:
    # No row: untouched (M); a row without `remaining`: fully used (0).
    node = pool_node(_one_card(), "nvidia-a10g")
    assert (
        node is not None
        and node.cards[0].remaining == RESOURCE_MAX_UNITS
        and node.cards[0].row is None
    )
    used = pool_node(_one_card(rows=[{"id": "GPU-0", "index": 0, "mode": 1}]), "nvidia-a10g")
    assert used is not None and used.cards[0].remaining == 0
    assert used.cards[0].mode == Mode.EXCLUSIVE


def test_other_groups_and_missing_groups() -> None:
    assert pool_node(_one_card(), "nvidia-tesla-t4") is None
    assert pool_node({"metadata": {"name": "n"}}, "nvidia-a10g") is None


def _card_with(**fields: Any) -> Any:
    obj = _one_card({"logicalSliced": {"count": 4}})
    obj["spec"]["groups"][0]["accelerators"][0].update(fields)
    return obj


_BAD_ROW = [{"id": "GPU-0", "index": 0, "mode": 1, "remaining": "x"}]
_NAMELESS = _one_card()
del _NAMELESS["metadata"]["name"]
_CARD_MAP = _one_card()
_CARD_MAP["spec"]["groups"][0]["accelerators"] = {"GPU-0": {}}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (
            _card_with(status={"logicalSliced": {"count": -1}}),
            "spec.groups[0].accelerators[0].status.logicalSliced.count",
        ),
        (_card_with(id=7), "spec.groups[0].accelerators[0].id"),
        (_card_with(status=[]), "spec.groups[0].accelerators[0].status"),
        (_one_card(rows=_BAD_ROW), "status.groups[0].accelerators[0].remaining"),
        (_NAMELESS, "metadata.name"),
        (_CARD_MAP, "spec.groups[0].accelerators"),
    ],
)
def test_errors_name_the_field(obj: Any, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}: "):
        pool_node(obj, "nvidia-a10g")
