"""The real Iluvatar and T-Head detectors over their shipped simulated hosts, whose recordings
agree with the ones the detector tests replay; the T-Head host has the nodes Allocate proves."""

from __future__ import annotations

import pytest

from nodeagent.simulate.host import simulated_host
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.vendor_data import recorded


@pytest.mark.parametrize(
    ("profile", "manufacturer", "replayed", "group_id"),
    [
        ("bi-v150-x2", "iluvatar", "bi-v150-x2", "bi-v150"),
        ("ppu-zw810e-x2", "thead", "ppu-zw810e-x2", "ppu-zw810e"),
    ],
)
def test_simulated_nvml_like_hosts(
    profile: str, manufacturer: str, replayed: str, group_id: str
) -> None:
    (group,) = detect(profile)
    assert (group.id, group.manufacturer) == (group_id, manufacturer)
    first = recorded(manufacturer, replayed)["cards"][0]
    assert group.name == first["name"]
    assert group.memory == first["memory"][0] >> 20
    assert group.accelerators[0].id == first["uuid"]
    assert all(card.is_logically_sliceable for card in group.accelerators)
    assert not any(card.status.unhealthy for card in group.accelerators)


def test_the_thead_host_has_its_control_and_card_nodes() -> None:
    with simulated_host("ppu-zw810e-x2") as host:
        nodes = host.device_nodes
        assert nodes is not None
        assert [nodes.char_minor(f"/dev/alixpu_ppu{n}") for n in (0, 1)] == [0, 1]
        assert nodes.exists("/dev/alixpu") and nodes.exists("/dev/alixpu_ctl")
