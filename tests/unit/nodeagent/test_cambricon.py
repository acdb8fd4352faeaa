"""The Cambricon detector on recorded CNDev answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.vendors.cambricon.cndev import Cndev, open_cndev
from nodeagent.vendors.cambricon.detect import CambriconDetector, neuware_version
from nodeagent.vendors.cambricon.recorded import RecordedCndev
from tests.unit.nodeagent.helpers import write
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded


def detector(cndev: RecordedCndev, tmp_path: Path, table: ManufacturerTable) -> CambriconDetector:
    sysfs = fake_sysfs(tmp_path, "cabc", [card["bus"] for card in cndev.cards])
    return CambriconDetector(cndev, sysfs, table["cambricon"], runtime_version=lambda: "3.8.4")


def test_the_fake_is_a_cndev_surface() -> None:
    surface: Cndev = RecordedCndev(recorded("cambricon", "mlu370-x8-x4"))  # checked by mypy
    assert surface.device_count() == 4


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = CambriconDetector(maker=table["cambricon"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert open_cndev({"NEUWARE_HOME": "/nowhere"}) is None


def test_four_mlu370(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(
        RecordedCndev(recorded("cambricon", "mlu370-x8-x4")), tmp_path, table
    ).detect()
    assert (group.id, group.name, group.memory) == ("mlu370-x8", "MLU370-X8", 49152)
    assert (group.driver_version, group.runtime_version, group.cores) == ("5.10", "3.8.4", 0)
    cards = group.accelerators
    assert cards[0].id == "MLU-7c4b6f2a-3e91-4d0a-8b5e-2f6c9d1a0e37"
    assert [card.physical_indexes for card in cards] == [(0,), (1,), (2,), (3,)]
    assert cards[2].topology.pci_bus_id == "0000:88:00.0"
    assert [card.status.unhealthy for card in cards] == [False, False, False, True]
    assert {card.status.logical_sliced.count for card in cards} == {16}
    assert not group.sliced_detail.logical.cores_percentage_overcommit
    assert group.sliced_detail.logical.count == 64


def test_partial_answers(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(
        RecordedCndev(recorded("cambricon", "mlu590-partial")), tmp_path, table
    ).detect()
    (card,) = group.accelerators  # the second card has no readable UUID
    assert (group.name, group.memory, group.driver_version) == ("MLU590", 81920, "")
    assert (card.physical_indexes, card.status.unhealthy) == ((0,), False)


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(
        RecordedCndev(recorded("cambricon", "mlu370-x8-x4")), tmp_path, table
    ).monitor()
    assert [(m.memory_used_mib, m.unhealthy) for m in metrics][1:4] == [
        (40960, False),
        (1024, False),
        (1024, True),
    ]


def test_no_count_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    cndev = RecordedCndev(recorded("cambricon", "mlu370-x8-x4"))
    cndev.count_refused = True
    assert detector(cndev, tmp_path, table).detect() == ()


@pytest.mark.parametrize(
    ("key", "value"), [("bus", "mlu0"), ("memory", {"total_mib": -1, "used_mib": 0})]
)
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    cndev = RecordedCndev(recorded("cambricon", "mlu370-x8-x4"))
    cndev.cards[0][key] = value
    with pytest.raises(ValueError):
        detector(cndev, tmp_path, table).detect()


def test_neuware_version(tmp_path: Path) -> None:
    assert neuware_version(tmp_path) == ""
    write(tmp_path / "version.txt", "Neuware Version 3.8.4\nCNToolkit 3.7.2")
    assert neuware_version(tmp_path) == "3.8.4"
