"""Discovery on a stock NFD: the unmodified nfd-worker, with its own default configuration, reads
each real node's PCI bus and the chain's NodeFeatureRule schedules exactly the right agents.

Simulated hardware, said plainly: node-a's and node-b's `/sys/bus/pci/devices` are the PCI
functions of their simulated profiles (4 x T4, 2 x L4, and a network card of another vendor),
laid out by the testbed in each node's mount namespace (`testbed.realnode`). Nothing else about
discovery is simulated: no NodeFeature is written by hand, nfd-worker and nfd-master run from
NFD's own manifests, and the worker's configuration is NFD's default until a test here sets the
one the NVIDIA GPU Operator ships (and puts the default back).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest
import yaml

from chain.manufacturers import manufacturers
from chain.release import AGENT_NAMESPACE
from kubeapi import Obj, wait_for
from nodeagent.manifests import RULE_NAME, vendor_label
from testbed.cluster import offers_cards, ready_agents
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.pytest_plugin import REAL_NODES
from testbed.realnode import RealNode

NFD = "nfd.k8s-sigs.io/v1alpha1"
NFD_NS = "node-feature-discovery"
WORKER_CONFIG = "nfd-worker-conf"
AGENTS_NS = AGENT_NAMESPACE
NVIDIA = manufacturers({})["nvidia"]
GPU_NODES = {spec.name for spec in REAL_NODES if spec.hardware}
# What NFD's default worker configuration writes for a T4 or an L4 (class 0302, vendor 10de).
DEFAULT_LABEL = "feature.node.kubernetes.io/pci-0302_10de.present"
# The NVIDIA GPU Operator's nfd-worker configuration (its chart's default `sources.pci`).
GPU_OPERATOR_CONFIG = """\
sources:
  pci:
    deviceClassWhitelist: ["02", "0200", "0207", "0300", "0302"]
    deviceLabelFields: [vendor]
