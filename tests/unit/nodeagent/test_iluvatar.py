"""The Iluvatar detector on recorded IXML answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.detect.sysfs import pci_address
from nodeagent.simulate.recorded import RecordedNvmlLike
from nodeagent.vendors.common.nvmlike import IXML_SYMBOLS, NvmlLike, open_nvmlike
from nodeagent.vendors.iluvatar.detect import IluvatarDetector
from tests.unit.nodeagent.vendor_data import fake_sysfs, nvmlike

BI_V150 = "Iluvatar BI-V150"


def detector(ixml: RecordedNvmlLike, tmp_path: Path, table: ManufacturerTable) -> IluvatarDetector:
    buses = [pci_address(card["bus"]) for card in ixml.cards if "bus" in card]
    return IluvatarDetector(ixml, fake_sysfs(tmp_path, "1e3e", buses), table["iluvatar"])


def test_the_fake_is_an_nvml_like_surface() -> None:
    surface: NvmlLike = nvmlike("iluvatar", "bi-v150-x2")  # checked by mypy
    assert surface.device_count() == 3


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = IluvatarDetector(maker=table["iluvatar"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert (
        open_nvmlike(IluvatarDetector().candidates({"COREX_HOME": "/nowhere"}), IXML_SYMBOLS)
        is None
    )


def test_two_bi_v150(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(nvmlike("iluvatar", "bi-v150-x2"), tmp_path, table).detect()
    assert (group.id, group.name, group.memory) == ("bi-v150", BI_V150, 32768)
    assert (group.driver_version, group.runtime_version, group.compute_capability) == (
        "4.1.0",
        "10.2",
        "8.0",
    )
    first, second = group.accelerators  # the third card's handle is refused
    assert first.id == "GPU-8c3d9e1f-2a4b-5c6d-7e8f-90a1b2c3d4e5"
    assert (first.physical_indexes, second.physical_indexes) == ((0,), (1,))  # minor, position
    assert second.topology.pci_bus_id == "0000:5e:00.0"
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)
    assert first.status.logical_sliced.count == 128
    assert first.status.logical_sliced.cores_percentage_overcommit


def test_partial_answers(tmp_path: Path, table: ManufacturerTable) -> None:
    ixml = nvmlike("iluvatar", "mr-v100-partial")
    (group,) = detector(ixml, tmp_path, table).detect()
    (card,) = group.accelerators  # the first card's memory query failed
    assert (group.runtime_version, group.compute_capability) == ("", "")
    assert (card.index, card.physical_indexes, card.status.unhealthy) == (0, (1,), False)


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(nvmlike("iluvatar", "bi-v150-x2"), tmp_path, table).monitor()
    assert [(m.memory_used_mib, m.unhealthy) for m in metrics] == [(512, False), (0, True)]


def test_no_count_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    ixml = nvmlike("iluvatar", "bi-v150-x2")
    ixml.count_refused = True
    assert detector(ixml, tmp_path, table).detect() == ()


@pytest.mark.parametrize(("key", "value"), [("bus", "3b:00"), ("uuid", "")])
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    ixml = nvmlike("iluvatar", "bi-v150-x2")
    ixml.cards[0][key] = value
    with pytest.raises(ValueError):
        detector(ixml, tmp_path, table).detect()
