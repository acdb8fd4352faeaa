"""The Partitioned (MIG) plugin over a simulated A100 node: Allocate, rollbacks, ListAndWatch,
and one grant through real gRPC and the kubelet emulator."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from chain.allocation import Code, Refusal
from chain.devices import DevicesSpec
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    AllocationRecord,
    Holder,
    parse_allocated,
    render_allocated,
)
from chain.manufacturers import manufacturers
from chain.partitions import Placement
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.plugin import protos
from nodeagent.plugin.allocator import Attempt
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.mig import Markers, MigNvml, Partitioner
from nodeagent.plugin.node import Late, NodeState
from nodeagent.plugin.partitioned import PARTITION_DEADLINE_S, PartitionedAllocator
from nodeagent.plugin.reclaim import MigReclaimer
from nodeagent.plugin.running import DevicePlugins, NodeRecords
from nodeagent.plugin.server import PluginServer, plugin_servers
from nodeagent.simulate import SimulatedNvml
from nodeagent.vendors.nvidia.simulate import load_profile
from testbed.kubelet import KubeletEmulator
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.plugin.fakes import (
    NVIDIA,
    FakeCluster,
    FakeKube,
    WatchAway,
    partition_limits,
)

SPEC = DevicesSpec(tuple(detect("a100-40gb-mig")))
GROUP = SPEC.groups[0].id
CARDS = [card.id for _, card in SPEC.cards()]
PART = "nvidia.com/gpu.partitioned"
TOKEN = f"{GROUP}:{CARDS[0]}:0000"


def limits(profile: str) -> dict[str, str]:
    return partition_limits("nvidia.com/gpu", profile)


@dataclass
class Node:
    cluster: FakeCluster
    state: NodeState
    nvml: SimulatedNvml
    partitioner: Partitioner
    allocator: PartitionedAllocator

    def grant(self, pod: str, profile: str, token: str = TOKEN, deadline: float = 10.0) -> str:
        self.cluster.add(pod, ("main", limits(profile)))
        response = self.allocator.allocate([token], Attempt(deadline))
        assert dict(response.envs).keys() == {"NVIDIA_VISIBLE_DEVICES"}
        assert not response.annotations and not response.cdi_devices
        return response.envs["NVIDIA_VISIBLE_DEVICES"]

    def row(self, pod: str) -> Any:
        (claim,) = parse_allocated(self.cluster.annotation(pod))["main"].claims()
        return claim.row

    def refused(
        self, pod: str, profile: str, container_limits: dict[str, str] | None = None
    ) -> Refusal:
        self.cluster.add(pod, ("main", container_limits or limits(profile)))
        with pytest.raises(Refusal) as caught:
            self.allocator.allocate([TOKEN], Attempt(10.0))
        return caught.value


def make_node(root: Path) -> Node:
    nvml = SimulatedNvml(load_profile("a100-40gb-mig"))
    cluster = FakeCluster()
    state = NodeState(lambda: SPEC, cluster, cluster)
    partitioner = Partitioner(nvml, Markers(str(root / "mig")))
    return Node(cluster, state, nvml, partitioner, PartitionedAllocator(state, NVIDIA, partitioner))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


def nothing_left(node: Node) -> None:
    assert node.nvml.instances() == []
    assert node.state.reserved() == {}
    assert list(node.partitioner.markers.all()) == []


# --- Allocate -----------------------------------------------------------------------------------


def test_grant_shows_only_the_mig_device_and_records_the_partition(node: Node) -> None:
    mig = node.grant("p1", "1g.5gb")
    (view,) = node.nvml.instances()
    assert view.mig_uuids == (mig,) and (view.card, view.start) == (CARDS[0], 0)
    row = node.row("p1")
    assert (row.id, row.mode) == (CARDS[0], Mode.PARTITIONED)
    assert row.allocated == 4864 * RESOURCE_MAX_UNITS // 40960
    assert row.allocated_physical_profile == "1g.5gb"
    assert row.allocated_physical_placements == (Placement(0, 1),)
    assert row.allocated_physical_id == mig
    ledger = node.state.ledger().row("nvidia", GROUP, CARDS[0])
    assert ledger is not None
    assert ledger.allocated_profiles == (ProfileCount("1g.5gb", 1),)
    assert ledger.remaining_of("1g.5gb") == 6
    assert ledger.remaining_of("7g.40gb") == 0


def test_partitions_pack_onto_the_fullest_card(node: Node) -> None:
    node.grant("p1", "1g.5gb")
    node.grant("p2", "1g.5gb", token=f"{GROUP}:{CARDS[5]}:0003")  # the token's card is no hint
    node.grant("p3", "7g.40gb")
    assert [(view.card, view.start) for view in node.nvml.instances()] == [
        (CARDS[0], 0),
        (CARDS[0], 1),
        (CARDS[1], 0),
    ]


def test_a_retry_reuses_the_recorded_partition(node: Node) -> None:
    first = node.grant("p1", "3g.20gb")
    again = node.allocator.allocate([TOKEN], Attempt(10.0)).envs["NVIDIA_VISIBLE_DEVICES"]
    assert again == first
    assert len(node.nvml.instances()) == 1
    assert node.row("p1").allocated_physical_id == first


def test_a_card_held_in_another_mode_is_refused(node: Node) -> None:
    node.cluster.add("whole", ("main", {"nvidia.com/gpu": "1"}))
    whole = AcceleratorAllocation(CARDS[0], 0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
    record = AllocationRecord(DevicesStatus((DevicesAllocationGroup(GROUP, "nvidia", (whole,)),)))
    annotations = node.cluster.by_key[("default", "whole")]["metadata"]["annotations"]
    annotations[ALLOCATED_ANNOTATION] = render_allocated({"main": record})
    refusal = node.refused("p1", "1g.5gb")
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message == (
        f"card {CARDS[0]} is held in Exclusive mode, cannot allocate it in Partitioned mode"
    )
    nothing_left(node)
    assert node.cluster.writes == []


def test_a_finished_pods_whole_card_is_free_for_a_partition(node: Node) -> None:
    """A card this process granted whole to a Pod that has since Succeeded (still listed) is
    free in the ledger; its reservation must not keep it in Exclusive mode (#35)."""
    node.cluster.add("whole", ("main", {"nvidia.com/gpu": "1"}))
    row = AcceleratorAllocation(CARDS[0], 0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
    record = AllocationRecord(DevicesStatus((DevicesAllocationGroup(GROUP, "nvidia", (row,)),)))
    uid = node.cluster.by_key[("default", "whole")]["metadata"]["uid"]
    node.state.reserve(Holder(uid, "main"), record)
    node.cluster.set_phase("whole", "Succeeded")
    node.grant("p1", "1g.5gb")
    assert node.row("p1").id == CARDS[0]


def test_no_profile_key_is_refused(node: Node) -> None:
    refusal = node.refused("p1", "", {PART: "1"})
    assert refusal.code == Code.FAILED_PRECONDITION
    nothing_left(node)


def test_a_profile_no_card_can_host_is_resource_exhausted(node: Node) -> None:
    for n in range(8):
        node.grant(f"full{n}", "7g.40gb")
    refusal = node.refused("p1", "1g.5gb")
    assert refusal.code == Code.RESOURCE_EXHAUSTED
    assert len(node.nvml.instances()) == 8


def test_actuation_failure_releases_the_reservation(node: Node) -> None:
    node.nvml.fail_next("nvmlGpuInstanceCreateComputeInstance", "INSUFFICIENT_RESOURCES")
    refusal = node.refused("p1", "2g.10gb")
    assert refusal.code == Code.INTERNAL
    nothing_left(node)
    assert node.cluster.writes == []


def test_annotation_write_failure_unmakes_the_partition(node: Node) -> None:
    node.cluster.fail = RuntimeError("the API server is away")
    refusal = node.refused("p1", "3g.20gb")
    assert refusal.code == Code.INTERNAL and "cannot record the grant" in refusal.message
    nothing_left(node)


def test_a_late_answer_restores_the_annotation_and_unmakes(node: Node) -> None:
    node.cluster.add("p1", ("main", limits("1g.5gb")))
    node.cluster.delay = 0.4
    with pytest.raises(Late):
        node.allocator.allocate([TOKEN], Attempt(0.3))
    nothing_left(node)
    assert node.cluster.annotation("p1") == ""


# --- ListAndWatch and the hint ------------------------------------------------------------------


def test_healthy_set_follows_the_room(node: Node) -> None:
    listed = node.allocator.advertised()
    assert len(listed) == 8 * 7 and all(device.healthy for device in listed)
    assert all(device.numa == () for device in listed)
    node.grant("p1", "3g.20gb", token=f"{GROUP}:{CARDS[7]}:40000006")
    listed = node.allocator.advertised()
    healthy = [device.id for device in listed if device.healthy]
    assert len(listed) == 56  # tokens are never removed
    assert len(healthy) == (1 + 3) + 7 * 7
    assert f"{GROUP}:{CARDS[7]}:40000006" in healthy  # the held token stays healthy


def test_listing_broadcasts_the_live_pods(node: Node) -> None:
    heard: list[frozenset[str]] = []
    node.state.on_live(heard.append)
    node.cluster.add("p1", ("main", limits("1g.5gb")))
    node.allocator.advertised()
    assert heard == [frozenset({"uid-p1"})]


def test_the_hint_names_the_card_the_partition_is_cut_on(node: Node) -> None:
    """What the kubelet records for the container (its checkpoint, pod-resources) is the token
    it was hinted: a token of the card that will hold the instance, not a random one."""
    tokens = [a.id for a in node.allocator.advertised()]
    other_cards = [t for t in tokens if t.split(":")[1] != CARDS[0]]
    node.grant("p1", "1g.5gb")  # on CARDS[0], the fullest card from now on
    node.cluster.add("p2", ("main", limits("1g.5gb")))
    [hint] = node.allocator.preferred(list(reversed(tokens)), [], 1)
    assert hint.split(":")[1] == CARDS[0]
    # Allocate cuts it where the hint said.
    node.allocator.allocate([hint], Attempt(10.0))
    assert node.row("p2").id == CARDS[0]
    # Nothing on that card offered: no hint rather than a wrong one.
    node.cluster.add("p3", ("main", limits("1g.5gb")))
    assert node.allocator.preferred(other_cards, [], 1) == []


def test_no_hint_for_a_pod_that_names_no_profile(node: Node) -> None:
    node.cluster.add("p1", ("main", {PART: "1"}))
    assert node.allocator.preferred([TOKEN], [], 1) == []


def test_plugin_servers_serve_partitions_only_with_a_partitioner(node: Node) -> None:
    with_mig = plugin_servers(node.state, NVIDIA, "/nonexistent", partitioner=node.partitioner)
    assert "nvidia.partitioned.sock" in [server.endpoint for server in with_mig]
    partitioned = next(s for s in with_mig if s.allocator.mode == Mode.PARTITIONED)
    assert partitioned.allocator.resource == PART
    without = plugin_servers(node.state, NVIDIA, "/nonexistent")
    assert all(server.allocator.mode != Mode.PARTITIONED for server in without)


def test_a_sidecar_is_shown_the_owner_partition_while_it_lives(node: Node) -> None:
    """The visibility plugin built by `plugin_servers` asks the partitioner, which checks the
    ownership marker against the card's live instances: the MIG device, never the parent."""
    servers = plugin_servers(node.state, NVIDIA, "/nonexistent", partitioner=node.partitioner)
    visibility = next(s.allocator for s in servers if s.allocator.mode == Mode.VISIBILITY)
    seen = "device.gpustack.ai/nvidia.visibility"
    node.cluster.add("p1", ("main", limits("2g.10gb")), ("ssh", {seen: "1"}))
    mig = node.allocator.allocate([TOKEN], Attempt(10.0)).envs["NVIDIA_VISIBLE_DEVICES"]
    shown = visibility.allocate([TOKEN], Attempt(10.0))
    assert dict(shown.envs) == {"NVIDIA_VISIBLE_DEVICES": mig}
    for shown in node.state.granted():  # kubelet asks again, as after its own restart
        node.state.revoke(shown)
    assert node.partitioner.destroy(CARDS[0], node.row("p1").allocated_physical_placements[0])
    with pytest.raises(Refusal) as caught:
        visibility.allocate([TOKEN], Attempt(10.0))
    assert caught.value.code == Code.FAILED_PRECONDITION
    assert "cannot vouch for" in caught.value.message


# --- through gRPC -------------------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[KubeletEmulator, Node]]:
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))  # unix socket paths stay short
    kubelet = KubeletEmulator(root)
    node = make_node(root)
    node.allocator.kubelet = PodResourcesClient(str(kubelet.pod_resources_socket))
    server = PluginServer(
        node.allocator, str(kubelet.plugin_dir), poll_s=0.05, deadline_s=PARTITION_DEADLINE_S
    )
    server.start()
    try:
        yield kubelet, node
    finally:
        server.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def healthy(devices: dict[str, str]) -> int:
    return sum(1 for state in devices.values() if state == protos.HEALTHY)


