"""The trust boundaries probed as an attacker would, on the real-node install (`real_chain`).

Every probe uses an identity a real cluster has: the node agent's own token, read from the
running agent's Pod (the one the kubelet projected, which names the node); a scheduler-like
identity allowed to bind Pods; the cluster admin. Each probe was accepted before the policies
covered its path (issue #30) and is refused now, with a message that names the rule. The last
tests show that one tenant's Pod cannot stall the records of a node's other Pods: a Pod at the
annotation size limit still gets its record, and a Pod whose record can never fit is reported
and retried on its own while the next Pod's record lands.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.release import AGENT_NAMESPACE
from kubeapi import Kube, KubeError, Obj, wait_for
from testbed import images
from testbed.cluster import NVIDIA_AGENT
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from tests.e2e.conftest import scratch_namespace
from tests.e2e.test_agent_policies import _denied

GPU = "nvidia.com/gpu"
NODE = "node-a"
OTHER = "node-b"
NFD = "nfd.k8s-sigs.io/v1alpha1"
DEVICES_API = "worker.gpustack.ai/v1alpha1"
RECORD = json.dumps({"main": {"claims": []}})
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount/token"
ANNOTATIONS_LIMIT = 256 * 1024
"""The API server's limit on a Pod's annotations, keys and values together."""

# Every subresource the API server serves for Pods, and how a write through it could reach the
# Pod's annotations (the test fails on one it does not know, so a new version's is looked at).
POD_WRITE_PATHS = {
    "pods/status": "patches the whole Pod, metadata included",
    "pods/binding": "a Binding's metadata.annotations are copied onto the Pod",
    "pods/eviction": "an Eviction deletes the Pod; its own metadata is not copied",
    "pods/ephemeralcontainers": "the API server keeps the old metadata",
    "pods/resize": "the API server keeps the old metadata",
}
POD_CONNECT_PATHS = {"pods/attach", "pods/exec", "pods/log", "pods/portforward", "pods/proxy"}


@pytest.fixture(scope="module")
def bed(real_chain: Testbed) -> Testbed:
    return real_chain


@pytest.fixture
def namespace(bed: Testbed) -> Iterator[str]:
    with scratch_namespace(bed, "trust") as name:
        yield name


def _token_kube(bed: Testbed, token: str, label: str) -> Kube:
    path = bed.root / f"token-probe-{label}"
    path.write_text(token)
    return Kube(bed.server, bed.certs.ca_crt, token_file=Path(path))


def _agent_of(bed: Testbed, node: str) -> Kube:
    """The node agent's own credential: the token the kubelet projected into its Pod."""
    selector = f"app.kubernetes.io/name={NVIDIA_AGENT}"
    pods = bed.kube.list("v1", "Pod", AGENT_NAMESPACE, label_selector=selector)
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == node]
    token = kubectl(
        bed, "exec", "-n", AGENT_NAMESPACE, pod["metadata"]["name"], "--", "cat", TOKEN_PATH
    )
    return _token_kube(bed, token.strip(), f"agent-{node}")


def _binder(bed: Testbed, namespace: str) -> Kube:
    """An identity allowed to bind Pods, as kube-scheduler or a secondary scheduler is."""
    kube, name = bed.kube, f"binder-{namespace}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "binder", "namespace": namespace},
        }
    )
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            ],
        }
    )
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "binder", "namespace": namespace}],
        }
    )
    return Kube.from_kubeconfig(bed.service_account_kubeconfig(namespace, "binder"))


def _pod(name: str, namespace: str, node: str | None, cards: int = 0, **meta: Any) -> Obj:
    limits = {GPU: str(cards)} if cards else {}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": images.PROJECT_IMAGE,
                "command": ["sleep", "600"],
                "resources": {"limits": limits, "requests": limits},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    else:
        spec["schedulerName"] = "probe-scheduler"  # nobody schedules it: the probe binds it
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": spec,
    }


def _record_of(bed: Testbed, name: str, namespace: str) -> str | None:
    found = bed.kube.get("v1", "Pod", name, namespace) or {}
    annotations = found.get("metadata", {}).get("annotations") or {}
    return annotations.get(ALLOCATED_ANNOTATION)


def _with_record(obj: Obj) -> Obj:
    meta = {**obj.get("metadata", {}), "annotations": {ALLOCATED_ANNOTATION: RECORD}}
    return {**obj, "metadata": meta}


