"""Real nodes joined to a testbed control plane: the images they run, the nodes, cluster DNS.

    bed = Testbed(root, real_nodes=True); bed.up(components=...)
    start_nodes(bed, [NodeSpec("node-a", 0), NodeSpec("node-b", 1)])

The nodes' images (the project's, built from its Containerfile; the Pod sandbox; CoreDNS; the
upstream parts of `testbed.upstream`) are made here if missing and imported into each node's
containerd. Once the nodes are Ready, CoreDNS
(testbed/addons/coredns.yaml) answers at the cluster DNS address, so Pods reach Services by
name. `bed.down()` removes the nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import yaml

from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from kubeapi import load_yaml_documents, wait_for
from nodeagent.vendors.nvidia.simulate import load_profile
from testbed import build, images, network, realnode, registry, system, upstream
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.realnode import NodeSpec, RealNode
from testbed.registry import image_name

ADDONS = Path(__file__).with_name("addons")
# The real nodes of the e2e tests and the demo: two, so that traffic crosses nodes; node-a shows
# 4 simulated T4 on its PCI bus and node-b 2 simulated L4 beside a RoCE port (`l4x2-roce`: the
# NIC environment of a gang reaches a real container), and the overlay (testbed/overlay)
# gives each node's agent the same profile.
REAL_NODES = (NodeSpec("node-a", 0, hardware="t4x4"), NodeSpec("node-b", 1, hardware="l4x2-roce"))


def coredns_image() -> str:
    version = build.versions()["coredns"]["version"]
    return images.ensure_scratch_image(image_name("coredns", version), build.binary("coredns"))


def node_images(log: Callable[[str], None] = print) -> list[str]:
    """Every image the nodes run (built when missing), by the name they pull it by."""
    system.ensure(log)
    makers = (
        images.ensure_project_image,
        images.ensure_pause_image,
        coredns_image,
        upstream.metacontroller_image,
        upstream.kueue_image,
        upstream.nfd_image,
        images.ensure_isolation_standin_image,
    )
    return [make() for make in makers]


def start_nodes(bed: Testbed, specs: Sequence[NodeSpec], timeout: float = 180.0) -> list[RealNode]:
    """The registry with every image pushed, then the nodes (which pull from it), CoreDNS."""
    made = node_images()
    registry.start(bed)
    for image in made:
        registry.push(bed, image)
    bed.kube.apply_all(load_yaml_documents(ADDONS / "kube-router-rbac.yaml"))
    nodes = []
    for spec in specs:
        node = RealNode(bed, spec)
        node.start(list(specs))
        nodes.append(node)
    realnode.wait_ready(bed, [s.name for s in specs], timeout)
    for node in nodes:
        node.start_kube_router()  # before any Pod: none runs unprotected
    start_dns(bed, timeout)
    return nodes


def start_dns(bed: Testbed, timeout: float) -> None:
    text = (ADDONS / "coredns.yaml").read_text()
    text = text.replace("COREDNS_IMAGE", coredns_image())
    text = text.replace("DNS_SERVICE_IP", network.DNS_SERVICE_IP)
    path = bed.root / "coredns.yaml"
    path.write_text(text)
    bed.kube.apply_all(load_yaml_documents(path))

    def ready() -> bool:
        bed.check_alive()
        deployment = bed.kube.get("apps/v1", "Deployment", "coredns", "kube-system")
        return bool(deployment and deployment.get("status", {}).get("readyReplicas"))

    wait_for(ready, timeout, "CoreDNS to be ready")


OVERLAY = Path(__file__).with_name("overlay")
NVIDIA_AGENT = "gpustack-device-manager-nvidia"


def ready_agents(bed: Testbed, namespace: str = AGENT_NAMESPACE) -> int:
    found = bed.kube.get("apps/v1", "DaemonSet", NVIDIA_AGENT, namespace) or {}
    return int(found.get("status", {}).get("numberReady", 0))


def deployment_available(bed: Testbed, name: str, namespace: str = SYSTEM_NAMESPACE) -> bool:
    found = bed.kube.get("apps/v1", "Deployment", name, namespace) or {}
    status = found.get("status", {})
    wanted = found.get("spec", {}).get("replicas", 1)
    return bool(status.get("availableReplicas") == wanted and status.get("updatedReplicas"))


def install_chain(bed: Testbed, nodes: Sequence[NodeSpec], timeout: float = 300.0) -> None:
    """The whole install as a user runs it, on a control plane started without Kueue,
    Metacontroller and NFD (`bed.up(components=COMPONENT_ORDER[:3])`): those three from their
    upstream manifests as Pods (`testbed.upstream`), then `kubectl apply -k testbed/overlay`
    once (the shipped manifests with the local image and simulated NVIDIA hardware). Returns
    once every Deployment of the chain is available, the agents are ready and every node offers
    its cards."""
    upstream.install_nfd(bed)
    upstream.install_kueue(bed)
    upstream.install_metacontroller(bed)
    apply_chain(bed, nodes, timeout)


def apply_chain(bed: Testbed, nodes: Sequence[NodeSpec], timeout: float = 300.0) -> None:
    """`kubectl apply -k testbed/overlay` once, then wait as `install_chain` says."""
    kubectl(bed, "apply", "-k", str(OVERLAY))  # once: any refusal raises
    rendered = yaml.safe_load_all(kubectl(bed, "kustomize", str(OVERLAY)))
    for obj in rendered:
        if obj and obj["kind"] == "Deployment":
            name = obj["metadata"]["name"]
            wait_for(partial(deployment_available, bed, name), timeout, f"{name} to be available")
    wait_for(lambda: ready_agents(bed) == len(nodes), timeout, "the node agents to be ready")
    for spec in nodes:
        wait_for(partial(offers_cards, bed, spec.name), timeout, f"{spec.name} to offer cards")


def pool_views(bed: Testbed, pool: str) -> str | None:
    """A pool's four views (EX/SH/SL/PT, `onceMaxRequest/remaining` each) once its cards are
    counted: None while the InstanceType has no status yet or still counts no card."""
    found = bed.kube.get("worker.gpustack.ai/v1alpha1", "InstanceType", pool) or {}
    summary = str(found.get("status", {}).get("acceleratorSummary") or "")
    exclusive_remaining = summary.split(" ")[0].partition("/")[2]
    return summary if exclusive_remaining not in ("", "0") else None


def offers_cards(bed: Testbed, node: str) -> bool:
    """The kubelet took the agent's registration and the agent wrote the counting keys."""
    found = bed.kube.get("v1", "Node", node) or {}
    offered = found.get("status", {}).get("allocatable", {})
    return bool(offered.get("nvidia.com/gpu")) and "nvidia.com/gpu.sliced.units" in offered


