"""The T-Head detector on recorded HGML answers, MIG profiles included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.devices import AcceleratorStatus, PartitionProfile, PhysicalSliced
from chain.manufacturers import ManufacturerTable
from chain.partitions import Placement
from nodeagent.detect.partitions import agree_within_groups, physical_sliced
from nodeagent.detect.sysfs import pci_address
from nodeagent.detect.vendor import CardReading
from nodeagent.simulate.recorded import RecordedNvmlLike
from nodeagent.vendors.common.nvmlike import HGML_SYMBOLS, open_nvmlike
from nodeagent.vendors.thead.detect import TheadDetector
from nodeagent.vendors.thead.partitions import memory_slices
from tests.unit.nodeagent.vendor_data import fake_sysfs, nvmlike

PPU = "PPU-ZW810E"


def detector(hgml: RecordedNvmlLike, tmp_path: Path, table: ManufacturerTable) -> TheadDetector:
    buses = [pci_address(card["bus"]) for card in hgml.cards]
    return TheadDetector(hgml, fake_sysfs(tmp_path, "1ded", buses), table["thead"])


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = TheadDetector(maker=table["thead"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert open_nvmlike(TheadDetector().candidates({"PPU_HOME": "/nowhere"}), HGML_SYMBOLS) is None


def test_two_ppus_one_in_mig_mode(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(nvmlike("thead", "ppu-zw810e-x2"), tmp_path, table).detect()
    assert (group.id, group.name, group.memory, group.cores) == ("ppu-zw810e", PPU, 98304, 8192)
    assert (group.driver_version, group.runtime_version, group.compute_capability) == (
        "1.5.2",
        "1.5",
        "1.5",
    )
    logical, partitioned = group.accelerators
    assert logical.id == "GPU-7d1e2f30-4a5b-6c7d-8e9f-a0b1c2d3e4f5"
    assert (logical.physical_indexes, partitioned.physical_indexes) == ((0,), None)
    assert (logical.status.unhealthy, partitioned.status.unhealthy) == (True, False)
    assert logical.status.logical_sliced.count == 128
    assert logical.status.logical_sliced.cores_percentage_overcommit
    assert not logical.is_partitioned

    assert partitioned.is_partitioned and not partitioned.is_logically_sliceable
    sliced = partitioned.status.physical_sliced
    # `+me` variants, nameless profiles and profiles whose placements cannot be read are out;
    # one the driver answers with no placement stays, without placements.
    assert [p.name for p in sliced.profiles] == [
        "1g.12gb",
        "2g.24gb",
        "4g.48gb",
        "8g.96gb",
        "4g48gb.ext",
    ]
    assert sliced.count == 8
    four = sliced.profile("4g.48gb")
    assert four == PartitionProfile("4g.48gb", 49152, 2, 4, 4, (Placement(0, 4), Placement(4, 4)))
    assert sliced.profile("4g48gb.ext") == PartitionProfile("4g48gb.ext", 49152, 1, 4, 4, ())
    assert group.sliced_detail.logical.count == 128
    assert group.sliced_detail.physical.count == 8
    assert [(p.name, p.count) for p in group.sliced_detail.physical.profiles][:2] == [
        ("1g.12gb", 8),
        ("2g.24gb", 4),
    ]


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(nvmlike("thead", "ppu-zw810e-x2"), tmp_path, table).monitor()
    assert [(m.memory_total_mib, m.memory_used_mib, m.unhealthy) for m in metrics] == [
        (98304, 1024, True),
        (98304, 0, False),
    ]


def test_mig_mode_unreadable_means_logical_slices(tmp_path: Path, table: ManufacturerTable) -> None:
    hgml = nvmlike("thead", "ppu-zw810e-x2")
    hgml.cards[1]["mig_mode"] = "refused"
    (group,) = detector(hgml, tmp_path, table).detect()
    assert {card.status.logical_sliced.count for card in group.accelerators} == {128}


def test_no_count_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    hgml = nvmlike("thead", "ppu-zw810e-x2")
    hgml.count_refused = True
    assert detector(hgml, tmp_path, table).detect() == ()


@pytest.mark.parametrize(("key", "value"), [("bus", "ppu-1"), ("memory", [-1, 0])])
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    hgml = nvmlike("thead", "ppu-zw810e-x2")
    hgml.cards[1][key] = value
    with pytest.raises(ValueError):
        detector(hgml, tmp_path, table).detect()


def test_profiles_a_card_publishes_twice_differently_are_withheld(
    tmp_path: Path, table: ManufacturerTable
) -> None:
    hgml = nvmlike("thead", "ppu-zw810e-x2")
    profiles = hgml.cards[1]["profiles"]
    profiles.append(
        {**profiles[1], "profile": 12, "id": 20, "name": "MIG 2g24gb", "instance_count": 3}
    )
    (group,) = detector(hgml, tmp_path, table).detect()
    names = [p.name for p in group.accelerators[1].status.physical_sliced.profiles]
    assert "2g.24gb" not in names and "1g.12gb" in names


def test_cards_of_a_group_must_agree_on_a_profile() -> None:
    def card(ident: str, count: int) -> CardReading:
        profiles = (
            PartitionProfile("1g.12gb", 12288, count),
            PartitionProfile("8g.96gb", 98304, 1),
        )
        sliced = physical_sliced(profiles)
        return CardReading(ident, PPU, 98304, status=AcceleratorStatus(physical_sliced=sliced))

    agreed = agree_within_groups([card("a", 8), card("b", 7)])
    assert [[p.name for p in c.status.physical_sliced.profiles] for c in agreed] == [
        ["8g.96gb"],
        ["8g.96gb"],
    ]
    assert agreed[0].status.physical_sliced.count == 1
    same = [card("a", 8), card("b", 8)]
    assert agree_within_groups(same) == same


def test_memory_slices_and_empty_capability() -> None:
    assert (memory_slices(12288, 98304), memory_slices(18432, 98304), memory_slices(1, 0)) == (
        1,
        2,
        0,
    )
    assert physical_sliced(()) == PhysicalSliced()
