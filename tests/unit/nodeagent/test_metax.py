"""The MetaX detector on recorded MXSML answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.vendors.metax.detect import MetaxDetector, product_line
from nodeagent.vendors.metax.mxsml import Mxsml, open_mxsml
from nodeagent.vendors.metax.recorded import RecordedMxsml
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded

DRM_DIR = "sys/module/metax/drivers/pci:metax"


def detector(mxsml: RecordedMxsml, tmp_path: Path, table: ManufacturerTable) -> MetaxDetector:
    buses = [d["info"]["bus_id"] for d in mxsml.devices if d["info"] != "refused"]
    drm = {bus: (number + 1, 128 + number) for number, bus in enumerate(buses)}
    return MetaxDetector(mxsml, fake_sysfs(tmp_path, "9999", buses, drm, DRM_DIR), table["metax"])


def test_the_fake_is_an_mxsml_surface() -> None:
    surface: Mxsml = RecordedMxsml(recorded("metax", "mxc500-x8"))  # checked by mypy
    assert surface.device_count() == 9


def test_no_library_means_no_cards(table: ManufacturerTable) -> None:
    absent = MetaxDetector(maker=table["metax"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()
    assert open_mxsml({"MACA_HOME": "/nowhere"}) is None


def test_eight_mxc500(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(RecordedMxsml(recorded("metax", "mxc500-x8")), tmp_path, table).detect()
    # The SR-IOV virtual function is not a card of this node.
    assert (group.id, group.name, group.memory, group.family) == ("mxc500", "MXC500", 65536, "MXC")
    assert (group.driver_version, group.runtime_version) == ("2.12.13", "2.29.0.19")
    cards = group.accelerators
    assert len(cards) == 8
    assert cards[0].id == "GPU-3e1b007a-90c2-58d4-1f6e-a7b8c9d0e1f0"
    assert cards[3].physical_indexes == (4, 131)
    assert cards[3].topology.pci_bus_id == "0000:59:00.0"
    assert [card.status.unhealthy for card in cards].index(True) == 5
    assert {card.status.logical_sliced.count for card in cards} == {16}
    assert not group.sliced_detail.logical.cores_percentage_overcommit


def test_partial_answers(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(
        RecordedMxsml(recorded("metax", "mxn260-partial")), tmp_path, table
    ).detect()
    (card,) = group.accelerators
    assert (group.name, group.memory, group.family) == ("MXN260", 32768, "MXN")
    assert (group.driver_version, group.runtime_version) == ("", "")
    assert (card.index, card.status.unhealthy) == (0, False)


def test_monitor(tmp_path: Path, table: ManufacturerTable) -> None:
    metrics = detector(RecordedMxsml(recorded("metax", "mxc500-x8")), tmp_path, table).monitor()
    assert (metrics[7].memory_total_mib, metrics[7].memory_used_mib) == (65536, 59392)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("info", {"bus_id": "gpu0", "uuid": "GPU-x", "name": "MXC500", "mode": 0}),
        ("memory", {"vram_total_kib": -1024, "vram_used_kib": 0}),
    ],
)
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    mxsml = RecordedMxsml(recorded("metax", "mxc500-x8"))
    mxsml.devices[2][key] = value
    with pytest.raises(ValueError):
        detector(mxsml, tmp_path, table).detect()


@pytest.mark.parametrize(
    ("name", "line"),
    [("MXC500", "MXC"), ("MXC550", "MXC"), ("mxn100", "MXN"), ("MXG100", "MXG"), ("X", "")],
)
def test_product_line(name: str, line: str) -> None:
    assert product_line(name) == line
