"""Node objects as a kubelet would register them, for a cluster that has no kubelet.

Tools such as nfd-master patch Nodes with JSON patches that assume the maps a kubelet always
fills (labels, annotations) exist; a bare Node makes them fail. So every fake Node is built here.
"""

from __future__ import annotations

from testbed.kube import Kube, Obj


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
