"""The Ascend detector on recorded DCMI answers (V1 and V2 drivers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.vendors.ascend.dcmi import Dcmi, open_dcmi
from nodeagent.vendors.ascend.detect import (
    AscendDetector,
    die_text,
    family,
    logical_slices,
    runtime_major,
    soc_name,
    toolkit_home,
    toolkit_version,
)
from nodeagent.vendors.ascend.recorded import RecordedDcmi
from tests.unit.nodeagent.helpers import write
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded


def detector(
    dcmi: RecordedDcmi, tmp_path: Path, table: ManufacturerTable, runtime: str = "8.0.RC2"
) -> AscendDetector:
    buses = [
        device["bus"]
        for devices in dcmi.cards.values()
        if devices != "refused"
        for device in devices
        if "bus" in device
    ]
    sysfs = fake_sysfs(tmp_path, "19e5", buses, numa="1")
    return AscendDetector(dcmi, sysfs, table["ascend"], runtime_version=lambda: runtime)


def test_the_fake_is_a_dcmi_surface() -> None:
    surface: Dcmi = RecordedDcmi(recorded("ascend", "atlas-800t-a2"))  # checked by mypy
    assert surface.api == 1


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = AscendDetector(maker=table["ascend"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert open_dcmi({"CANN_HOME": "/nowhere"}) is None  # no libdcmi.so on this machine


def test_atlas_800t_a2(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(RecordedDcmi(recorded("ascend", "atlas-800t-a2")), tmp_path, table).detect()
    assert (group.id, group.name, group.memory, group.cores) == ("910b3", "910B3", 65536, 20)
    assert (group.driver_version, group.runtime_version, group.family) == (
        "24.1.rc2",
        "8.0.RC2",
        "910B",
    )
    assert group.compute_capability == ""
    cards = group.accelerators
    assert cards[0].id == "3C0A1E2F 5D6B7C81 E9F2A3B 4C5D6E7F 10203"
    assert [card.physical_indexes for card in cards[:2]] == [(0, 0, 0), (1, 1, 0)]
    assert cards[1].topology.pci_bus_id == "0000:01:00.0"
    assert cards[1].topology.numa_affinity == "1"
    assert [card.status.unhealthy for card in cards] == [False] * 4 + [True] + [False] * 3
    assert {card.status.logical_sliced.count for card in cards} == {63}
    assert all(card.status.logical_sliced.cores_percentage_overcommit for card in cards)
    assert group.sliced_detail.logical.count == 8 * 63


def test_a2_on_a_runtime_without_a_vcann_build(tmp_path: Path, table: ManufacturerTable) -> None:
    dcmi = RecordedDcmi(recorded("ascend", "atlas-800t-a2"))
    (group,) = detector(dcmi, tmp_path, table, runtime="7.0.0").detect()
    assert {card.status.logical_sliced.count for card in group.accelerators} == {0}
    assert not group.sliced_detail


def test_atlas_300i_duo(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(
        RecordedDcmi(recorded("ascend", "atlas-300i-duo")), tmp_path, table
    ).detect()
    # Two chips of the first card; its MCU is no NPU, the second card's die cannot be read
    # and the third card will not say how many devices it holds.
    assert (group.id, group.memory, group.cores, group.family) == ("310p3", 44280, 8, "310P")
    assert [card.physical_indexes for card in group.accelerators] == [(0, 0, 0), (1, 0, 1)]
    assert [card.index for card in group.accelerators] == [0, 1]
    # 310P slices only on CANN 9.
    assert {card.status.logical_sliced.count for card in group.accelerators} == {0}
    (sliced,) = detector(
        RecordedDcmi(recorded("ascend", "atlas-300i-duo")), tmp_path, table, "9.1.0"
    ).detect()
    assert {card.status.logical_sliced.count for card in sliced.accelerators} == {63}


def test_v2_driver(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(
        RecordedDcmi(recorded("ascend", "a5-950pr")), tmp_path, table, "9.0.0"
    ).detect()
    assert (group.id, group.name, group.memory, group.family) == ("950pr", "950PR", 131072, "950")
    assert group.driver_version == ""  # V2 has no driver-version query
    assert [card.physical_indexes for card in group.accelerators] == [(8, 0, 0), (9, 1, 0)]
    assert not any(card.status.unhealthy for card in group.accelerators)  # ECC is off
    assert {card.status.logical_sliced.count for card in group.accelerators} == {63}


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    ascend = detector(RecordedDcmi(recorded("ascend", "atlas-800t-a2")), tmp_path, table)
    metrics = ascend.monitor()
    assert len(metrics) == 8
    assert (metrics[5].memory_total_mib, metrics[5].memory_used_mib) == (65536, 61802)
    assert metrics[4].unhealthy
    duo = detector(RecordedDcmi(recorded("ascend", "atlas-300i-duo")), tmp_path, table).monitor()
    assert [(m.memory_total_mib, m.memory_used_mib) for m in duo] == [(44280, 1268), (44280, 0)]


def test_no_card_list_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    dcmi = RecordedDcmi(recorded("ascend", "atlas-800t-a2"))
    dcmi.listing_refused = True
    assert detector(dcmi, tmp_path, table).detect() == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bus", "NPU-3"),
        ("chip", {"chip_type": "Ascend", "chip_name": "", "chip_version": "", "aicore_count": 0}),
        ("hbm", "refused"),  # and the detailed memory query answers a negative size
    ],
)
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    dcmi = RecordedDcmi(recorded("ascend", "atlas-800t-a2"))
    dcmi.cards[2][0][key] = value
    dcmi.cards[2][0]["memory"] = {"total_mb": -1, "available_mb": 0}
    with pytest.raises(ValueError):
        detector(dcmi, tmp_path, table).detect()


@pytest.mark.parametrize(
    ("chip", "soc", "chip_family"),
    [
        ("910B3", "Ascend910B3", "910B"),
        ("Ascend910B2", "Ascend910B2", "910B"),
        ("910B4-1", "Ascend910B4-1", "910B"),
        ("910B9", "Ascend910B1", "910B"),
        ("A2G3", "Ascend910B1", "910B"),
        ("310P3", "Ascend310P3", "310P"),
        ("310P9", "Ascend310P1", "310P"),
        ("I25", "Ascend310P1", "310P"),
        ("310B9", "Ascend310B1", "310B"),
        ("910_9392", "Ascend910_9392", "910C"),
        ("910", "Ascend910", "910C"),
        ("910A", "Ascend910A", "910"),
        ("910ProB", "Ascend910ProB", "910"),
        ("950PR", "Ascend950", "950"),
        ("950DT", "Ascend950", "950"),
        ("Ascend404", "", ""),
        ("", "", ""),
    ],
)
def test_soc_and_family(chip: str, soc: str, chip_family: str) -> None:
    assert soc_name(chip) == soc
    assert family(chip) == chip_family


@pytest.mark.parametrize(
    ("chip_family", "version", "slices"),
    [
        ("910B", "8.0.RC2", 63),
        ("910B", "9.1.0", 63),
        ("910B", "", 63),  # no runtime reads as CANN 8
        ("910B", "10.0", 0),
        ("910C", "8.1.RC1", 63),
        ("950", "8.5.0", 0),
        ("950", "9.0.0", 63),
        ("310P", "8.5.0", 0),
        ("310P", "9.1.0", 63),
        ("310P", "", 0),
        ("910", "8.0.0", 0),
        ("310B", "9.0.0", 0),
        ("910B", "RC", 0),
    ],
)
def test_logical_slices(chip_family: str, version: str, slices: int) -> None:
    assert logical_slices(chip_family, version) == slices


def test_runtime_major() -> None:
    assert (runtime_major("8.0.RC2"), runtime_major(""), runtime_major("x")) == (8, 8, None)


def test_toolkit_version(tmp_path: Path) -> None:
    assert toolkit_version(tmp_path) == ""
    write(tmp_path / "share/info/runtime/version.info", "Version=8.0.RC2\nversion_dir=8.0.RC2")
    assert toolkit_version(tmp_path) == "8.0.RC2"
    write(tmp_path / "version.info", "required_package_amct_acl_version=\nVersion=9.1.0\n")
    assert toolkit_version(tmp_path) == "9.1.0"
    assert toolkit_home({"ASCEND_TOOLKIT_HOME": str(tmp_path)}) == tmp_path


def test_die_text() -> None:
    assert die_text((0x3C0A1E2F, 0, 0xABC, 1, 0xFFFFFFFF)) == "3C0A1E2F 0 ABC 1 FFFFFFFF"