"""


def _worker_feature(bed: Testbed, node: str) -> Obj:
    """The NodeFeature nfd-worker publishes for `node` (named after it)."""
    return bed.kube.get(NFD, "NodeFeature", node, NFD_NS) or {}


def _worker_labels(bed: Testbed, node: str) -> dict[str, str]:
    return dict(_worker_feature(bed, node).get("spec", {}).get("labels") or {})


def _node_labels(bed: Testbed, node: str) -> dict[str, str]:
    found = bed.kube.get("v1", "Node", node) or {}
    return dict(found.get("metadata", {}).get("labels") or {})


def _scheduled(bed: Testbed) -> dict[str, set[str]]:
    """Agent DaemonSet -> the nodes its Pods are on (every shipped DaemonSet, even empty)."""
    table = manufacturers({})
    placed: dict[str, set[str]] = {f"gpustack-device-manager-{name}": set() for name in table}
    for pod in bed.kube.list("v1", "Pod", AGENTS_NS):
        name = pod["metadata"].get("labels", {}).get("app.kubernetes.io/name", "")
        if name in placed and pod["metadata"].get("deletionTimestamp") is None:
            placed[name].add(pod["spec"].get("nodeName", ""))
    return placed


def _exactly_the_right_agents(bed: Testbed) -> dict[str, set[str]] | None:
    placed = _scheduled(bed)
    wanted: dict[str, set[str]] = {name: set() for name in placed} | {
        "gpustack-device-manager-nvidia": GPU_NODES
    }
    for name in placed:
        ds = bed.kube.get("apps/v1", "DaemonSet", name, AGENTS_NS) or {}
        if ds.get("status", {}).get("desiredNumberScheduled") != len(wanted[name]):
            return None
    return placed if placed == wanted else None


def _worker_config_name(bed: Testbed) -> str:
    """The worker's configuration ConfigMap as NFD's kustomization names it (a generated name,
    `nfd-worker-conf-<hash>`), read from the DaemonSet that mounts it."""
    worker = bed.kube.get("apps/v1", "DaemonSet", "nfd-worker", NFD_NS) or {}
    volumes = worker.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", [])
    (name,) = [v["configMap"]["name"] for v in volumes if v.get("name") == WORKER_CONFIG]
    return str(name)


def _configure_workers(bed: Testbed, name: str, data: dict[str, str]) -> None:
    """A new nfd-worker configuration, applied the way a user does: the ConfigMap, then a
    restart of the worker DaemonSet."""
    configured = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NFD_NS},
        "data": data,
    }
    stream = yaml.safe_dump(configured)
    kubectl(bed, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)
    kubectl(bed, "rollout", "restart", "daemonset/nfd-worker", "-n", NFD_NS)
    kubectl(bed, "rollout", "status", "daemonset/nfd-worker", "-n", NFD_NS, "--timeout=180s")


def _agent_uids(bed: Testbed) -> set[str]:
    selector = "app.kubernetes.io/name=gpustack-device-manager-nvidia"
    return {
        p["metadata"]["uid"] for p in bed.kube.list("v1", "Pod", AGENTS_NS, label_selector=selector)
    }


def test_the_default_nfd_worker_reports_the_simulated_cards(real_chain: Testbed) -> None:
    bed = real_chain
    for node in GPU_NODES:
        # The worker's own raw features: the cards of the node's PCI bus, as the kernel shows them.
        feature = _worker_feature(bed, node)
        devices = feature["spec"]["features"]["instances"]["pci.device"]["elements"]
        cards = [d["attributes"] for d in devices if d["attributes"]["vendor"] == "10de"]
        assert cards and all(card["class"] == "0302" for card in cards), devices
        # The default configuration labels by class and vendor; the chain's rule adds the
        # vendor label the agents select.
        labels = _node_labels(bed, node)
        assert labels.get(DEFAULT_LABEL) == "true"
        assert labels.get(vendor_label(NVIDIA)) == "true"
        assert vendor_label(NVIDIA) not in _worker_labels(bed, node)  # not the worker's
    # The other vendor's network card labels nothing: no other manufacturer's label anywhere.
    for node in GPU_NODES:
        labels = _node_labels(bed, node)
        others = [k for k in labels if k.startswith("feature.node.kubernetes.io/pci-")]
        assert sorted(others) == sorted([DEFAULT_LABEL, vendor_label(NVIDIA)]), others
    assert bed.kube.get(NFD, "NodeFeatureRule", RULE_NAME) is not None
    # No NodeFeature but the workers' and the agents' own.
    for feature in bed.kube.list(NFD, "NodeFeature", NFD_NS):
        assert feature["metadata"]["name"] in GPU_NODES, feature["metadata"]["name"]


def test_the_default_nfd_schedules_exactly_the_right_agents(real_chain: Testbed) -> None:
    placed = wait_for(partial(_exactly_the_right_agents, real_chain), 60, "the right agents")
    assert placed["gpustack-device-manager-nvidia"] == GPU_NODES


@pytest.fixture
def agents_before(real_chain: Testbed) -> set[str]:
    return _agent_uids(real_chain)


@pytest.fixture
def gpu_operator_nfd(real_chain: Testbed, agents_before: set[str]) -> Iterator[Testbed]:
    """nfd-worker configured as the NVIDIA GPU Operator configures it (vendor labels, its class
    list), restarted the way a user applies a new worker configuration; then NFD's default
    back."""
    bed = real_chain
    name = _worker_config_name(bed)
    stock = bed.kube.get("v1", "ConfigMap", name, NFD_NS)
    assert stock is not None
    key = next(iter(stock["data"]))  # nfd-worker.conf
    _configure_workers(bed, name, {key: GPU_OPERATOR_CONFIG})
    try:
        yield bed
    finally:
        _configure_workers(bed, name, dict(stock["data"]))
        wait_for(
            lambda: all(DEFAULT_LABEL in _worker_labels(bed, n) for n in GPU_NODES),
            120,
            "the default worker labels back",
        )


def test_nfd_configured_as_the_gpu_operator_does_schedules_the_same_agents(
    agents_before: set[str], gpu_operator_nfd: Testbed
) -> None:
    bed = gpu_operator_nfd

    def relabelled() -> bool:
        return all(
            vendor_label(NVIDIA) in (labels := _worker_labels(bed, node))
            and DEFAULT_LABEL not in labels
            for node in GPU_NODES
        )

    # The worker itself now writes the vendor label (its configuration took effect) ...
    wait_for(relabelled, 120, "the GPU Operator's labels from the worker")
    # ... and the agents are exactly where they were: the rule and the worker agree.
    placed = wait_for(partial(_exactly_the_right_agents, bed), 60, "the right agents")
    assert placed["gpustack-device-manager-nvidia"] == GPU_NODES
    for node in GPU_NODES:
        assert _node_labels(bed, node).get(vendor_label(NVIDIA)) == "true"
    # The label never left a node while the configuration changed: no agent was replaced.
    assert _agent_uids(bed) == agents_before


def _worker_pod(bed: Testbed, node: str) -> Obj | None:
    for pod in bed.kube.list("v1", "Pod", NFD_NS, label_selector="app=nfd-worker"):
        if pod["spec"].get("nodeName") == node and pod["metadata"].get("deletionTimestamp") is None:
            return pod
    return None


def _rediscover(bed: Testbed, node: str) -> None:
    """nfd-worker on `node` started again (its DaemonSet makes a new Pod), so it reads the bus
    the node shows now."""
    old = _worker_pod(bed, node)
    assert old is not None
    bed.kube.delete("v1", "Pod", old["metadata"]["name"], NFD_NS)

    def replaced() -> bool:
        pod = _worker_pod(bed, node)
        ready = pod is not None and all(
            c.get("ready") for c in pod.get("status", {}).get("containerStatuses", [{}])
        )
        return ready and pod is not None and pod["metadata"]["uid"] != old["metadata"]["uid"]

    wait_for(replaced, 120, f"a new nfd-worker on {node}")


def _nodes_with_nvidia_agents(bed: Testbed) -> set[str] | None:
    """The nodes the NVIDIA agent's DaemonSet wants and has Pods on (None while they differ)."""
    placed = _scheduled(bed)["gpustack-device-manager-nvidia"]
    ds = bed.kube.get("apps/v1", "DaemonSet", "gpustack-device-manager-nvidia", AGENTS_NS) or {}
    wanted = ds.get("status", {}).get("desiredNumberScheduled")
    return placed if wanted == len(placed) else None


