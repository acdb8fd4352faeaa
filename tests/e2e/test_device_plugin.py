"""The node agent's device plugins end to end: kubelet emulator, real API server, shipped RBAC.

One simulated T4 node runs `python -m nodeagent serve --device-plugin-dir ...` as the shipped
ServiceAccount. The kubelet emulator serves Registration and pod-resources in a temp dir, the
agent's plugins register there, and a Pod bound to the node is admitted the way kubelet would:
the Allocate answer names the card, the Pod gets its allocation annotation, and the agent's
ledger (Devices.status) charges that card.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chain.devices import Devices
from chain.keys import accelerator_key
from chain.labels import shared_fit_key
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.release import AGENT_NAMESPACE
from chain.units import RESOURCE_MAX_UNITS
from kubeapi import Obj, wait_for
from nodeagent.plugin.reclaim import RECLAIM_PERIOD_S
from nodeagent.simulate.mig import STATE_ENV
from testbed import previous
from testbed.drivers import run_agent
from testbed.harness import Testbed, free_port, pid_alive
from testbed.install import Installed
from testbed.kubectl import kubectl
from testbed.kubelet import KubeletEmulator, delete_ended
from testbed.nodes import nfd_worker_feature, node_object, register_node

WORKER = "worker.gpustack.ai/v1alpha1"
AGENT_NS = AGENT_NAMESPACE
GPU = "nvidia.com/gpu"
LEDGER_FOLLOWS_S = 10.0
"""Far below the agent's 30 s monitor period: only the Pod watch can be that quick."""


@dataclass
class PluginNode:
    name: str
    namespace: str
    kubelet: KubeletEmulator
    health_port: int = 0
    """Where the agent serves its probes and `/metrics`."""


@pytest.fixture
def plugin_node(testbed: Testbed, chain: Installed) -> Iterator[PluginNode]:
    """An agent serving the device plugins for four simulated T4 cards."""
    with agent_node(testbed, "t4x4") as node:
        yield node


@pytest.fixture
def mig_node(testbed: Testbed, chain: Installed) -> Iterator[PluginNode]:
    """An agent serving the device plugins for a simulated A100 40GB in MIG mode."""
    with agent_node(testbed, "a100-40gb-mig") as node:
        yield node


@contextlib.contextmanager
def agent_node(
    testbed: Testbed, profile: str, nfd: bool = False, env: dict[str, str] | None = None
) -> Iterator[PluginNode]:
    """A node whose agent serves the device plugins of a simulated `profile`; with `nfd`,
    nfd-worker's CPU features too (what a pool's flavor is named by); `env` added to the
    agent's environment."""
    kube = testbed.kube
    tag = uuid.uuid4().hex[:5]
    name, namespace = f"dp-{tag}", f"dp-{tag}"
    # Unix socket paths are limited to 107 bytes: keep the root short.
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    register_node(kube, node_object(name, cpu="16"))
    port = free_port()
    if nfd:
        kube.apply(nfd_worker_feature(name))
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    run_agent(
        testbed,
        name,
        profile,
        # A long monitor period: the ledger must follow the Pods through the agent's Pod
        # watch, not through detection rounds.
        "--period",
        "30",
        "--health-port",
        str(port),
        *kubelet.agent_flags(root / "pods", profile),
        env=env,
    )
    try:
        yield PluginNode(name, namespace, kubelet, port)
    finally:
        testbed.stop(f"agent-{name}")
        kubelet.stop()
        kube.delete("v1", "Namespace", namespace)
        kube.delete(
            "nfd.k8s-sigs.io/v1alpha1", "NodeFeature", f"{name}-gpustack-device-manager", AGENT_NS
        )
        kube.delete(WORKER, "Devices", name)
        if nfd:
            kube.delete("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", name, "node-feature-discovery")
        kube.delete("v1", "Node", name)
        shutil.rmtree(root, ignore_errors=True)


def _pod(node: PluginNode) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": node.namespace},
        "spec": {
            "nodeName": node.name,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
                }
            ],
        },
    }


