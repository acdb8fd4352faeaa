"""The Hygon detector on recorded ROCm SMI (DTK/hyhal) answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.detect.sysfs import Sysfs
from nodeagent.vendors.hygon.detect import (
    HygonDetector,
    dtk_version,
    graphics_target,
    rsmi_candidates,
)
from nodeagent.vendors.hygon.recorded import RecordedRsmi
from nodeagent.vendors.hygon.rsmi import Rsmi, bus_id_of, open_rsmi
from tests.unit.nodeagent.helpers import write
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded

DRM_DIR = "sys/module/hycu/drivers/pci:hycu"


def detector(rsmi: RecordedRsmi, tmp_path: Path, table: ManufacturerTable) -> HygonDetector:
    buses = [bus_id_of(device["pci_id"]) for device in rsmi.devices]
    drm = {bus: (number, 128 + number) for number, bus in enumerate(buses)}
    sysfs = fake_sysfs(tmp_path, "1d94", buses, drm, DRM_DIR)
    write(tmp_path / "sys/module/hycu/version", "6.3.16-V1.5.2")
    return HygonDetector(rsmi, sysfs, table["hygon"], runtime_version=lambda: "24.04.2")


def test_the_fake_is_an_rsmi_surface() -> None:
    surface: Rsmi = RecordedRsmi(recorded("hygon", "k100-ai-x8"))  # checked by mypy
    assert surface.device_count() == 9


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = HygonDetector(maker=table["hygon"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert open_rsmi(rsmi_candidates({"ROCM_PATH": "/nowhere"})) is None


def test_eight_k100_ai(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(RecordedRsmi(recorded("hygon", "k100-ai-x8")), tmp_path, table).detect()
    # The AMD MI210 ROCm SMI also lists is not a Hygon card.
    assert (group.id, group.name, group.memory) == ("k100_ai", "K100_AI", 65520)
    assert (group.driver_version, group.runtime_version) == ("6.3.16-V1.5.2", "24.04.2")
    assert (group.compute_capability, group.cores, group.family) == ("gfx928", 0, "")
    cards = group.accelerators
    assert len(cards) == 8
    assert cards[0].id == "GPU-6a1f3e7c2b9d0e4"
    assert cards[1].topology.pci_bus_id == "0000:3d:00.0"
    assert cards[5].physical_indexes == (6, 134)  # the MI210 took DRM nodes 4 and 132
    assert [card.status.unhealthy for card in cards] == [False, False, True] + [False] * 5
    assert {card.status.logical_sliced.count for card in cards} == {4}
    assert not any(card.status.logical_sliced.cores_percentage_overcommit for card in cards)
    assert group.sliced_detail.logical.count == 32
    assert not group.sliced_detail.logical.cores_percentage_overcommit


def test_cards_without_identity_or_ecc(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(RecordedRsmi(recorded("hygon", "z100l-x2")), tmp_path, table).detect()
    assert (group.name, group.memory, group.compute_capability) == ("Z100L", 32752, "gfx906")
    (card,) = group.accelerators
    assert (card.id, card.index, card.status.unhealthy) == ("GPU-4b1c2d3e4f5a6b7c", 0, False)


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(RecordedRsmi(recorded("hygon", "k100-ai-x8")), tmp_path, table).monitor()
    assert len(metrics) == 8
    assert (metrics[0].memory_total_mib, metrics[0].memory_used_mib) == (65520, 57344)
    assert [m.unhealthy for m in metrics].count(True) == 1


def test_no_count_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    rsmi = RecordedRsmi(recorded("hygon", "k100-ai-x8"))
    rsmi.count_refused = True
    assert detector(rsmi, tmp_path, table).detect() == ()


@pytest.mark.parametrize(("key", "value"), [("name", ""), ("memory_total", -(1 << 30))])
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    rsmi = RecordedRsmi(recorded("hygon", "k100-ai-x8"))
    rsmi.devices[1][key] = value
    with pytest.raises(ValueError):
        detector(rsmi, tmp_path, table).detect()


def test_bus_id_of() -> None:
    assert bus_id_of(0x3D00) == "0000:3d:00.0"
    assert bus_id_of((0x10 << 32) | (0x2 << 28) | (0xC1 << 8) | (0x1F << 3) | 5) == "0010:c1:1f.5"


def test_graphics_target() -> None:
    assert (graphics_target(906), graphics_target(0x928), graphics_target(0)) == (
        "gfx906",
        "gfx928",
        "",
    )


def test_dtk_version(tmp_path: Path) -> None:
    home = tmp_path / "dtk"
    assert dtk_version(home) == ""
    write(tmp_path / ".info/version", "24.04.1-rc")
    assert dtk_version(home) == "24.04.1"  # the parent of the home holds it
    write(home / ".info/version-rocm", "25.04")
    assert dtk_version(home) == "25.04"


def test_library_candidates() -> None:
    candidates = rsmi_candidates({"ROCM_SMI_LIB_PATH": "/x/lib", "ROCM_PATH": "/dtk"})
    assert candidates[:2] == ["librocm_smi64.so", "/x/lib/librocm_smi64.so"]
    assert "/opt/hyhal/lib/librocm_smi64.so" in candidates
    assert candidates[-1] == "/dtk/rocm_smi/lib/librocm_smi64.so"


def test_driver_version_from_the_other_module(tmp_path: Path, table: ManufacturerTable) -> None:
    write(tmp_path / "sys/module/hydcu/version", "5.16.22")
    rsmi = RecordedRsmi(recorded("hygon", "z100l-x2"))
    (group,) = HygonDetector(rsmi, Sysfs(tmp_path), table["hygon"]).detect()
    assert group.driver_version == "5.16.22"
