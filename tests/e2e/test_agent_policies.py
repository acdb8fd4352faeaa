"""The admission policies that guard the per-card ledger, on the real API server.

`gpustack-allocation-record`: nobody but the node agent of a Pod's own node sets, changes or
removes the Pod's allocation record. `gpustack-node-agent-scope`: the agent's ServiceAccount
writes only what its own node needs. Tokens here are bound to a Node, so they name it the way
the token the kubelet projects into the agent's Pod does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.release import AGENT_NAMESPACE
from kubeapi import Kube, KubeError, Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.nodes import node_object, register_node

AGENT_NS = AGENT_NAMESPACE
AGENT = "gpustack-device-manager"
DEVICES_API = "worker.gpustack.ai/v1alpha1"
NFD = "nfd.k8s-sigs.io/v1alpha1"
RECORD = json.dumps({"main": {"claims": []}})


@dataclass
class Scene:
    admin: Kube
    agent_x: Kube
    agent_y: Kube
    x: str
    y: str
    namespace: str


@pytest.fixture
def scene(testbed: Testbed, chain: Installed) -> Iterator[Scene]:
    kube = testbed.kube
    tag = uuid.uuid4().hex[:5]
    x, y, namespace = f"pol-{tag}-x", f"pol-{tag}-y", f"pol-{tag}"
    for name in (x, y):
        register_node(kube, node_object(name))
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    def agent_of(node: str) -> Kube:
        return Kube.from_kubeconfig(testbed.service_account_kubeconfig(AGENT_NS, AGENT, node))

    # A policy takes effect a moment after it is applied: wait until a dry run is refused.
    forged = {**_pod("probe", x, {ALLOCATED_ANNOTATION: RECORD})}
    forged["metadata"]["namespace"] = namespace

    def refused() -> bool:
        try:
            kube.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                body=forged,
                params={"dryRun": "All"},
            )
        except KubeError:
            return True
        return False

    wait_for(refused, 30, "the allocation-record policy to take effect")
    yield Scene(kube, agent_of(x), agent_of(y), x, y, namespace)
    kube.delete("v1", "Namespace", namespace)
    for name in (x, y):
        kube.delete("v1", "Node", name)


def _pod(name: str, node: str, annotations: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "pause"}]},
    }


def _annotate(kube: Kube, name: str, namespace: str, value: str | None) -> Obj:
    patch = {"metadata": {"annotations": {ALLOCATED_ANNOTATION: value}}}
    return kube.merge_patch("v1", "Pod", name, patch, namespace=namespace)


def _denied(call: object, *words: str) -> str:
    assert callable(call)
    with pytest.raises(KubeError) as denied:
        call()
    message = denied.value.message
    assert denied.value.status in (403, 422), message
    for word in words:
        assert word in message, message
    return message


def test_only_the_agent_of_the_pods_node_writes_its_record(scene: Scene) -> None:
    admin, ns = scene.admin, scene.namespace
    # A tenant cannot create a Pod that already claims a card.
    forged = _pod("forged", scene.x, {ALLOCATED_ANNOTATION: RECORD})
    _denied(
        lambda: admin.create({**forged, "metadata": {**forged["metadata"], "namespace": ns}}),
        "gpustack-allocation-record",
        "cannot be set on a new Pod",
    )
    admin.create({**_pod("worker", scene.x), "metadata": {"name": "worker", "namespace": ns}})
    # Nor add one to a running Pod.
    _denied(lambda: _annotate(admin, "worker", ns, RECORD), "cannot be added")
    # The agent of another node cannot either.
    # (Both policies refuse it; the API server reports whichever it evaluated first.)
    _denied(lambda: _annotate(scene.agent_y, "worker", ns, RECORD), "ValidatingAdmissionPolicy")
    # The agent of the Pod's node can.
    written = _annotate(scene.agent_x, "worker", ns, RECORD)
    assert written["metadata"]["annotations"][ALLOCATED_ANNOTATION] == RECORD
    # Once written, nobody else edits or removes it...
    _denied(lambda: _annotate(admin, "worker", ns, json.dumps({"main": {}})), "cannot be changed")
    _denied(lambda: _annotate(admin, "worker", ns, None), "cannot be removed")
    # ...while everything else about the Pod stays the tenant's, and the Pod can be deleted.
    admin.merge_patch("v1", "Pod", "worker", {"metadata": {"labels": {"team": "a"}}}, namespace=ns)
    admin.delete("v1", "Pod", "worker", ns)


def test_the_agent_writes_only_what_its_node_needs(scene: Scene, testbed: Testbed) -> None:
    admin, agent, ns, x, y = scene.admin, scene.agent_x, scene.namespace, scene.x, scene.y
    admin.create({**_pod("here", x), "metadata": {"name": "here", "namespace": ns}})
    admin.create({**_pod("there", y), "metadata": {"name": "there", "namespace": ns}})
    # Pods: the record of its node's Pods only; nothing else of them.
    _denied(
        lambda: agent.merge_patch(
            "v1", "Pod", "here", {"metadata": {"labels": {"x": "1"}}}, namespace=ns
        ),
        f"may change only the allocation record of the Pods bound to {x}",
    )
    _denied(lambda: _annotate(agent, "there", ns, RECORD), "ValidatingAdmissionPolicy")
    # Its Node: the fit labels, its status; not another Node, not other labels, not the spec.
    fit = f"sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4-{uuid.uuid4().hex[:4]}"
    agent.merge_patch("v1", "Node", x, {"metadata": {"labels": {fit: "3"}}})
    _denied(
        lambda: agent.merge_patch("v1", "Node", y, {"metadata": {"labels": {fit: "3"}}}),
        f"the node agent of {x} may write only its own Node",
    )
    _denied(
        lambda: agent.merge_patch("v1", "Node", x, {"metadata": {"labels": {"role": "x"}}}),
        "only the chain's fit labels",
    )
    _denied(
        lambda: agent.merge_patch("v1", "Node", x, {"spec": {"unschedulable": True}}),
        "only the chain's fit labels",
    )
    capacity = {"status": {"capacity": {"example.com/thing.sliced.units": "1"}}}
    agent.merge_patch("v1", "Node", x, capacity, subresource="status")
    _denied(
        lambda: agent.merge_patch(
            "v1",
            "Node",
            x,
            {"status": {"capacity": {"example.com/thing": "1"}}},
            subresource="status",
        ),
        "only the chain's counting keys",
    )
    _denied(
        lambda: agent.merge_patch("v1", "Node", y, capacity, subresource="status"),
        "may write only its own Node",
    )
    # Devices and NodeFeature: the ones named after its node.
    devices = {"apiVersion": DEVICES_API, "kind": "Devices", "spec": {"groups": []}}
    agent.create({**devices, "metadata": {"name": x}})
    _denied(
        lambda: agent.create({**devices, "metadata": {"name": y}}),
        f"may write only the Devices named {x}",
    )
    feature = {"apiVersion": NFD, "kind": "NodeFeature", "spec": {"labels": {}}}

    def feature_of(name: str, node: str) -> Obj:
        labels = {"nfd.node.kubernetes.io/node-name": node}
        return {**feature, "metadata": {"name": name, "namespace": AGENT_NS, "labels": labels}}

    agent.create(feature_of(f"{x}-{AGENT}", x))
    _denied(
        lambda: agent.create(feature_of(f"{y}-{AGENT}", y)),
        f"may write only the NodeFeature named {x}-{AGENT}",
    )
    # nfd-master routes a NodeFeature by its node-name label, not by its name.
    _denied(
        lambda: agent.create(feature_of(f"{x}-{AGENT}-2", y)),
        f"labelled nfd.node.kubernetes.io/node-name: {x}",
    )
    admin.delete(DEVICES_API, "Devices", x)
    admin.delete(NFD, "NodeFeature", f"{x}-{AGENT}", AGENT_NS)
    # A token that names no node (not one the kubelet projected) writes nothing.
    unbound = Kube.from_kubeconfig(testbed.service_account_kubeconfig(AGENT_NS, AGENT))
    _denied(
        lambda: unbound.merge_patch("v1", "Node", x, {"metadata": {"labels": {fit: "1"}}}),
        "this token names no node",
    )
