"""The real Ascend, Cambricon, Hygon, MetaX and MThreads detectors over their shipped simulated
hosts (recordings with the identities the detector tests replay, every card healthy), the
device nodes each host offers the plugin, and the simulated DCMI's container-share flag."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chain.ledger import Mode
from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, VendorError
from nodeagent.plugin.grants import GrantedCard, VendorResponder
from nodeagent.simulate.host import simulated_host
from nodeagent.simulate.profile import read_profile_file
from nodeagent.simulate.recorded_host import recording_of
from nodeagent.vendors.ascend.detect import die_text
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.ascend.recorded import RecordedDcmi
from nodeagent.vendors.cambricon.grants import Cambricon
from nodeagent.vendors.hygon.grants import Hygon
from nodeagent.vendors.metax.grants import Metax
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.vendor_data import recorded

Identity = tuple[str, str, int]
"""A card as its recording names it: (id, name, memory MiB)."""


def ascend_cards(recording: dict[str, Any]) -> list[Identity]:
    return [
        (die_text(tuple(device["die"])), device["chip"]["chip_name"], device["hbm"]["total_mb"])
        for card in recording["cards"]
        for device in card["devices"]
    ]


def cambricon_cards(recording: dict[str, Any]) -> list[Identity]:
    return [(c["uuid"], c["name"], c["memory"]["total_mib"]) for c in recording["cards"]]


def hygon_cards(recording: dict[str, Any]) -> list[Identity]:
    return [
        (f"GPU-{d['unique_id']:x}", d["name"], d["memory_total"] >> 20)
        for d in recording["devices"]
        if d["vendor_id"] == 0x1D94
    ]


def metax_cards(recording: dict[str, Any]) -> list[Identity]:
    return [
        (d["info"]["uuid"], d["info"]["name"], d["memory"]["vram_total_kib"] >> 10)
        for d in recording["devices"]
        if d["info"]["mode"] != 2  # an SR-IOV virtual function
    ]


def mthreads_cards(recording: dict[str, Any]) -> list[Identity]:
    return [
        (d["uuid"], d["name"], d["memory"]["total_bytes"] >> 20)
        for d in recording["devices"]
        if d["virt_role"] != 2  # a guest virtual device
    ]


HOSTS: list[tuple[str, str, str, str, Callable[[dict[str, Any]], list[Identity]]]] = [
    ("atlas-800t-a2", "ascend", "atlas-800t-a2", "910b3", ascend_cards),
    ("mlu370-x4", "cambricon", "mlu370-x8-x4", "mlu370-x8", cambricon_cards),
    ("k100-ai-x2", "hygon", "k100-ai-x8", "k100_ai", hygon_cards),
    ("mxc500-x2", "metax", "mxc500-x8", "mxc500", metax_cards),
    ("s4000-x2", "mthreads", "s4000-x8", "mtt-s4000", mthreads_cards),
]


@pytest.mark.parametrize(("profile", "manufacturer", "replayed", "group_id", "cards"), HOSTS)
def test_the_shipped_host_is_detected_as_recorded(
    profile: str,
    manufacturer: str,
    replayed: str,
    group_id: str,
    cards: Callable[[dict[str, Any]], list[Identity]],
) -> None:
    (group,) = detect(profile)
    shipped = cards(recording_of(manufacturer, read_profile_file(profile)[1])[0])
    replay = cards(recorded(manufacturer, replayed))
    assert (group.id, group.manufacturer) == (group_id, manufacturer)
    assert (group.name, group.memory) == replay[0][1:]
    assert len(group.accelerators) == len(shipped)
    assert [card.id for card in group.accelerators] == [ident for ident, _, _ in shipped]
    assert {ident for ident, _, _ in shipped} <= {ident for ident, _, _ in replay}
    assert not any(card.status.unhealthy for card in group.accelerators)


INJECTING: dict[str, VendorResponder] = {
    "cambricon": Cambricon(),
    "hygon": Hygon(),
    "metax": Metax(),
}
"""The responders that inject the cards' device nodes themselves."""


def whole_card_nodes(profile: str, manufacturer: str) -> list[list[str]]:
    """The device nodes the manufacturer's plugin injects for each card, on the simulated
    host (Cambricon refuses a card without its own node)."""
    (group,) = detect(profile)
    with simulated_host(profile) as host:
        assert host.device_nodes is not None
        responder = INJECTING[manufacturer]
        return [
            [
                d.host_path
                for d in responder.show((GrantedCard(group, c),), host.device_nodes).devices
            ]
            for c in group.accelerators
        ]


