"""Node objects as a kubelet would register them, for a cluster that has no kubelet.

Tools such as nfd-master patch Nodes with JSON patches that assume the maps a kubelet always
fills (labels, annotations) exist; a bare Node makes them fail. So every fake Node is built here.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeapi import Kube, Obj


def node_object(
    name: str,
    cpu: str = "8",
    memory: str = "32Gi",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                **(annotations or {}),
            },
        },
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110", **(capacity or {})},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **(capacity or {})},
            # Kueue's topology-aware scheduling only places pods on Ready nodes.
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-30T00:00:00Z",
                    "lastTransitionTime": "2026-11-30T00:00:00Z",
                }
            ],
        },
    }


def register_node(kube: Kube, node: Obj) -> Obj:
    """Create the Node, then write its status the way a kubelet does (a separate call)."""
    created = kube.create({k: v for k, v in node.items() if k != "status"})
    if "status" in node:
        created = kube.merge_patch(
            "v1",
            "Node",
            node["metadata"]["name"],
            {"status": node["status"]},
            subresource="status",
        )
    return created


# What NFD would publish for a simulated T4 node, for tests and benchmarks that need a pool
# without running node agents (the e2e pools test drives these through the real NFD master).
NFD = "nfd.k8s-sigs.io/v1alpha1"
NFD_NS = "node-feature-discovery"
T4_KEY = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
"""The pool (and LocalQueue base name) T4 nodes built this way land in."""


def nfd_worker_feature(node: str) -> Obj:
    """What nfd-worker publishes for an AMD family 25 model 1 CPU (labels and raw features)."""
    return {
        "apiVersion": NFD,
        "kind": "NodeFeature",
        "metadata": {
            "name": node,
            "namespace": NFD_NS,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {
            "features": {
                "attributes": {
                    "cpu.model": {"elements": {"vendor_id": "AMD", "family": "25", "id": "1"}}
                },
            },
            "labels": {
                "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
                "feature.node.kubernetes.io/cpu-model.family": "25",
                "feature.node.kubernetes.io/cpu-model.id": "1",
            },
        },
    }


@dataclass(frozen=True)
class CardFacts:
    """What the node agent labels a card model with (docs/design/node-agent.md, "Node labels")."""

    key: str
    product: str
    memory: str
    cores: str
    family: str
    comcap: str


T4 = CardFacts(T4_KEY, "Tesla-T4", "15Gi", "2560", "Turing", "7.5")
L4 = CardFacts(
    "acceleratable.feature.gpustack.ai/nvidia-l4", "NVIDIA-L4", "22Gi", "7424", "Ada", "8.9"
)


def device_manager_feature(node: str, cards: int, card: CardFacts = T4) -> Obj:
    """The node agent's NodeFeature for `cards` cards of one model (Tesla T4 unless said)."""
    key = card.key
    return {
        "apiVersion": NFD,
        "kind": "NodeFeature",
        "metadata": {
            "name": f"{node}-gpustack-device-manager",
            "namespace": NFD_NS,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {
            "labels": {
                "feature.gpustack.ai/acceleratable": "true",
                "acceleratable.feature.gpustack.ai/nvidia": "true",
                "acceleratable.feature.gpustack.ai/nvidia.driver-version": "580.126.09",
                "acceleratable.feature.gpustack.ai/nvidia.runtime-version": "13.0",
                key: "true",
                f"{key}.product": card.product,
                f"{key}.memory": card.memory,
                f"{key}.cores": card.cores,
                f"{key}.family": card.family,
                f"{key}.comcap": card.comcap,
                f"{key}.count": str(cards),
            }
        },
    }


def add_t4_node(kube: Kube, name: str, cards: int, labels: dict[str, str] | None = None) -> None:
    """A registered node of `cards` Tesla T4 and 16 CPUs, with what NFD and the node agent
    would publish for it (no agent runs: a test writes its `Devices` if it needs one)."""
    capacity = {"nvidia.com/gpu": str(cards)}
    register_node(kube, node_object(name, cpu="16", labels=labels, capacity=capacity))
    kube.apply(nfd_worker_feature(name))
    kube.apply(device_manager_feature(name, cards))


def remove_t4_node(kube: Kube, name: str) -> None:
    """Undo `add_t4_node`, and the `Devices` a test wrote for the node."""
    kube.delete(NFD, "NodeFeature", name, NFD_NS)
    kube.delete(NFD, "NodeFeature", f"{name}-gpustack-device-manager", NFD_NS)
    kube.delete("worker.gpustack.ai/v1alpha1", "Devices", name)
    kube.delete("v1", "Node", name)