def _row_mode(testbed: Testbed, node: str, card: str) -> Mode | None:
    found = testbed.kube.get(WORKER, "Devices", node)
    if found is None:
        return None
    row = Devices.parse(found).status.row("nvidia", "tesla-t4", card)
    return row.mode if row is not None else None


def _shared_free(testbed: Testbed, node: str) -> str | None:
    found = testbed.kube.get("v1", "Node", node) or {}
    labels = (found.get("metadata") or {}).get("labels") or {}
    return labels.get(shared_fit_key(accelerator_key("nvidia", "tesla-t4")))


def test_kubelet_allocation_reaches_the_pod_and_the_ledger(
    testbed: Testbed, plugin_node: PluginNode
) -> None:
    kube = testbed.kube
    kubelet = plugin_node.kubelet
    # The agent registered its plugins and advertises the four cards from its Devices spec.
    exclusive = kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=90)
    cards = {token.split(":")[1] for token in exclusive}
    # The agent keeps the ledger: every card free before any Pod.
    for card in cards:
        wait_for(
            lambda c=card: _row_mode(testbed, plugin_node.name, c) == Mode.NONE,
            60,
            f"the ledger row of {card}",
        )

    # The fit labels the Workload webhook pins by: four cards with a free share.
    wait_for(lambda: _shared_free(testbed, plugin_node.name) == "4", 60, "the shared fit label")

    pod = kube.create(_pod(plugin_node))
    kubelet.admit(pod)

    [(container, resource, response)] = kubelet.responses
    assert (container, resource) == ("main", GPU)
    card = response.envs["NVIDIA_VISIBLE_DEVICES"]
    assert card in cards

    # The grant was journaled before the answer; its annotation lands right after.
    annotation = wait_for(lambda: _record(testbed, pod), 10, "the grant's annotation")
    rows = [claim.row for claim in parse_allocated(annotation)["main"].claims()]
    assert [(row.id, row.mode, row.allocated) for row in rows] == [
        (card, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
    ]

    wait_for(
        lambda: _row_mode(testbed, plugin_node.name, card) == Mode.EXCLUSIVE,
        LEDGER_FOLLOWS_S,
        "the ledger to charge the allocated card (written on the Pod change, not a round)",
    )
    others = cards - {card}
    assert all(_row_mode(testbed, plugin_node.name, c) == Mode.NONE for c in others)
    wait_for(
        lambda: _shared_free(testbed, plugin_node.name) == "3",
        LEDGER_FOLLOWS_S,
        "the shared fit label to follow the ledger (on the Pod change, not a round)",
    )

    # `kubectl get devices` shows the ledger at a glance (the CRD's printer columns).
    table = kubectl(testbed, "get", "devices", plugin_node.name).splitlines()
    header, row = table[0].split(), table[1].split()
    shown = dict(zip(header, row, strict=False))
    assert (shown["CARDS"], shown["FREE"], shown["EXCLUSIVE"]) == ("4", "3", "1"), table

    # The ledger is written only when it changes: with no Pod moving, nothing is written.
    before = (kube.get(WORKER, "Devices", plugin_node.name) or {})["metadata"]["resourceVersion"]
    time.sleep(2.5)
    after = (kube.get(WORKER, "Devices", plugin_node.name) or {})["metadata"]["resourceVersion"]
    assert after == before

    # The Pod ends and is gone: the card is free again, and kubelet sees it healthy in every mode.
    delete_ended(kube, kube.get("v1", "Pod", "train", plugin_node.namespace) or pod)
    wait_for(
        lambda: _row_mode(testbed, plugin_node.name, card) == Mode.NONE,
        LEDGER_FOLLOWS_S,
        "the ledger to free the card of the deleted Pod",
    )


SLICED = "nvidia.com/gpu.sliced"


def test_a_slice_gets_hami_isolation_and_two_slices_share_a_card(
    testbed: Testbed, plugin_node: PluginNode
) -> None:
    """The sliced path on the real API: HAMi-core env and mounts, the record, the ledger's
    slices; a second slice packs onto the fullest card that still fits; one asking more than
    any card has left is refused and leaves nothing behind."""
    kube = testbed.kube
    kubelet = plugin_node.kubelet
    kubelet.wait_devices(SLICED, lambda d: len(d) > 0, timeout=90)

    def slice_pod(name: str, units: int, memory: int) -> Obj:
        limits = {
            SLICED: "1",
            f"{SLICED}.units": str(units),
            f"{SLICED}.memory-percentage": str(memory),
        }
        pod = _pod(plugin_node)
        pod["metadata"]["name"] = name
        pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
        return pod

    first = kube.create(slice_pod("slice-a", 1_200_000, 75))
    kubelet.admit(first)
    response = kubelet.responses[-1][2]
    card = response.envs["NVIDIA_VISIBLE_DEVICES"]
    assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "100"  # no cores asked: the whole SM
    found = kube.get(WORKER, "Devices", plugin_node.name)
    assert found is not None
    [group] = Devices.parse(found).spec.groups
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{group.memory * 75 // 100}m"
    assert "/usr/local/vgpu/libvgpu.so" in {m.container_path for m in response.mounts}
    wait_for(
        lambda: _row_mode(testbed, plugin_node.name, card) == Mode.SLICED,
        LEDGER_FOLLOWS_S,
        "the ledger to hold the sliced card",
    )

    second = kube.create(slice_pod("slice-b", 400_000, 25))
    kubelet.admit(second)
    assert kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"] == card  # packed: fullest fit

    def row() -> tuple[int, int] | None:
        found = testbed.kube.get(WORKER, "Devices", plugin_node.name)
        held = Devices.parse(found).status.row("nvidia", "tesla-t4", card) if found else None
        return (held.remaining, held.allocated_slices) if held else None

    wait_for(lambda: row() == (0, 2), LEDGER_FOLLOWS_S, "the card full with two slices")

    # A whole card's worth of units cannot fit there any more: it goes to an empty card, and
    # the full one is never promised past M.
    third = kube.create(slice_pod("slice-c", 1_600_000, 100))
    kubelet.admit(third)
    other = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
    assert other != card
    wait_for(
        lambda: _row_mode(testbed, plugin_node.name, other) == Mode.SLICED,
        LEDGER_FOLLOWS_S,
        "the ledger to hold the second sliced card",
    )
    assert row() == (0, 2)


VISIBILITY = "device.gpustack.ai/nvidia.visibility"


def test_a_sidecar_sees_its_pods_card_and_is_charged_nothing(
    testbed: Testbed, plugin_node: PluginNode
) -> None:
    kube = testbed.kube
    kubelet = plugin_node.kubelet
    kubelet.wait_devices(VISIBILITY, lambda d: len(d) == 4 * 512, timeout=90)
    # And the cards themselves: each plugin lists its devices on its own stream, and a real
    # scheduler would not bind the Pod before the node shows the capacity.
    kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=90)
    pod = _pod(plugin_node)
    see = {VISIBILITY: "1"}
    pod["spec"]["containers"].append(
        {"name": "ssh", "image": "busybox", "resources": {"limits": see, "requests": see}}
    )
    kubelet.admit(kube.create(pod))
    shown = {c: r.envs["NVIDIA_VISIBLE_DEVICES"] for c, _, r in kubelet.responses}
    assert shown["ssh"] == shown["main"]  # the sidecar sees exactly the workload's card
    wait_for(
        lambda: _row_mode(testbed, plugin_node.name, shown["main"]) == Mode.EXCLUSIVE,
        LEDGER_FOLLOWS_S,
        "the ledger to charge the workload's card",
    )
    stored = kube.get("v1", "Pod", "train", plugin_node.namespace) or {}
    record = parse_allocated(stored["metadata"]["annotations"][ALLOCATED_ANNOTATION])
    assert set(record) == {"main"}  # no record, no units for the sidecar


PARTITIONED = "nvidia.com/gpu.partitioned"


def _partition_pod(node: PluginNode, name: str) -> Obj:
    """A Pod asking one `3g.20gb` instance of the node's A100."""
    limits = {PARTITIONED: "1", f"{PARTITIONED}.mig-3g.20gb": "1"}
    pod = _pod(node)
    pod["metadata"]["name"] = name
    pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
    return pod


def _partitioned(testbed: Testbed, node: str) -> list[tuple[str, int]] | None:
    """The ledger's partitioned rows of `node`: (card, instances charged), None while none."""
    found = testbed.kube.get(WORKER, "Devices", node)
    rows = Devices.parse(found).status.rows() if found else []
    held = [
        (row.id, sum(p.count for p in row.allocated_profiles))
        for _, row in rows
        if row.mode == Mode.PARTITIONED
    ]
    return held or None


def test_a_partition_is_cut_on_the_card_and_reaches_the_ledger(
    testbed: Testbed, mig_node: PluginNode
) -> None:
    kube = testbed.kube
    kubelet = mig_node.kubelet
    kubelet.wait_devices(PARTITIONED, lambda d: len(d) > 0, timeout=90)
    kubelet.admit(kube.create(_partition_pod(mig_node, "train")))
    [(container, resource, response)] = kubelet.responses
    assert (container, resource) == ("main", PARTITIONED)
    mig = response.envs["NVIDIA_VISIBLE_DEVICES"]
    assert mig.startswith("MIG-")  # the instance, never the parent card

    [(card, profiles)] = wait_for(
        lambda: _partitioned(testbed, mig_node.name),
        LEDGER_FOLLOWS_S,
        "the ledger to hold the partition",
    )
    assert profiles == 1
    stored = kube.get("v1", "Pod", "train", mig_node.namespace) or {}
    [claim] = parse_allocated(stored["metadata"]["annotations"][ALLOCATED_ANNOTATION])[
        "main"
    ].claims()
    assert (claim.row.id, claim.row.allocated_physical_profile) == (card, "3g.20gb")
    assert claim.row.allocated_physical_id == mig


def _record(testbed: Testbed, pod: Obj) -> str | None:
    """The Pod's allocation record (its annotation), None before the agent writes it."""
    meta = pod["metadata"]
    stored = testbed.kube.get("v1", "Pod", meta["name"], meta["namespace"]) or {}
    return (stored.get("metadata") or {}).get("annotations", {}).get(ALLOCATED_ANNOTATION)


def _instances(state: Path) -> dict[tuple[str, int], tuple[str, ...]]:
    """The simulated driver's instances, as its state file holds them: (card UUID, slot start)
    -> MIG UUIDs."""
    if not state.exists():
        return {}
    saved = json.loads(state.read_text(encoding="utf-8"))
    return {
        (card, int(gpu["start"])): tuple(c["uuid"] for c in gpu["computes"])
        for card, gpus in saved["cards"].items()
        for gpu in gpus
    }


def _charged(testbed: Testbed, node: str) -> int:
    """How many instances the node's ledger charges, over all its cards."""
    return sum(count for _, count in _partitioned(testbed, node) or [])


def test_a_partition_outlives_an_agent_restart(testbed: Testbed, chain: Installed) -> None:
    """#35: the agent of a MIG node restarts (SIGTERM, then the same command line, as a
    DaemonSet Pod is replaced) while a Pod holds a partition. SIMULATED: the A100 and its
    driver, which keeps its instances across the agent's processes in a state file
    (`nodeagent.simulate.mig.STATE_ENV`) as a real driver does. The new agent leaves the held
    instance alone, its ledger charges the same card as before, the next partition gets the
    other slot, and once the first Pod is gone its instance is unmade and its charge dropped,
    the second Pod's kept."""
    _a_held_partition_across_a_new_agent(
        testbed,
        {},
        lambda node, _: testbed.restart((f"agent-{node.name}",), down_s=1.0),
    )


def test_a_partition_cut_by_the_previous_release_outlives_the_upgrade(
    testbed: Testbed, chain: Installed, tmp_path: Path
) -> None:
    """#35, the agent upgraded under a partitioned Pod (the real nodes' cards have no MIG, so
    their upgrade test, `test_real_nodes_upgrade.py`, holds no partition): the node's agent is
    0.1.0's (its tree from the project's history, `testbed.previous.agent_tree`) when the
    first Pod's `3g.20gb` is cut, then it is stopped and this checkout's agent started with the
    same command line over the same node, kubelet and driver, as a DaemonSet rolled to the new
    image replaces its Pod. The held instance, its charge and its device ID carry over, the
    next partition gets the other slot, and the first Pod's instance is unmade once it is gone.
    SIMULATED: the A100 and its driver, whose state outlives the agent's process as a real
    driver's does (`agent_tree` says what that changes of 0.1.0's tree: its simulator only)."""
    try:
        tree = previous.agent_tree(tmp_path / "previous")
    except previous.HistoryMissing as missing:
        pytest.fail(f"the upgrade test needs the project's git history: {missing}")

    def upgrade(node: PluginNode, state: Path) -> None:
        name = f"agent-{node.name}"
        (old,) = testbed.halt((name,))
        assert _agent_source(testbed, old.env) == tree
        time.sleep(1.0)
        testbed.run(name, old.argv, {STATE_ENV: str(state)})
        assert _agent_source(testbed, testbed.state.processes[name].env) == previous.REPOSITORY

    _a_held_partition_across_a_new_agent(testbed, {"PYTHONPATH": str(tree)}, upgrade)


def _agent_source(testbed: Testbed, env: dict[str, str]) -> Path:
    """The tree whose `nodeagent` an agent started with `env` (from the testbed's folder, as
    `Testbed.run` starts it) imports."""
    found = subprocess.run(
        [sys.executable, "-c", "import nodeagent; print(nodeagent.__file__)"],
        cwd=testbed.root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip()).parents[1]


def _a_held_partition_across_a_new_agent(
    testbed: Testbed, first: dict[str, str], replace: Callable[[PluginNode, Path], object]
) -> None:
    """A simulated A100 node whose agent runs with `first` in its environment; a Pod takes a
    `3g.20gb`, then `replace(node, state file)` puts another agent process in its place. The
    held instance and its charge must carry over, and its device ID still be advertised; the
    next Pod's instance is cut beside it; once the first Pod is gone, its instance is unmade
    and its charge dropped, the second's kept."""
    state = Path(tempfile.mkdtemp(prefix="gpustack-mig-")) / "driver.json"
    try:
        env = {STATE_ENV: str(state), **first}
        with agent_node(testbed, "a100-40gb-mig", env=env) as node:
            kube, kubelet = testbed.kube, node.kubelet
            kubelet.wait_devices(PARTITIONED, lambda d: len(d) > 0, timeout=90)
            first_pod = kube.create(_partition_pod(node, "first"))
            kubelet.admit(first_pod)
            held = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
            device_ids = kubelet.known[(node.namespace, "first")]["main"][PARTITIONED]
            record = wait_for(
                lambda: _record(testbed, first_pod), LEDGER_FOLLOWS_S, "the first record"
            )
            charged = wait_for(
                lambda: _partitioned(testbed, node.name), LEDGER_FOLLOWS_S, "the first charge"
            )
            (slot,) = [key for key, uuids in _instances(state).items() if held in uuids]
            before = kubelet.wait_endpoint(PARTITIONED)

            replace(node, state)
            wait_for(
                lambda: kubelet.endpoints.get(PARTITIONED, before) is not before,
                60,
                "the new agent's plugins to register",
            )
            advertised = kubelet.wait_devices(PARTITIONED, lambda d: len(d) > 0, timeout=60)
            assert set(device_ids) <= set(advertised), (device_ids, advertised)
            assert _instances(state) == {slot: (held,)}  # not unmade by the new agent
            assert _partitioned(testbed, node.name) == charged
            assert _record(testbed, first_pod) == record

            second = kube.create(_partition_pod(node, "second"))
            kubelet.admit(second)
            other = kubelet.responses[-1][2].envs["NVIDIA_VISIBLE_DEVICES"]
            assert other.startswith("MIG-") and other != held
            instances = _instances(state)
            assert len(instances) == 2 and instances[slot] == (held,)
            wait_for(
                lambda: _charged(testbed, node.name) == 2,
                LEDGER_FOLLOWS_S,
                "the second charge beside the first",
            )

            delete_ended(kube, first_pod)
            kubelet.forget(first_pod)
            wait_for(
                lambda: _charged(testbed, node.name) == 1,
                LEDGER_FOLLOWS_S,
                "the first Pod's charge dropped",
            )
            # The reclaimer sweeps on the next Pod list the plugins take, or within its period.
            wait_for(
                lambda: list(_instances(state).values()) == [(other,)],
                RECLAIM_PERIOD_S + 30,
                "the first Pod's instance unmade, the second's kept",
            )
    finally:
        shutil.rmtree(state.parent, ignore_errors=True)


def test_the_agent_stops_at_once_on_sigterm(testbed: Testbed, plugin_node: PluginNode) -> None:
    """A DaemonSet Pod being replaced gets SIGTERM: the agent stops within moments, not after
    its current monitor period (30 s here), and takes its plugin sockets with it."""
    plugin_node.kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=90)
    name = f"agent-{plugin_node.name}"
    pid = testbed.state.processes[name].pid
    sockets = list(plugin_node.kubelet.plugin_dir.glob("nvidia.*.sock"))
    assert sockets
    started = time.monotonic()
    os.killpg(pid, signal.SIGTERM)
    wait_for(lambda: not pid_alive(pid), 10, "the agent to exit on SIGTERM")
    assert time.monotonic() - started < 5
    assert not [s for s in sockets if s.exists()]


