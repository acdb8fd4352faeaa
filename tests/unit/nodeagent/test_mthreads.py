"""The MThreads detector on recorded MTML answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.vendors.mthreads.detect import MthreadsDetector
from nodeagent.vendors.mthreads.mtml import Mtml
from nodeagent.vendors.mthreads.recorded import RecordedMtml
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded


def detector(mtml: RecordedMtml, tmp_path: Path, table: ManufacturerTable) -> MthreadsDetector:
    buses = [device["bus"] for device in mtml.devices if "bus" in device]
    return MthreadsDetector(mtml, fake_sysfs(tmp_path, "1ed5", buses), table["mthreads"])


def test_the_fake_is_an_mtml_surface() -> None:
    surface: Mtml = RecordedMtml(recorded("mthreads", "s4000-x8"))  # checked by mypy
    assert surface.device_count() == 9


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = MthreadsDetector(maker=table["mthreads"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()


def test_eight_s4000(tmp_path: Path, table: ManufacturerTable) -> None:
    mtml = RecordedMtml(recorded("mthreads", "s4000-x8"))
    (group,) = detector(mtml, tmp_path, table).detect()
    # The guest virtual device is not a card of this node.
    assert (group.id, group.name, group.memory, group.cores) == (
        "mtt-s4000",
        "MTT S4000",
        49152,
        8192,
    )
    assert (group.driver_version, group.runtime_version) == ("2.7.0", "")
    cards = group.accelerators
    assert len(cards) == 8
    assert cards[0].id == "6a1f3c2d-0000-4e5f-8a9b-0c1d2e3f4a5b"
    # Positions in MTML's enumeration, the virtual device's included.
    assert [card.physical_indexes for card in cards][2:5] == [(2,), (4,), (5,)]
    assert cards[7].topology.pci_bus_id == "0000:fe:00.0"
    assert [card.status.unhealthy for card in cards].index(True) == 1
    assert {card.status.logical_sliced.count for card in cards} == {16}
    assert not group.sliced_detail.logical.cores_percentage_overcommit
    assert mtml.open == set()  # every device object was freed


def test_partial_answers(tmp_path: Path, table: ManufacturerTable) -> None:
    mtml = RecordedMtml(recorded("mthreads", "s80-partial"))
    (group,) = detector(mtml, tmp_path, table).detect()
    (card,) = group.accelerators
    assert (group.name, group.memory, group.cores, group.driver_version) == (
        "MTT S80",
        16384,
        0,
        "",
    )
    assert (card.physical_indexes, card.status.unhealthy) == ((0,), False)
    assert mtml.open == set()


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(RecordedMtml(recorded("mthreads", "s4000-x8")), tmp_path, table).monitor()
    assert [(m.memory_used_mib, m.unhealthy) for m in metrics][:3] == [
        (0, False),
        (0, True),
        (40000, False),
    ]


def test_no_count_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    mtml = RecordedMtml(recorded("mthreads", "s4000-x8"))
    mtml.count_refused = True
    assert detector(mtml, tmp_path, table).detect() == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [("bus", "S4000#0"), ("memory", {"total_bytes": -1, "used_bytes": 0, "uncorrected_errors": 0})],
)
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    mtml = RecordedMtml(recorded("mthreads", "s4000-x8"))
    mtml.devices[0][key] = value
    with pytest.raises(ValueError):
        detector(mtml, tmp_path, table).detect()
    assert mtml.open == set()  # freed even when the answer is broken
