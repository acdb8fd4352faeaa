"""Per-card room and node fit labels (docs/design/vectors.md, "Fit labels (t4, 10 slices per
card)")."""

from __future__ import annotations

from typing import Any

import pytest

from chain.accelerators import Accelerator, AcceleratorStatus, LogicalSliced, PhysicalSliced
from chain.devices import Devices
from chain.fit import fit_label_patch, fit_labels, free_shares, free_slice_units, free_slots
from chain.ledger import AcceleratorAllocation, Mode
from chain.units import RESOURCE_MAX_UNITS

SLICED = "sliced-max-free-units.fit.gpustack.ai/nvidia-t4"
SHARED = "shared-free-cards.fit.gpustack.ai/nvidia-t4"
NONE, EXCLUSIVE, SHARE, SLICE = Mode.NONE, Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED


def card_spec(index: int, slices: int = 10, partitions: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if slices:
        status["logicalSliced"] = {"count": slices}
    if partitions:
        status["physicalSliced"] = {"count": partitions}
    return {"id": f"GPU-{index}", "index": index, "status": status}


def devices(rows: list[tuple[Mode, int]], slices: int = 10, partitions: int = 0) -> Devices:
    """A t4 node whose cards have the given ledger (mode, remaining)."""
    return Devices.parse(
        {
            "kind": "Devices",
            "metadata": {"name": "node-a"},
            "spec": {
                "groups": [
                    {
                        "id": "t4",
                        "manufacturer": "nvidia",
                        "name": "Tesla T4",
                        "memory": 15360,
                        "accelerators": [
                            card_spec(i, slices, partitions) for i in range(len(rows))
                        ],
                    }
                ]
            },
            "status": {
                "groups": [
                    {
                        "id": "t4",
                        "manufacturer": "nvidia",
                        "accelerators": [
                            {"id": f"GPU-{i}", "index": i, "mode": int(mode), "remaining": left}
                            for i, (mode, left) in enumerate(rows)
                        ],
                    }
                ]
            },
        }
    )


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [(NONE, 640000), (NONE, 640000), (NONE, RESOURCE_MAX_UNITS)],
            {SLICED: "1600000", SHARED: "3"},
        ),
        ([(NONE, 640000)] * 4, {SLICED: "640000", SHARED: "4"}),
        ([(EXCLUSIVE, 0), (SLICE, 800000), (SHARE, 480000)], {SLICED: "800000", SHARED: "1"}),
        ([(EXCLUSIVE, 0), (SHARE, 0)], {SLICED: "0", SHARED: "0"}),
    ],
)
def test_fit_label_vectors(rows: list[tuple[Mode, int]], expected: dict[str, str]) -> None:
    assert fit_labels(devices(rows), managed=True) == expected


def test_non_sliceable_card_gets_only_the_shared_label() -> None:
    assert fit_labels(devices([(NONE, RESOURCE_MAX_UNITS)], slices=0), managed=True) == {
        SHARED: "1"
    }


def test_partitioned_card_gets_no_labels() -> None:
    assert fit_labels(devices([(NONE, RESOURCE_MAX_UNITS)], partitions=7), managed=True) == {}


def test_unmanaged_or_missing_devices_get_no_labels() -> None:
    assert fit_labels(devices([(NONE, RESOURCE_MAX_UNITS)]), managed=False) == {}
    assert fit_labels(None, managed=True) == {}


def test_rows_without_a_spec_card_are_skipped() -> None:
    obj = devices([(NONE, RESOURCE_MAX_UNITS)]).render()
    obj["status"]["groups"][0]["accelerators"].append({"id": "GPU-x", "index": 9, "mode": 0})
    assert fit_labels(Devices.parse(obj), managed=True) == {SLICED: "1600000", SHARED: "1"}


def _card(slices: int = 10, partitions: int = 0) -> Accelerator:
    status = AcceleratorStatus(
        logical_sliced=LogicalSliced(slices), physical_sliced=PhysicalSliced(partitions)
    )
    return Accelerator("GPU-0", 0, status=status)


def _row(mode: Mode, left: int, slices: int = 0) -> AcceleratorAllocation:
    return AcceleratorAllocation("GPU-0", 0, mode, remaining=left, allocated_slices=slices)


def test_card_helpers() -> None:
    card = _card()
    assert (free_slots(card, None), free_slice_units(card, None), free_shares(card, None)) == (
        10,
        RESOURCE_MAX_UNITS,
        10,
    )
    assert free_slice_units(card, _row(SLICE, 800000, slices=10)) == -1
    assert free_slice_units(card, _row(SLICE, 800000, slices=9)) == 800000
    assert free_slice_units(card, _row(SHARE, 800000)) == -1
    assert free_shares(card, _row(SHARE, 479999)) == 2
    assert free_shares(card, _row(SLICE, RESOURCE_MAX_UNITS)) == 0
    assert free_shares(_card(partitions=7), None) == 0
    assert free_slice_units(_card(slices=0), None) == -1


def test_patch_sets_changes_and_nulls_stale_fit_labels() -> None:
    current = {SLICED: "1", SHARED: "2", "sliced-max-free-units.fit.gpustack.ai/nvidia-a10": "3"}
    current["kubernetes.io/os"] = "linux"
    assert fit_label_patch(current, {SLICED: "5", SHARED: "2"}) == {
        SLICED: "5",
        "sliced-max-free-units.fit.gpustack.ai/nvidia-a10": None,
    }
    assert fit_label_patch({SLICED: "5"}, {SLICED: "5"}) == {}