def test_every_path_to_a_pods_annotations_is_guarded(bed: Testbed, namespace: str) -> None:
    """The API server's own list of Pod subresources, each tried as the cluster admin."""
    discovered = {
        r["name"]
        for r in bed.kube.request("GET", "/api/v1")["resources"]
        if r["name"].startswith("pods/")
    }
    assert discovered == set(POD_WRITE_PATHS) | POD_CONNECT_PATHS, "a new Pod subresource"
    admin = bed.kube
    admin.create(_pod("target", namespace, NODE))
    wait_for(lambda: _phase(bed, "target", namespace) == "Running", 120, "target to run")
    base = f"/api/v1/namespaces/{namespace}/pods/target"
    patch = {"metadata": {"annotations": {ALLOCATED_ANNOTATION: RECORD}}}
    merge = "application/merge-patch+json"
    _denied(
        lambda: admin.request("PATCH", f"{base}/status", body=patch, content_type=merge),
        "gpustack-allocation-record",
        "cannot be added",
        "pods/status",
    )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "target"}}
    _denied(
        lambda: admin.request("POST", f"{base}/eviction", body=_with_record(eviction)),
        "no Eviction may carry it",
    )
    # The API server keeps a Pod's metadata on these two paths: the patch changes nothing.
    for sub in ("ephemeralcontainers", "resize"):
        try:
            admin.request("PATCH", f"{base}/{sub}", body=patch, content_type=merge)
        except KubeError as refused:
            assert refused.status in (403, 422), refused.message
        assert _record_of(bed, "target", namespace) is None, sub
    admin.delete("v1", "Pod", "target", namespace)


def test_a_binding_cannot_carry_the_record(bed: Testbed, namespace: str) -> None:
    """pods/binding and the older top-level bindings: the API server copies a Binding's
    annotations onto the Pod, so a scheduler-like identity could forge the record."""
    binder = _binder(bed, namespace)
    bed.kube.create(_pod("unbound", namespace, None))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "unbound", "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": OTHER},
    }
    paths = (
        f"/api/v1/namespaces/{namespace}/pods/unbound/binding",
        f"/api/v1/namespaces/{namespace}/bindings",
    )
    for path in paths:
        _denied(
            partial(binder.request, "POST", path, body=_with_record(binding)),
            "gpustack-allocation-record",
            "no Binding may carry it",
        )
    assert _record_of(bed, "unbound", namespace) is None
    # A Binding without the record binds as it always did.
    binder.request("POST", paths[0], body=binding)
    bound = bed.kube.get("v1", "Pod", "unbound", namespace) or {}
    assert bound["spec"]["nodeName"] == OTHER
    assert _record_of(bed, "unbound", namespace) is None
    bed.kube.delete("v1", "Pod", "unbound", namespace)
    bed.kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", f"binder-{namespace}")