def test_a_node_whose_bus_holds_no_card_gets_no_agent(real_chain: Testbed) -> None:
    """node-b shows a PCI bus with no card (a CPU node: its network card only) to a new
    nfd-worker: the vendor label leaves it and so does its agent, while node-a keeps its; with
    its cards back it gets its agent again, and offers its cards as before."""
    bed = real_chain
    (spec,) = [s for s in REAL_NODES if s.name == "node-b"]
    node = RealNode(bed, spec)
    try:
        with node.pci_bus_without_cards():
            _rediscover(bed, "node-b")
            wait_for(
                lambda: vendor_label(NVIDIA) not in _node_labels(bed, "node-b"),
                120,
                "the vendor label to leave node-b",
            )
            placed = wait_for(
                lambda: _nodes_with_nvidia_agents(bed) == {"node-a"} or None,
                120,
                "node-b's agent to go",
            )
            assert placed
            assert all(not nodes for name, nodes in _scheduled(bed).items() if "nvidia" not in name)
    finally:
        _rediscover(bed, "node-b")
        wait_for(
            lambda: _node_labels(bed, "node-b").get(vendor_label(NVIDIA)) == "true",
            120,
            "the vendor label back on node-b",
        )
        wait_for(lambda: _nodes_with_nvidia_agents(bed) == GPU_NODES, 180, "node-b's agent back")
        wait_for(lambda: ready_agents(bed) == len(GPU_NODES), 180, "both agents ready")
        wait_for(lambda: offers_cards(bed, "node-b"), 180, "node-b to offer its cards again")