def _gpus(node: PluginNode, name: str, count: int) -> Obj:
    pod = _pod(node)
    pod["metadata"]["name"] = name
    limits = {GPU: str(count)}
    pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": limits}
    return pod


def test_a_two_card_hint_keeps_one_pcie_switch_and_names_its_rdma_port(
    testbed: Testbed, chain: Installed
) -> None:
    """Simulated hardware: four L4 on two PCIe switches, one per socket, each switch with a RoCE
    port (`l4-x4-roce`). The agent reads the links from the simulated sysfs and NVML when its
    plugins start; after one card of the first switch is taken, a two-card request is hinted
    the other switch's pair (plain packing would cross the sockets), and the grant names that
    switch's RDMA port in `NCCL_IB_HCA` (docs/topology.md, "Best-connected card sets")."""
    with agent_node(testbed, "l4-x4-roce") as node:
        kubelet = node.kubelet
        tokens = kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=90)
        spec = Devices.parse(testbed.kube.get(WORKER, "Devices", node.name) or {}).spec
        switch = {
            card.id: 0 if card.topology.pci_bus_id.lower().endswith(("1a:00.0", "1b:00.0")) else 1
            for _, card in spec.cards()
        }
        assert sorted(switch.values()) == [0, 0, 1, 1] and len(tokens) == 4
        first = testbed.kube.create(_gpus(node, "one", 1))
        kubelet.admit(first)
        [taken] = kubelet.known[(node.namespace, "one")]["main"][GPU]
        taken_switch = switch[taken.split(":")[1]]
        second = testbed.kube.create(_gpus(node, "two", 2))
        kubelet.admit(second)
        pair = kubelet.known[(node.namespace, "two")]["main"][GPU]
        assert kubelet.hints[-1] == ("main", pair)
        assert {switch[token.split(":")[1]] for token in pair} == {1 - taken_switch}
        (_, _, response) = kubelet.responses[-1]
        assert response.envs["NCCL_IB_HCA"] == f"=mlx5_{1 - taken_switch}"