def test_kubelet_admits_a_partitioned_pod(served: tuple[KubeletEmulator, Node]) -> None:
    kubelet, node = served
    kubelet.wait_devices(PART, lambda d: len(d) == 56 and healthy(d) == 56)
    assert (PART, "nvidia.partitioned.sock") in kubelet.registrations
    pod = node.cluster.add("infer", ("main", limits("3g.20gb")))
    started = time.monotonic()
    kubelet.admit(pod)
    assert time.monotonic() - started < PARTITION_DEADLINE_S
    container, resource, response = kubelet.responses[-1]
    assert (container, resource) == ("main", PART)
    mig = response.envs["NVIDIA_VISIBLE_DEVICES"]
    assert mig.startswith("MIG-") and mig not in CARDS
    assert [view.mig_uuids for view in node.nvml.instances()] == [(mig,)]
    assert node.row("infer").allocated_physical_id == mig
    # The hint named the card the instance was cut on, so the kubelet's record says so too.
    [(_, [hint])] = [h for h in kubelet.hints if h[0] == "main"]
    assert hint.split(":")[1] == node.row("infer").id
    node.state.notify()
    kubelet.wait_devices(PART, lambda d: len(d) == 56 and healthy(d) == 53)


# --- the serve wiring ---------------------------------------------------------------------------


