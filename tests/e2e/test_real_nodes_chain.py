"""The chain on real nodes, installed as a user installs it (`real_chain`).

NFD, Kueue and Metacontroller run as Pods from their upstream manifests; `kubectl apply -k
testbed/overlay` (the shipped manifests with the local image, 4 x T4 simulated on node-a and
2 x L4 on node-b) runs every chain component as a Pod: the node agents register their device
plugins with the real kubelets, Metacontroller calls the hook Pods, the API server calls the
webhook Pods, and the verdict driver judges from its Pod.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
import yaml

from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.names import local_queue_name
from chain.release import AGENT_NAMESPACE
from kubeapi import Obj, wait_for
from testbed import images
from testbed.cluster import NVIDIA_AGENT, offers_every_card, pool_views, ready_agents
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.nodes import T4_POOL
from testbed.pytest_plugin import REAL_NODES
from testbed.workloads import card_pod, sliced_job

WORKER = "worker.gpustack.ai/v1alpha1"
GPU = "nvidia.com/gpu"
SLICED = "nvidia.com/gpu.sliced"
CARDS = {"node-a": ("tesla-t4", 4), "node-b": ("l4", 2)}
NAMESPACE = "default"


@pytest.fixture(scope="module")
def agents(real_chain: Testbed) -> Iterator[Testbed]:
    yield real_chain


def _agent_pods(bed: Testbed) -> list[Obj]:
    selector = f"app.kubernetes.io/name={NVIDIA_AGENT}"
    return bed.kube.list("v1", "Pod", AGENT_NAMESPACE, label_selector=selector)


def _capacity(bed: Testbed, node: str) -> dict[str, str]:
    found = bed.kube.get("v1", "Node", node) or {}
    return dict(found.get("status", {}).get("allocatable", {}))


def test_the_real_kubelet_registers_the_agents_plugins(agents: Testbed) -> None:
    def offers(node: str, count: int) -> bool:
        return _capacity(agents, node).get(GPU) == str(count)

    for node, (_model, count) in CARDS.items():
        wait_for(partial(offers, node, count), 90, f"{node} to offer {count} {GPU}")
        offered = _capacity(agents, node)
        assert SLICED in offered and f"{GPU}.shared" in offered
    for agent in _agent_pods(agents):
        spec = agent["spec"]
        assert spec["containers"][0]["image"] == images.PROJECT_IMAGE
        assert (
            "--device-plugin-dir=/var/lib/kubelet/device-plugins" in spec["containers"][0]["args"]
        )


def _pod(name: str, node: str, limits: dict[str, str], command: str) -> Obj:
    return card_pod(name, NAMESPACE, limits, images.PROJECT_IMAGE, command, node=node)


def _phase(bed: Testbed, name: str) -> str | None:
    found = bed.kube.get("v1", "Pod", name, NAMESPACE) or {}
    phase = found.get("status", {}).get("phase")
    return str(phase) if phase else None


def _env(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def _row(bed: Testbed, node: str, card: str) -> Any:
    found = bed.kube.get(WORKER, "Devices", node)
    if found is None:
        return None
    return Devices.parse(found).status.row("nvidia", CARDS[node][0], card)


def test_an_exclusive_pod_gets_a_card_through_the_real_kubelet(agents: Testbed) -> None:
    bed = agents
    bed.kube.create(_pod("exclusive", "node-a", {GPU: "1"}, "env; sleep 2"))
    wait_for(lambda: _phase(bed, "exclusive") == "Succeeded", 120, "the exclusive pod to end")
    env = _env(kubectl(bed, "logs", "-n", NAMESPACE, "exclusive"))
    card = env["NVIDIA_VISIBLE_DEVICES"]
    assert card.startswith("GPU-") and "," not in card
    stored = bed.kube.get("v1", "Pod", "exclusive", NAMESPACE) or {}
    assert card in stored["metadata"]["annotations"][ALLOCATED_ANNOTATION]
    bed.kube.delete("v1", "Pod", "exclusive", NAMESPACE)
    wait_for(
        lambda: (row := _row(bed, "node-a", card)) is not None and row.mode == Mode.NONE,
        30,
        "the ledger to free the card of the deleted pod",
    )


def test_restarting_the_agent_keeps_the_ledger(agents: Testbed) -> None:
    """The DaemonSet replaces a deleted agent Pod, the real kubelet takes the new plugins'
    registration, and the ledger the new agent rebuilds from the node's Pods is the same."""
    bed = agents
    bed.kube.create(_pod("holder", "node-b", {GPU: "1"}, "env; sleep 600"))
    wait_for(lambda: _phase(bed, "holder") == "Running", 120, "the holder pod to run")

    def logged() -> str | None:
        env = _env(kubectl(bed, "logs", "-n", NAMESPACE, "holder"))
        return env.get("NVIDIA_VISIBLE_DEVICES")

    card = wait_for(logged, 30, "the holder's environment")
    wait_for(
        lambda: (row := _row(bed, "node-b", card)) is not None and row.mode == Mode.EXCLUSIVE,
        30,
        "the ledger to charge the holder's card",
    )
    before = (bed.kube.get(WORKER, "Devices", "node-b") or {})["status"]

    def agent_on_b() -> list[Obj]:
        return [p for p in _agent_pods(bed) if p["spec"].get("nodeName") == "node-b"]

    (old,) = agent_on_b()
    bed.kube.delete("v1", "Pod", old["metadata"]["name"], AGENT_NAMESPACE)

    def replaced() -> bool:
        pods = agent_on_b()
        return (
            len(pods) == 1
            and pods[0]["metadata"]["uid"] != old["metadata"]["uid"]
            and ready_agents(bed) == len(REAL_NODES)
        )

    wait_for(replaced, 120, "the agent on node-b to be replaced and ready")
    wait_for(lambda: _capacity(bed, "node-b").get(GPU) == "2", 60, "the plugins re-registered")
    after = (bed.kube.get(WORKER, "Devices", "node-b") or {})["status"]
    assert after == before
    assert _phase(bed, "holder") == "Running"
    bed.kube.delete("v1", "Pod", "holder", NAMESPACE)


