"""The node agent as shipped, on real nodes: the DaemonSet from manifests/ registers its device
plugins with the real kubelet, whose device manager calls Allocate for real Pods.

The objects come from `kubectl kustomize testbed/overlay` (the shipped manifests with the local
image and simulated NVIDIA hardware: 4 x T4 on node-a, 2 x L4 on node-b), applied with the real
kubectl. Only the agent's part is applied here (its namespace, the chain's CRDs, its RBAC and the
DaemonSets): the rest of the install needs Kueue, Metacontroller and cert-manager on the nodes.
NFD's labels for the simulated PCI bus (`pci-10de.present`) are set on the Nodes by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from testbed import images
from testbed.cluster import kubectl
from testbed.harness import Testbed
from testbed.kube import Obj, wait_for
from testbed.pytest_plugin import REAL_NODES

OVERLAY = Path(__file__).resolve().parents[2] / "testbed" / "overlay"
AGENT_NS = "gpustack-system"
AGENT = "gpustack-device-manager-nvidia"
WORKER = "worker.gpustack.ai/v1alpha1"
GPU = "nvidia.com/gpu"
SLICED = "nvidia.com/gpu.sliced"
CARDS = {"node-a": ("tesla-t4", 4), "node-b": ("l4", 2)}
NAMESPACE = "default"


def _agent_objects(rendered: str) -> list[Obj]:
    """The agent's share of the install: its namespace, the chain's CRDs, its RBAC and the
    DaemonSets, exactly as kustomize rendered them."""
    keep = []
    for obj in yaml.safe_load_all(rendered):
        if not obj:
            continue
        name = obj["metadata"]["name"]
        chain_crd = obj["kind"] == "CustomResourceDefinition" and "gpustack.ai" in name
        if obj["kind"] == "Namespace" or chain_crd or name.startswith("gpustack-device-manager"):
            keep.append(obj)
    return keep


def _ready_agents(bed: Testbed) -> int:
    ds = bed.kube.get("apps/v1", "DaemonSet", AGENT, AGENT_NS) or {}
    return int(ds.get("status", {}).get("numberReady", 0))


@pytest.fixture(scope="module")
def agents(real_cluster: Testbed) -> Iterator[Testbed]:
    bed = real_cluster
    bed.kube.apply_all(bed.nfd_crds())  # NFD is a prerequisite: its NodeFeature CRD
    wait_for(lambda: bed.crd_established("nodefeatures.nfd.k8s-sigs.io"), 30, "NodeFeature CRD")
    rendered = kubectl(bed, "kustomize", str(OVERLAY))
    assert f"image: {images.PROJECT_IMAGE}" in rendered
    objects = _agent_objects(rendered)
    kubectl(bed, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    for spec in REAL_NODES:  # what NFD's worker says of a node with NVIDIA cards on its bus
        kubectl(bed, "label", "node", spec.name, "feature.node.kubernetes.io/pci-10de.present=true")
    wait_for(lambda: _ready_agents(bed) == len(REAL_NODES), 180, "the agents to be ready")
    yield bed


def _capacity(bed: Testbed, node: str) -> dict[str, str]:
    found = bed.kube.get("v1", "Node", node) or {}
    return dict(found.get("status", {}).get("allocatable", {}))


def test_the_real_kubelet_registers_the_agents_plugins(agents: Testbed) -> None:
    for node, (_model, count) in CARDS.items():
        wait_for(
            lambda node=node, count=count: _capacity(agents, node).get(GPU) == str(count),
            90,
            f"{node} to offer {count} {GPU}",
        )
        offered = _capacity(agents, node)
        assert SLICED in offered and f"{GPU}.shared" in offered
    pods = agents.kube.list("v1", "Pod", AGENT_NS)
    for agent in pods:
        spec = agent["spec"]
        assert spec["containers"][0]["image"] == images.PROJECT_IMAGE
        assert (
            "--device-plugin-dir=/var/lib/kubelet/device-plugins" in spec["containers"][0]["args"]
        )


def _pod(name: str, node: str, limits: dict[str, str], command: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "main",
                    "image": images.PROJECT_IMAGE,
                    "command": ["sh", "-c", command],
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
    }


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
        return [
            p for p in bed.kube.list("v1", "Pod", AGENT_NS) if p["spec"].get("nodeName") == "node-b"
        ]

    (old,) = agent_on_b()
    bed.kube.delete("v1", "Pod", old["metadata"]["name"], AGENT_NS)

    def replaced() -> bool:
        pods = agent_on_b()
        return (
            len(pods) == 1
            and pods[0]["metadata"]["uid"] != old["metadata"]["uid"]
            and _ready_agents(bed) == len(REAL_NODES)
        )

    wait_for(replaced, 120, "the agent on node-b to be replaced and ready")
    wait_for(lambda: _capacity(bed, "node-b").get(GPU) == "2", 60, "the plugins re-registered")
    after = (bed.kube.get(WORKER, "Devices", "node-b") or {})["status"]
    assert after == before
    assert _phase(bed, "holder") == "Running"
    bed.kube.delete("v1", "Pod", "holder", NAMESPACE)