def test_the_agent_changes_no_other_label_of_its_node_through_status(bed: Testbed) -> None:
    agent = _agent_of(bed, NODE)

    def status(body: Obj) -> Obj:
        return agent.merge_patch("v1", "Node", NODE, body, subresource="status")

    for labels in (
        {"kubernetes.io/hostname": OTHER},
        {"node-role.kubernetes.io/control-plane": ""},
    ):
        _denied(
            partial(status, {"metadata": {"labels": labels}}),
            "only the chain's fit labels",
        )
    _denied(lambda: status({"metadata": {"annotations": {"probe": "x"}}}), "no annotation")
    _denied(
        lambda: status({"status": {"capacity": {"cpu": "512"}}}),
        "only the chain's counting keys",
    )
    _denied(
        lambda: status({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        "only the chain's counting keys",
    )
    # What it owns there still goes: a counting key, added and removed.
    key = f"example.com/probe-{uuid.uuid4().hex[:4]}.sliced.units"
    status({"status": {"capacity": {key: "3"}}})
    status({"status": {"capacity": {key: None}}})
    node = bed.kube.get("v1", "Node", NODE) or {}
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE


def test_the_agent_cannot_steer_nfd_onto_another_node(bed: Testbed) -> None:
    agent = _agent_of(bed, NODE)
    name = f"{NODE}-gpustack-device-manager"
    steer = {"metadata": {"labels": {"nfd.node.kubernetes.io/node-name": OTHER}}}
    _denied(
        lambda: agent.merge_patch(NFD, "NodeFeature", name, steer, namespace=AGENT_NAMESPACE),
        f"labelled nfd.node.kubernetes.io/node-name: {NODE}",
    )
    found = bed.kube.get(NFD, "NodeFeature", name, AGENT_NAMESPACE) or {}
    assert found["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == NODE


def test_the_agent_deletes_nothing_by_proxy(bed: Testbed, namespace: str) -> None:
    """An owner that does not exist, or a finalizer, would let the garbage collector delete (or
    keep forever) what the agent itself may not delete."""
    agent = _agent_of(bed, NODE)
    bed.kube.create(_pod("bystander", namespace, NODE))
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": str(uuid.uuid4()),
    }
    owners = {"metadata": {"ownerReferences": [ghost]}}
    finalizers = {"metadata": {"finalizers": ["example.com/forever"]}}
    for body in (owners, finalizers):
        _denied(
            partial(agent.merge_patch, "v1", "Pod", "bystander", body, namespace=namespace),
            "ownerReferences or finalizers",
        )
        _denied(
            partial(agent.merge_patch, "v1", "Node", NODE, body),
            "ownerReferences or finalizers",
        )
    for kind, api, name, ns in (
        ("Devices", DEVICES_API, NODE, None),
        ("NodeFeature", NFD, f"{NODE}-gpustack-device-manager", AGENT_NAMESPACE),
    ):
        _denied(
            partial(agent.merge_patch, api, kind, name, owners, namespace=ns),
            f"may name only its Node (v1 Node {NODE})",
        )
        _denied(
            partial(agent.merge_patch, api, kind, name, finalizers, namespace=ns),
            "add no finalizer",
        )
    # The Pod's other annotations are not the agent's either.
    _denied(
        lambda: agent.merge_patch(
            "v1", "Pod", "bystander", {"metadata": {"annotations": {"x": "1"}}}, namespace=namespace
        ),
        "no other annotation",
    )
    assert bed.kube.get("v1", "Pod", "bystander", namespace) is not None
    bed.kube.delete("v1", "Pod", "bystander", namespace)


def _phase(bed: Testbed, name: str, namespace: str) -> str:
    found = bed.kube.get("v1", "Pod", name, namespace) or {}
    return str(found.get("status", {}).get("phase", ""))


CROWD = 60_000


def _crowd(total: int = 0) -> dict[str, str]:
    """60,000 annotations of four-character keys and empty values (240 KB), and with `total`
    one more whose value brings all of them to `total` bytes."""
    crowd = {format(i, "x").rjust(4, "k"): "" for i in range(CROWD)}
    if total:
        used = 4 * CROWD + len("fill")
        crowd["fill"] = "f" * (total - used)
    return crowd


def test_a_pod_at_the_size_limit_still_gets_its_record(bed: Testbed, namespace: str) -> None:
    """60,000 annotations (240 KB): before, the agent's policy walked them and its CEL cost
    ran out, so the record never landed. Now the policy reads only the record."""
    crowded = _crowd()
    bed.kube.create(_pod("crowded", namespace, NODE, cards=1, annotations=crowded))
    started = time.monotonic()
    wait_for(lambda: _record_of(bed, "crowded", namespace) is not None, 180, "the record")
    print(f"record of a Pod with {len(crowded)} annotations: {time.monotonic() - started:.1f} s")
    bed.kube.delete("v1", "Pod", "crowded", namespace)


def test_a_record_that_cannot_land_stalls_no_other(bed: Testbed, namespace: str) -> None:
    """A Pod whose annotations leave no room for the record: the API server refuses the record
    for that Pod alone. It is reported on the Pod and retried on its own; the next Pod's record
    on the same node lands meanwhile."""
    full = _crowd(ANNOTATIONS_LIMIT - 8)
    bed.kube.create(_pod("full", namespace, NODE, cards=1, annotations=full))
    wait_for(lambda: _phase(bed, "full", namespace) == "Running", 120, "full to run")
    bed.kube.create(_pod("next", namespace, NODE, cards=1))
    started = time.monotonic()
    wait_for(lambda: _record_of(bed, "next", namespace) is not None, 30, "next's record")
    print(f"next's record landed {time.monotonic() - started:.1f} s after it was created")

    def reported() -> bool:
        events = bed.kube.list("events.k8s.io/v1", "Event", namespace)
        return any(
            e.get("regarding", {}).get("name") == "full"
            and e.get("reason") == "AllocationRecordRefused"
            for e in events
        )

    wait_for(reported, 60, "the refusal reported on the Pod")
    assert _record_of(bed, "full", namespace) is None
    for name in ("full", "next"):
        bed.kube.delete("v1", "Pod", name, namespace)


def test_a_quantity_out_of_range_is_denied_by_name(bed: Testbed, namespace: str) -> None:
    """The webhook answers a value it cannot use with a denial naming it, not an HTTP error
    the API server would report as its own failure."""
    pod = _pod("huge", namespace, NODE, labels={"kueue.x-k8s.io/queue-name": "probe"})
    pod["spec"]["containers"][0]["resources"] = {"limits": {GPU: "10e9999999"}}
    message = _refused_any(lambda: bed.kube.create(pod))
    assert "unknown reason" not in message, message
    assert GPU in message, message


def _refused_any(call: Callable[[], object]) -> str:
    with pytest.raises(KubeError) as refused:
        call()
    assert 400 <= refused.value.status < 500, refused.value.message
    return refused.value.message
