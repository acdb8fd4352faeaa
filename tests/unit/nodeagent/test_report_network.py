"""The network cards in what the agent reports: `spec.interfaces` of the Devices object and the
RDMA label of its NodeFeature (docs/topology.md, "Network cards")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chain.devices import DEVICES_KIND
from chain.labels import RDMA_CAPABLE
from chain.manufacturers import default_manufacturers
from nodeagent.agent import Reporter
from nodeagent.detect.loop import DetectionRound
from nodeagent.detect.remembered import DetectionPass
from nodeagent.report import NODE_FEATURE_KIND, card_addresses, devices_object, node_feature
from nodeagent.simulate.sysfs import write_sysfs
from nodeagent.topology.nics import NodeNetwork, read_network
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR, load_profile
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.test_slicing_gate import FakeApi


def _network(tmp_path: Path, profile: str) -> NodeNetwork:
    write_sysfs(load_profile(profile), tmp_path, PCI_VENDOR)
    return read_network(tmp_path)


def test_the_devices_object_lists_every_port_with_the_cards_of_every_group(
    tmp_path: Path,
) -> None:
    groups = detect("l4-x4-roce")
    network = _network(tmp_path, "l4-x4-roce")
    # Another manufacturer's group, as the object already holds it: its card is listed among
    # the node's cards, and left out of the ports' links since sysfs has no place for it.
    other = {
        "id": "x",
        "manufacturer": "amd",
        "name": "X",
        "memory": 1,
        "accelerators": [{"id": "a", "index": 0, "topology": {"pciBusId": "0000:3a:00.0"}}],
    }
    existing = {"spec": {"groups": [other]}}
    obj = devices_object("n1", "u1", {}, groups, ("nvidia",), existing, network)
    interfaces = obj["spec"]["interfaces"]
    assert [entry["name"] for entry in interfaces] == ["mlx5_0", "mlx5_1"]
    assert interfaces[1] == {
        "name": "mlx5_1",
        "interface": "ens156f0np0",
        "pciAddress": "0000:9c:00.0",
        "linkLayer": "Ethernet",
        "speedMbps": 100000,
        "rdma": True,
        "up": True,
        "roceV2Gids": [
            "fe80:0000:0000:0000:0009:c000:0000:0001",
            "0000:0000:0000:0000:0000:ffff:0a0a:010b",
        ],
        "numaNode": 1,
        "cards": [
            {"link": "PIX", "cards": ["0000:9a:00.0", "0000:9b:00.0"]},
            {"link": "SYS", "cards": ["0000:1a:00.0", "0000:1b:00.0"]},
        ],
    }
    assert card_addresses(obj["spec"]["groups"]) == [
        "0000:1a:00.0",
        "0000:1b:00.0",
        "0000:3a:00.0",
        "0000:9a:00.0",
        "0000:9b:00.0",
    ]


def test_a_node_without_ports_has_no_interfaces_field_and_loses_a_stale_one(
    tmp_path: Path,
) -> None:
    groups = detect("t4x4")
    network = _network(tmp_path, "t4x4")
    stale = {"spec": {"groups": [], "interfaces": [{"name": "gone"}]}}
    assert (
        "interfaces"
        not in devices_object("n1", "u1", {}, groups, ("nvidia",), stale, network)["spec"]
    )
    # Without a reading the agent leaves the field as it found it.
    kept = devices_object("n1", "u1", {}, groups, ("nvidia",), stale)
    assert kept["spec"]["interfaces"] == [{"name": "gone"}]


def test_the_rdma_label_follows_an_rdma_port_that_is_up(tmp_path: Path) -> None:
    groups = detect("h100-80gb-x8-rdma")
    rdma = _network(tmp_path / "rdma", "h100-80gb-x8-rdma")
    labels = node_feature("n1", "ns", groups, "u1", rdma)["spec"]["labels"]
    assert labels[RDMA_CAPABLE] == "true"
    ethernet = _network(tmp_path / "ethernet", "t4x4-ethernet")
    assert RDMA_CAPABLE not in node_feature("n1", "ns", groups, "u1", ethernet)["spec"]["labels"]
    for port in (tmp_path / "rdma/sys/class/infiniband").iterdir():
        (port / "ports/1/state").write_text("1: DOWN\n", encoding="ascii")
    down = read_network(tmp_path / "rdma")
    assert RDMA_CAPABLE not in node_feature("n1", "ns", groups, "u1", down)["spec"]["labels"]


def _reported(tmp_path: Path, profile: str) -> FakeApi:
    """What one round of a Reporter reading the simulated host's ports writes."""
    groups = detect(profile)
    write_sysfs(load_profile(profile), tmp_path, PCI_VENDOR)
    api = FakeApi(groups[0])
    reporter = Reporter(
        api,  # type: ignore[arg-type]
        "n1",
        "gpustack-system",
        ("nvidia",),
        default_manufacturers(),
        network=lambda: read_network(tmp_path),
    )
    reporter(DetectionRound((DetectionPass("nvidia", groups),)))
    return api


def test_the_reporter_writes_the_ports_and_the_label_each_round(tmp_path: Path) -> None:
    api = _reported(tmp_path, "h100-80gb-x8-rdma")
    devices: dict[str, Any] = api.objects[DEVICES_KIND]
    assert len(devices["spec"]["interfaces"]) == 9
    assert devices["spec"]["interfaces"][0]["cards"][0] == {
        "link": "PIX",
        "cards": ["0000:1a:00.0", "0000:1b:00.0"],
    }
    assert api.objects[NODE_FEATURE_KIND]["spec"]["labels"][RDMA_CAPABLE] == "true"


def test_the_reporter_writes_no_interfaces_on_a_node_without_ports(tmp_path: Path) -> None:
    api = _reported(tmp_path, "t4x4")
    assert "interfaces" not in api.objects[DEVICES_KIND]["spec"]
    assert RDMA_CAPABLE not in api.objects[NODE_FEATURE_KIND]["spec"]["labels"]