def test_the_cambricon_host_has_each_cards_nodes_by_cndev_position() -> None:
    injected = whole_card_nodes("mlu370-x4", "cambricon")
    assert injected == [
        [f"/dev/cambricon_dev{n}", f"/dev/cambricon_ipcm{n}", "/dev/cambricon_ctl"]
        for n in range(4)
    ]


@pytest.mark.parametrize(
    ("profile", "manufacturer", "control"),
    [
        ("k100-ai-x2", "hygon", ["/dev/kfd", "/dev/mkfd"]),
        ("mxc500-x2", "metax", ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd"]),
    ],
)
def test_the_drm_hosts_have_the_control_nodes_and_the_detected_drm_nodes(
    profile: str, manufacturer: str, control: list[str]
) -> None:
    (group,) = detect(profile)
    drm = [card.physical_indexes or () for card in group.accelerators]
    assert drm == [(1, 128), (2, 129)]  # as the profile numbers them
    injected = whole_card_nodes(profile, manufacturer)
    assert injected == [
        [*control, f"/dev/dri/card{card}", f"/dev/dri/renderD{render}"] for card, render in drm
    ]


@pytest.mark.parametrize("profile", ["atlas-800t-a2", "s4000-x2"])
def test_hosts_whose_cards_are_named_by_variables_need_no_nodes(profile: str) -> None:
    with simulated_host(profile) as host:
        assert host.device_nodes is None


def test_the_ascend_host_hands_its_dcmi_to_the_responder() -> None:
    (group,) = detect("atlas-800t-a2")
    with simulated_host("atlas-800t-a2") as host:
        share = host.container_share
        assert share is not None and host.injected["ascend"]["dcmi"] is share
        runtime = host.injected["ascend"]["runtime_version"]
        assert callable(runtime) and runtime() == "8.0.RC2"
        cards = tuple(GrantedCard(group, card) for card in group.accelerators[2:4])
        Ascend(lambda: share).prepare(cards, Mode.SHARED)
        assert share.shared == {(2, 0), (3, 0)}


def test_the_recorded_dcmi_share_flag() -> None:
    dcmi = RecordedDcmi(recorded("ascend", "atlas-800t-a2"))
    assert not dcmi.share_enabled(1, 0)
    dcmi.enable_share(1, 0)
    assert dcmi.share_enabled(1, 0) and not dcmi.share_enabled(2, 0)
    with pytest.raises(VendorError):
        dcmi.enable_share(1, 1)  # card 1 holds one device


def test_a_v2_recording_has_no_share_flag() -> None:
    dcmi = RecordedDcmi(recorded("ascend", "a5-950pr"))
    for call in (dcmi.share_enabled, dcmi.enable_share):
        with pytest.raises(VendorError) as refused:
            call(0, 0)
        assert refused.value.code == FUNCTION_NOT_FOUND


@pytest.mark.parametrize(
    ("manufacturer", "replayed", "cards"),
    [
        ("ascend", "atlas-800t-a2", 8),
        ("cambricon", "mlu370-x8-x4", 4),
        ("hygon", "k100-ai-x8", 8),
        ("metax", "mxc500-x8", 8),
        ("mthreads", "s4000-x8", 8),
    ],
)
def test_a_profile_file_replays_a_recording_with_its_faults(
    manufacturer: str, replayed: str, cards: int, tmp_path: Path
) -> None:
    profile = tmp_path / f"{replayed}.json"
    body = {"manufacturer": manufacturer, "recording": recorded(manufacturer, replayed)}
    profile.write_text(json.dumps(body))
    (group,) = detect(str(profile))
    assert len(group.accelerators) == cards
    assert [card.status.unhealthy for card in group.accelerators].count(True) == 1


def test_a_recording_without_bus_ids_is_refused(tmp_path: Path) -> None:
    profile = tmp_path / "mlu.yaml"
    profile.write_text("manufacturer: cambricon\nrecording: {cards: [{handle: 1}]}\n")
    with pytest.raises(ValueError, match=r"recording\.cards\[0\]\.bus: required"):
        detect(str(profile))