def test_serve_starts_the_partitioned_plugin_and_its_reclaimer() -> None:
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    cluster = FakeCluster()
    nvml = SimulatedNvml(load_profile("a100-40gb-mig"))
    plugins = DevicePlugins(
        NodeRecords.connect(FakeKube(cluster, SPEC), "node-a"),
        manufacturers({}),
        str(kubelet.plugin_dir),
        str(kubelet.pod_resources_socket),
        str(root / "pods"),
        partition_libraries={"nvidia": cast(MigNvml, nvml)},
        mig_dir=str(root / "mig"),
    )
    try:
        plugins.publish(frozenset({"nvidia"}))
        kubelet.wait_devices(PART, lambda d: len(d) == 56)
        pod = cluster.add("infer", ("main", limits("1g.10gb")))
        kubelet.admit(pod)
        mig = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
        assert [view.mig_uuids for view in nvml.instances()] == [(mig,)]
        assert list((root / "mig").glob("*/*.json"))  # the marker beside the pods dir
        cluster.remove("infer")
        kubelet.forget(pod)
        deadline = time.monotonic() + 10
        while nvml.instances() and time.monotonic() < deadline:
            plugins.refresh()  # ListAndWatch lists the Pods: the reclaimer hears the live set
            time.sleep(0.1)
        assert nvml.instances() == []
    finally:
        plugins.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_gone_pods_partition_not_yet_reclaimed_gives_way(node: Node) -> None:
    first = node.grant("p1", "1g.5gb")
    node.cluster.remove("p1")  # the ledger frees the slot before the reclaimer sweeps
    second = node.grant("p2", "1g.5gb")
    assert second != first
    assert [(view.card, view.start, view.mig_uuids) for view in node.nvml.instances()] == [
        (CARDS[0], 0, (second,))
    ]