def test_a_sliced_job_goes_through_every_gate_onto_a_real_node(agents: Testbed) -> None:
    """A tenant's batch/v1 Job asking half a card's memory: the Pod webhook folds it, Kueue
    admits it on the pool's queue, the per-card check answers Ready, the scheduler binds it, the
    kubelet admits it through the agent's Allocate, and the container prints the HAMi-core
    environment; the ledger holds the slice while it runs and frees it when the Job is done."""
    bed = agents
    namespace = f"tenant-{uuid.uuid4().hex[:5]}"
    bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    queue = local_queue_name(T4_POOL)
    try:
        _sliced_job_through_every_gate(bed, namespace, queue)
        # The Job's Pod ends Succeeded and stays listed until its namespace goes: a finished
        # Pod holds no card, so node-a offers all four whole again before the namespace is
        # deleted (the modules after this one start from a node with every card free).
        (node_a,) = [spec for spec in REAL_NODES if spec.name == "node-a"]
        wait_for(lambda: offers_every_card(bed, node_a), 120, "node-a's four cards free")
    finally:
        bed.kube.delete("v1", "Namespace", namespace)


def _sliced_job_through_every_gate(bed: Testbed, namespace: str, queue: str) -> None:
    """The Job admitted, run and ended, its slice charged while it runs and freed after."""
    wait_for(
        lambda: bed.kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", queue, namespace),
        90,
        "the pool's LocalQueue in the tenant namespace",
    )
    wait_for(lambda: _capacity(bed, "node-a").get(f"{SLICED}.units"), 90, "node-a's counting keys")
    idle = wait_for(lambda: pool_views(bed, T4_POOL), 60, "the T4 pool's views")
    # /proc/self/maps of grep itself: the dynamic loader preloaded the library into it.
    command = "env; echo LIBVGPU=$(grep -c /usr/local/vgpu/libvgpu.so /proc/self/maps); sleep 20"
    job = sliced_job("sliced", namespace, queue, images.PROJECT_IMAGE, 50, command)
    bed.kube.create(job)

    def running_pod() -> Obj | None:
        pods = bed.kube.list("v1", "Pod", namespace, label_selector="job-name=sliced")
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return running[0] if running else None

    pod = wait_for(running_pod, 180, "the Job's Pod to run on a real node")
    assert pod["spec"]["nodeName"] == "node-a"
    folded = pod["spec"]["containers"][0]["resources"]["limits"]
    assert folded[f"{SLICED}.units"] == "800k"  # 50 % of a card's 1,600,000 units

    def logged() -> dict[str, str] | None:
        log = kubectl(bed, "logs", "-n", namespace, pod["metadata"]["name"])
        env = _env(log)
        return env if "LIBVGPU" in env else None

    env = wait_for(logged, 30, "the sliced container's environment")
    card = env["NVIDIA_VISIBLE_DEVICES"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{16384 // 2}m"  # half a T4's 16,384 MiB
    assert env["CUDA_DEVICE_SM_LIMIT"] == "100"
    # The isolation library the init container staged is preloaded into every process of the
    # container (the testbed's stand-in for HAMi-core: it marks its load, enforces nothing).
    assert int(env["LIBVGPU"]) > 0
    assert env["GPUSTACK_ISOLATION_STANDIN"] == "loaded"
    wait_for(
        lambda: (row := _row(bed, "node-a", card)) is not None and row.mode == Mode.SLICED,
        30,
        "the ledger to hold the slice",
    )
    wait_for(lambda: pool_views(bed, T4_POOL) not in (None, idle), 60, "the pool's views to move")
    wait_for(
        lambda: (row := _row(bed, "node-a", card)) is not None and row.mode == Mode.NONE,
        120,
        "the ledger to free the slice once the Job is done",
    )
    wait_for(lambda: pool_views(bed, T4_POOL) == idle, 60, "the pool's views to free again")
    wait_for(
        lambda: (
            (bed.kube.get("batch/v1", "Job", "sliced", namespace) or {})
            .get("status", {})
            .get("succeeded")
            == 1
        ),
        60,
        "the Job to succeed",
    )


def test_a_pod_breaking_a_request_rule_is_denied_with_the_rule(agents: Testbed) -> None:
    """Two cards of slices in one Pod: the Pod webhook refuses it, saying which rule and why,
    before anything reaches a node."""
    bed = agents
    queue = local_queue_name(T4_POOL)
    pod = _pod("two-slices", "node-a", {SLICED: "2", f"{SLICED}.memory-percentage": "20"}, "true")
    pod["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    try:
        kubectl(bed, "create", "-f", "-", stdin=yaml.safe_dump(pod))
    except RuntimeError as denied:
        message = str(denied)
    else:
        raise AssertionError("a Pod asking two cards of slices was admitted")
    assert "denied the request" in message
    assert "a logical slice request is always a single card" in message
    assert bed.kube.get("v1", "Pod", "two-slices", NAMESPACE) is None
