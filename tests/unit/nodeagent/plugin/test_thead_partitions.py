"""T-Head partitions (HGML's MIG) over the simulated PPU host in MIG mode: detection offers
only partitions, Allocate makes the instance and hands over exactly its five nodes, a sidecar is
shown the same partition, failures undo, and the reclaimer takes a gone Pod's instance back."""

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
from nodeagent.plugin.allocator import Attempt
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.mig import Markers, Partitioner
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.partitioned import PartitionedAllocator
from nodeagent.plugin.reclaim import MigReclaimer
from nodeagent.plugin.response import DeviceNode
from nodeagent.plugin.server import plugin_servers
from nodeagent.plugin.visibility import VisibilityAllocator
from nodeagent.simulate.host import simulated_host
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.vendors.thead.driver import TheadNaming
from nodeagent.vendors.thead.grants import Thead
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.plugin.fakes import FakeCluster, partition_limits

PROFILE = "ppu-zw810e-mig-x2"
THEAD: Manufacturer = manufacturers({})["thead"]
PART = "alibabacloud.com/ppu.partitioned"
VISIBILITY = "device.gpustack.ai/thead.visibility"
SPEC = DevicesSpec(detect(PROFILE))
GROUP = SPEC.groups[0].id
CARDS = [card.id for _, card in SPEC.cards()]


def limits(profile: str) -> dict[str, str]:
    return partition_limits("alibabacloud.com/ppu", profile)


def rw(*paths: str) -> tuple[DeviceNode, ...]:
    return tuple(DeviceNode(path, path) for path in paths)


@dataclass
class Node:
    cluster: FakeCluster
    state: NodeState
    hgml: SimulatedNvml
    nodes: SimulatedNodes
    partitioner: Partitioner
    allocator: PartitionedAllocator

    def token(self, card: int = 0) -> str:
        return f"{GROUP}:{CARDS[card]}:0000"

    def grant(self, pod: str, profile: str) -> tuple[DeviceNode, ...]:
        self.cluster.add(pod, ("main", limits(profile)))
        response = self.allocator.allocate([self.token()], Attempt(10.0))
        assert not response.envs and not response.mounts and not response.annotations
        return response.devices


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with simulated_host(PROFILE) as host:
        assert isinstance(host.hgml, SimulatedNvml) and host.device_nodes is not None
        assert isinstance(host.device_nodes, SimulatedNodes)
        cluster = FakeCluster()
        state = NodeState(lambda: SPEC, cluster, cluster)
        partitioner = Partitioner(host.hgml, Markers(str(tmp_path / "mig-thead")), TheadNaming())
        allocator = PartitionedAllocator(
            state, THEAD, partitioner, responder=Thead(), nodes=host.device_nodes
        )
        yield Node(cluster, state, host.hgml, host.device_nodes, partitioner, allocator)


def test_a_card_in_mig_mode_offers_partitions_only() -> None:
    (group,) = SPEC.groups
    assert all(card.is_partitioned for card in group.accelerators)
    assert not any(card.is_logically_sliceable for card in group.accelerators)
    offered = [p.name for p in group.accelerators[0].status.physical_sliced.profiles]
    assert offered == ["1g.12gb", "2g.24gb", "4g.48gb", "8g.96gb"]  # not the +me variant
    cluster = FakeCluster()
    state = NodeState(lambda: SPEC, cluster, cluster)
    served = {s.allocator.resource for s in plugin_servers(state, THEAD, "/x")}
    assert PART not in served  # without HGML no partitioned server: nothing is promised


def test_a_grant_hands_over_the_five_nodes_of_its_partition(node: Node) -> None:
    devices = node.grant("p1", "4g.48gb")
    assert devices == rw(
        "/dev/alixpu",
        "/dev/alixpu_ctl",
        "/dev/alixpu_ppu0",
        "/dev/alixpu-caps/alixpu-cap256",  # the GPU instance's capability node
        "/dev/alixpu-caps/alixpu-cap257",  # its compute instance's
    )
    (view,) = node.hgml.instances()
    assert (view.card, view.start, view.size) == (CARDS[0], 0, 4)
    assert view.profile_id == 2  # the creation id the driver gave, read back, not computed
    (claim,) = parse_allocated(node.cluster.annotation("p1"))["main"].claims()
    row = claim.row
    assert (row.id, row.mode, row.allocated_physical_profile) == (
        CARDS[0],
        Mode.PARTITIONED,
        "4g.48gb",
    )
    assert row.allocated_physical_placements == (Placement(0, 4),)
    assert row.allocated_physical_id == view.mig_uuids[0]


def test_the_next_partition_takes_the_next_slot_and_its_own_capability_nodes(
    node: Node,
) -> None:
    node.grant("p1", "4g.48gb")
    second = node.grant("p2", "4g.48gb")
    assert second[2:] == rw(
        "/dev/alixpu_ppu0",
        "/dev/alixpu-caps/alixpu-cap272",
        "/dev/alixpu-caps/alixpu-cap273",
    )
    assert [(v.card, v.start) for v in node.hgml.instances()] == [(CARDS[0], 0), (CARDS[0], 4)]
    third = node.grant("p3", "8g.96gb")  # card 0 is full: the whole-card profile goes to card 1
    assert third[2] == DeviceNode("/dev/alixpu_ppu1", "/dev/alixpu_ppu1")


def test_a_retry_hands_over_the_same_partition(node: Node) -> None:
    first = node.grant("p1", "2g.24gb")
    again = node.allocator.allocate([node.token()], Attempt(10.0)).devices
    assert again == first and len(node.hgml.instances()) == 1


def test_a_capability_node_the_host_lacks_fails_closed_and_unmakes_the_partition(
    node: Node,
) -> None:
    node.nodes.minors.pop("/dev/alixpu_ctl")
    node.cluster.add("p1", ("main", limits("1g.12gb")))
    with pytest.raises(Refusal) as refused:
        node.allocator.allocate([node.token()], Attempt(10.0))
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert "/dev/alixpu_ctl" in refused.value.message
    assert node.hgml.instances() == []
    assert node.state.reserved() == {}
    assert list(node.partitioner.markers.all()) == []
    assert node.cluster.annotation("p1") == ""


def test_a_sidecar_is_shown_the_owner_partition_not_the_card(node: Node) -> None:
    owner = node.grant("p1", "4g.48gb")
    node.cluster.by_key.clear()
    node.cluster.add("p1", ("main", limits("4g.48gb")), ("sshd", {VISIBILITY: "1"}))
    node.cluster.write("default", "p1", node.cluster.writes[-1][2])  # the owner's record
    sidecar = VisibilityAllocator(
        node.state,
        THEAD,
        partitions=lambda holder: node.partitioner.live_partition(holder.pod_uid, holder.container),
        nodes=node.nodes,
        responder=Thead(),
    )
    token = f"{GROUP}:{CARDS[0]}:0000"
    assert sidecar.allocate([token], Attempt(10.0)).devices == owner


def test_the_reclaimer_unmakes_a_gone_pods_partition(node: Node) -> None:
    node.grant("p1", "1g.12gb")
    uid = next(iter(node.cluster.by_key.values()))["metadata"]["uid"]
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(frozenset({uid}))
    assert sweep.destroyed == [] and len(node.hgml.instances()) == 1
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(frozenset())
    assert sweep.destroyed == [(CARDS[0], 0)]
    assert node.hgml.instances() == []
    assert node.nodes.char_minor("/dev/alixpu-caps/alixpu-cap256") is None  # gone with it