def test_a_partition_that_cannot_be_unmade_is_left_to_the_reclaimer(node: Node) -> None:
    node.cluster.fail = RuntimeError("the API server is away")
    node.nvml.fail_next("nvmlComputeInstanceDestroy", "IN_USE")
    refusal = node.refused("p1", "1g.5gb")
    assert refusal.code == Code.INTERNAL and "cannot record the grant" in refusal.message
    assert node.state.reserved() == {}
    (marker,) = node.partitioner.markers.all()
    assert marker.pod_uid == "uid-p1"
    node.cluster.remove("p1")
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(frozenset())
    assert sweep.destroyed == [(CARDS[0], 0)]
    nothing_left(node)


def test_a_partition_cut_while_the_pod_cache_lags_is_not_reclaimed(node: Node) -> None:
    """Cut for a Pod only a fresh list names (the watch away after the API server restarted),
    the partition is still the Pod's at the next listing over the cache: its uid is in the live
    set the reclaimer hears, so the sweep keeps the instance, and the reservation stays (#35)."""
    heard: list[frozenset[str]] = []
    node.state.on_live(heard.append)
    node.state.source = WatchAway(node.cluster)
    node.grant("p1", "1g.5gb")
    node.allocator.advertised()  # a ListAndWatch tick over the cache without p1
    assert heard[-1] == frozenset({"uid-p1"})
    sweep = MigReclaimer(node.partitioner, lambda: CARDS).reconcile(heard[-1])
    assert sweep.destroyed == []
    assert len(node.nvml.instances()) == 1
    assert {holder.pod_uid for holder in node.state.reserved()} == {"uid-p1"}