def card_count(spec: NodeSpec) -> int:
    """How many whole cards a real node shows (its simulated profile's)."""
    return len(load_profile(spec.hardware).cards) if spec.hardware else 0


def terminating_namespaces(bed: Testbed) -> list[str]:
    return [
        ns["metadata"]["name"]
        for ns in bed.kube.list("v1", "Namespace")
        if ns["metadata"].get("deletionTimestamp")
    ]


def offers_every_card(bed: Testbed, spec: NodeSpec) -> bool:
    """The node is Ready and offers each of its cards whole: no Pod holds one in any mode (a
    card held in one mode is listed Unhealthy in the others, so it leaves `nvidia.com/gpu`)."""
    status = (bed.kube.get("v1", "Node", spec.name) or {}).get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    return ready and status.get("allocatable", {}).get("nvidia.com/gpu") == str(card_count(spec))


def what_holds(bed: Testbed, node: str) -> list[str]:
    """The Pods bound to a node, with their phases: what a test that waited in vain for the
    node's cards says."""
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']} {p['status'].get('phase')}"
        for p in bed.kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}")
    ]


def wait_quiet(bed: Testbed, specs: Sequence[NodeSpec], timeout: float = 300.0) -> None:
    """Until earlier tests' scratch namespaces are gone and every node in `specs` offers all its
    cards: the real-node modules share one cluster, and a module that counts cards or watches
    what is deleted must not see the end of another's Pods."""
    wait_for(lambda: not terminating_namespaces(bed), timeout, "earlier namespaces to be gone")
    for spec in specs:
        try:
            wait_for(partial(offers_every_card, bed, spec), timeout, f"{spec.name}'s cards")
        except TimeoutError:
            allocatable = (bed.kube.get("v1", "Node", spec.name) or {}).get("status", {})
            raise AssertionError(
                f"{spec.name} never offered its {card_count(spec)} cards: allocatable "
                f"{allocatable.get('allocatable')}, Pods on it {what_holds(bed, spec.name)}"
            ) from None
