"""Hygon partitions (DMI's "MIG") over the simulated K100 host in Multi-Instance mode: the node's
mode decides what a card offers, Allocate makes the instance and hands over its registry file
and `DMI_MIG_VISIBLE_DEVICE`, a sidecar is shown the same partition, failures undo, and the
reclaimer takes a gone Pod's instance back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chain.allocation import Code, Refusal
from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from chain.manufacturers import Manufacturer, manufacturers
from chain.partitions import Placement
from nodeagent.detect.vendor import VendorError
from nodeagent.plugin.allocator import Attempt
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.mig import Markers, Partitioner
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.partitioned import PartitionedAllocator
from nodeagent.plugin.reclaim import MigReclaimer
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount
from nodeagent.plugin.visibility import VisibilityAllocator
from nodeagent.simulate.host import simulated_host
from nodeagent.vendors.hygon.dmi import DmiProfile
from nodeagent.vendors.hygon.driver import DmiMig, HygonNaming, registry_uuid
from nodeagent.vendors.hygon.grants import Hygon
from nodeagent.vendors.hygon.partitions import Mode as MigMode
from nodeagent.vendors.hygon.partitions import card_status, read_mode
from nodeagent.vendors.hygon.simulate import SimulatedDmi
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.plugin.fakes import FakeCluster, partition_limits

PROFILE = "k100-ai-mig-x2"
HYGON: Manufacturer = manufacturers({})["hygon"]
PART = "hygon.com/dcu.partitioned"
VISIBILITY = "device.gpustack.ai/hygon.visibility"
SPEC = DevicesSpec(detect(PROFILE))
GROUP = SPEC.groups[0].id
CARDS = [card.id for _, card in SPEC.cards()]
BUSES = {card.id: card.topology.pci_bus_id for _, card in SPEC.cards()}


def limits(profile: str) -> dict[str, str]:
    return partition_limits("hygon.com/dcu", profile)


@dataclass
class Node:
    cluster: FakeCluster
    state: NodeState
    dmi: SimulatedDmi
    nodes: SimulatedNodes
    partitioner: Partitioner
    allocator: PartitionedAllocator

    def token(self) -> str:
        return f"{GROUP}:{CARDS[0]}:0000"

    def grant(self, pod: str, profile: str) -> ContainerResponse:
        self.cluster.add(pod, ("main", limits(profile)))
        return self.allocator.allocate([self.token()], Attempt(10.0))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with simulated_host(PROFILE) as host:
        assert isinstance(host.dmi, DmiMig) and isinstance(host.dmi.dmi, SimulatedDmi)
        assert isinstance(host.device_nodes, SimulatedNodes)
        cluster = FakeCluster()
        state = NodeState(lambda: SPEC, cluster, cluster)
        partitioner = Partitioner(
            host.dmi, Markers(str(tmp_path / "mig-hygon")), HygonNaming(), BUSES.__getitem__
        )
        allocator = PartitionedAllocator(
            state, HYGON, partitioner, responder=Hygon(), nodes=host.device_nodes
        )
        yield Node(cluster, state, host.dmi.dmi, host.device_nodes, partitioner, allocator)


# --- detection ----------------------------------------------------------------------------------


def test_in_multi_instance_mode_a_card_offers_partitions_only() -> None:
    (group,) = SPEC.groups
    assert all(c.is_partitioned and not c.is_logically_sliceable for c in group.accelerators)
    offered = group.accelerators[0].status.physical_sliced
    assert [(p.name, p.memory_mib, p.compute_slices, p.count) for p in offered.profiles] == [
        ("2g.15gb", 16380, 1, 4),
        ("4g.31gb", 32760, 2, 2),
        ("8g.63gb", 65520, 4, 1),
    ]
    assert offered.count == 4


class RefusingDmi:
    def __init__(self, code: int) -> None:
        self.code = code

    def system_mig_mode(self) -> int:
        raise VendorError("nvmlGetSystemMigMode", self.code)


def test_the_mode_decides_what_a_card_offers() -> None:
    assert read_mode(None) == MigMode(False)  # no Multi-Instance library: 4 logical slices
    assert read_mode(RefusingDmi(13)) == MigMode(False)  # a driver without the entry point
    assert read_mode(RefusingDmi(999)) == MigMode(False, known=False)
    unknown = card_status(MigMode(False, known=False), None, "0000:09:00.0", HYGON, False)
    assert not unknown.logically_sliceable and not unknown.partitioned
    off = card_status(MigMode(False), None, "0000:09:00.0", HYGON, False)
    assert off.logical_sliced.count == 4 and not off.logical_sliced.cores_percentage_overcommit


def test_profiles_that_cannot_be_placed_or_named_are_withheld(tmp_path: Path) -> None:
    profiles = [
        DmiProfile(3, 4, 20, 1, 16380, "MIG 2g.15gb"),
        DmiProfile(1, 2, 40, 2, 32760, "MIG 4g.31gb"),  # no placements recorded
        DmiProfile(0, 1, 80, 4, 65520, "MIG"),  # a name that forms no key
    ]
    dmi = SimulatedDmi(["0000:09:00.0"], profiles, tmp_path, {3: (Placement(0, 1),), 0: ()})
    status = card_status(MigMode(True), dmi, "0000:09:00.0", HYGON, False)
    assert [p.name for p in status.physical_sliced.profiles] == ["2g.15gb"]
    gone = card_status(MigMode(True), dmi, "0000:0f:00.0", HYGON, False)  # not DMI's card
    assert not gone.partitioned and not gone.logically_sliceable


# --- Allocate -----------------------------------------------------------------------------------


def test_a_grant_hands_over_the_registry_file_and_the_mig_uuid(node: Node) -> None:
    response = node.grant("p1", "4g.31gb")
    conf = "/etc/dmi_mig_config/ci/dev0gi1ci0.conf"
    text = node.nodes.read(conf)
    assert text is not None
    mig = "MIG-" + registry_uuid(text)
    assert response.envs == {"DMI_MIG_VISIBLE_DEVICE": mig}
    assert response.mounts == (Mount(conf, conf, read_only=True),)  # no /opt/dtk, /opt/hyhal here
    assert response.devices == (
        DeviceNode("/dev/kfd", "/dev/kfd", "rwm"),
        DeviceNode("/dev/mkfd", "/dev/mkfd", "rwm"),
        DeviceNode("/dev/dri/card1", "/dev/dri/card1"),
        DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128"),
    )
    assert node.dmi.instances() == [("0000:09:00.0", 1, Placement(0, 2))]
    (claim,) = parse_allocated(node.cluster.annotation("p1"))["main"].claims()
    row = claim.row
    assert (row.id, row.mode, row.allocated_physical_profile) == (
        CARDS[0],
        Mode.PARTITIONED,
        "4g.31gb",
    )
    assert row.allocated_physical_placements == (Placement(0, 2),)
    assert row.allocated_physical_id == mig


def test_partitions_pack_and_a_retry_gets_the_same_one(node: Node) -> None:
    first = node.grant("p1", "4g.31gb")
    again = node.allocator.allocate([node.token()], Attempt(10.0))
    assert again == first
    node.grant("p2", "4g.31gb")
    whole = node.grant("p3", "8g.63gb")  # card 0 is full: the whole-card profile goes to card 1
    assert whole.mounts[-1].host_path == "/etc/dmi_mig_config/ci/dev1gi1ci0.conf"
    assert [(bus, slot) for bus, _, slot in node.dmi.instances()] == [
        ("0000:09:00.0", Placement(0, 2)),
        ("0000:09:00.0", Placement(2, 2)),
        ("0000:0a:00.0", Placement(0, 4)),
    ]


def test_a_partition_without_its_registry_file_fails_closed_and_is_unmade(node: Node) -> None:
    gone = node.nodes.listing
    node.nodes.listing = lambda path: [] if path.endswith("/ci") else gone(path)  # type: ignore[method-assign]
    node.cluster.add("p1", ("main", limits("2g.15gb")))
    with pytest.raises(Refusal) as refused:
        node.allocator.allocate([node.token()], Attempt(10.0))
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert "no registry file" in refused.value.message
    assert node.dmi.instances() == []
    assert node.state.reserved() == {} and node.cluster.annotation("p1") == ""


def test_a_sidecar_is_shown_the_owner_partition_not_the_card(node: Node) -> None:
    owner = node.grant("p1", "2g.15gb")
    record = node.cluster.writes[-1][2]
    node.cluster.by_key.clear()
    node.cluster.add("p1", ("main", limits("2g.15gb")), ("sshd", {VISIBILITY: "1"}))
    node.cluster.write("default", "p1", record)
    sidecar = VisibilityAllocator(
        node.state,
        HYGON,
        partitions=lambda holder: node.partitioner.live_partition(holder.pod_uid, holder.container),
        nodes=node.nodes,
        responder=Hygon(),
    )
    assert sidecar.allocate([f"{GROUP}:{CARDS[0]}:0000"], Attempt(10.0)) == owner


def test_the_reclaimer_unmakes_a_gone_pods_partition_and_its_file(node: Node) -> None:
    node.grant("p1", "2g.15gb")
    assert node.nodes.listing("/etc/dmi_mig_config/ci") == ["dev0gi1ci0.conf"]
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(frozenset({"uid-p1"}))
    assert sweep.destroyed == [] and len(node.dmi.instances()) == 1
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(frozenset())
    assert sweep.destroyed == [(CARDS[0], 0)]
    assert node.dmi.instances() == [] and node.nodes.listing("/etc/dmi_mig_config/ci") == []