# --- across an agent roll -------------------------------------------------------------------------


def _agent(node: Node, kubelet: KubeletEmulator, root: Path) -> tuple[Node, PluginServer]:
    """A node agent's partitioned plugin over `node`'s Pods and cards (the simulated NVML keeps
    its instances across agents, as a card does), with a fresh `NodeState` and `Partitioner`
    over the same marker directory: what a new agent Pod on the node starts with."""
    state = NodeState(lambda: SPEC, node.cluster, node.cluster)
    partitioner = Partitioner(node.nvml, Markers(str(root / "mig")))
    allocator = PartitionedAllocator(
        state, NVIDIA, partitioner, PodResourcesClient(str(kubelet.pod_resources_socket))
    )
    server = PluginServer(
        allocator, str(kubelet.plugin_dir), poll_s=0.05, deadline_s=PARTITION_DEADLINE_S
    )
    server.start()
    return Node(node.cluster, state, node.nvml, partitioner, allocator), server


def _replay(kubelet: KubeletEmulator, ids: list[str]) -> Any:
    """The Allocate the kubelet sends again for an admitted container (after its own restart)."""
    api = protos.deviceplugin()
    answer = kubelet.wait_endpoint(PART).stub.Allocate(
        api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]),
        timeout=10,
    )
    return answer.container_responses[0]


def test_a_partitioned_pod_keeps_its_instance_across_an_agent_roll() -> None:
    """The agent rolls (an upgrade, a restart) under a Pod that holds a MIG instance: simulated
    A100 (its NVML keeps the instances, as the card would), the real gRPC plugin and a kubelet
    emulator. The new agent rebuilds the same ledger from the record, its reclaimer keeps the
    instance of the live Pod, a replayed Allocate gets the same instance without cutting another,
    a newcomer's instance is cut beside it, and the old one goes only once its Pod is gone
    (#35)."""
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    try:
        first, server = _agent(make_node(root), kubelet, root)
        try:
            kubelet.wait_devices(PART, lambda d: len(d) == 56)
            kubelet.admit(first.cluster.add("infer", ("main", limits("3g.20gb"))))
            mig = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
            before = first.state.ledger()
            ids = kubelet.known[("default", "infer")]["main"][PART]
            endpoint = kubelet.endpoints[PART]
        finally:
            server.stop()  # the old agent exits; the card keeps its instance

        second, server = _agent(first, kubelet, root)
        try:
            deadline = time.monotonic() + 10
            while kubelet.endpoints.get(PART) is endpoint:
                assert time.monotonic() < deadline, "the new agent never registered"
                time.sleep(0.02)
            assert second.state.reserved() == {}  # nothing but the record carries the grant
            assert second.state.ledger() == before
            kubelet.wait_devices(PART, lambda d: len(d) == 56 and healthy(d) == 53)
            live = frozenset(pod.uid for pod in second.state.pods())
            sweep = MigReclaimer(second.partitioner, lambda: CARDS).reconcile(live)
            assert sweep.destroyed == []
            assert _replay(kubelet, ids).envs["NVIDIA_VISIBLE_DEVICES"] == mig
            assert [view.mig_uuids for view in second.nvml.instances()] == [(mig,)]

            kubelet.admit(second.cluster.add("next", ("main", limits("3g.20gb"))))
            newer = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
            assert newer != mig
            assert sorted(v.mig_uuids for v in second.nvml.instances()) == sorted(
                [(mig,), (newer,)]
            )
            kubelet.forget(second.cluster.by_key[("default", "infer")])
            second.cluster.remove("infer")
            live = frozenset(pod.uid for pod in second.state.pods())
            sweep = MigReclaimer(second.partitioner, lambda: CARDS).reconcile(live)
            assert len(sweep.destroyed) == 1
            assert [view.mig_uuids for view in second.nvml.instances()] == [(newer,)]
        finally:
            server.stop()
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
