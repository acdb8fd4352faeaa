"""The shipped install as a user runs it: `kubectl apply -k` once, on a cluster with real nodes.

A testbed of its own (its own network slot, beside `real_cluster`): the control plane; NFD (its
default overlay: master, worker, garbage collector), Kueue (its release manifests, with the
chain's configuration merged into its ConfigMap the documented way) and Metacontroller (its own
manifests) installed in the cluster as Pods on the real node, Metacontroller calling the hooks by
their Service names, and the API server calling the webhooks' Pods over TLS with the certificate
the verdict driver issued. The overlay (`testbed/overlay`) is the shipped manifests with the
local image.
"""

from __future__ import annotations

import base64
import tempfile
import uuid
from functools import partial
from pathlib import Path

import yaml

from chain.apis import CHAIN_API, SETTINGS, SETTINGS_NAME
from testbed.cluster import OVERLAY, REAL_NODES, start_nodes
from testbed.harness import COMPONENT_ORDER, Testbed
from testbed.install import MANIFESTS, kustomize
from testbed.kube import KubeError, Obj, wait_for
from testbed.kubectl import kubectl
from testbed.upstream import install_kueue, install_metacontroller, install_nfd
from tests.e2e.test_instancetypes import instance_type

NAMESPACE = "gpustack-system"
WORKER = "worker.gpustack.ai/v1alpha1"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _shipped(kind: str) -> list[Obj]:
    return [o for o in kustomize(MANIFESTS) if o["kind"] == kind]


def _available(bed: Testbed, name: str) -> bool:
    found = bed.kube.get("apps/v1", "Deployment", name, NAMESPACE) or {}
    status = found.get("status", {})
    wanted = found.get("spec", {}).get("replicas", 1)
    return bool(status.get("availableReplicas") == wanted and status.get("updatedReplicas"))


def test_the_shipped_install_applies_in_one_pass_and_its_pods_run() -> None:
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-install-")), real_nodes=True)
    try:
        bed.up(components=COMPONENT_ORDER[:3])  # Kueue, Metacontroller, NFD: Pods, below
        # Two nodes: the install's Pods request more CPU than one 2-core node can offer.
        start_nodes(bed, list(REAL_NODES))
        install_nfd(bed)
        install_kueue(bed)
        install_metacontroller(bed)

        kubectl(bed, "apply", "-k", str(OVERLAY))  # once: any refusal fails the test

        # The verdict driver creates the settings singleton on its first start.
        wait_for(
            lambda: bed.kube.get(CHAIN_API, SETTINGS, SETTINGS_NAME), 180, "the settings singleton"
        )
        # Every Deployment comes up, the TLS webhooks too: they mount the Secret the driver
        # issues on its first start.
        servers = _shipped("Deployment")
        assert {d["metadata"]["name"] for d in servers} >= {
            "gpustack-hook-flavor",
            "gpustack-admission-driver",
            "gpustack-webhook-admission",
            "gpustack-webhook-instancetype",
        }
        for deployment in servers:
            server: str = deployment["metadata"]["name"]
            wait_for(partial(_available, bed, server), 180, f"{server} to be available")
        pods = bed.kube.list("v1", "Pod", NAMESPACE)
        for pod in pods:
            name = pod["metadata"]["name"]
            spec = pod["spec"]
            if name.startswith("gpustack-hook-"):
                # Hooks hold no Kubernetes credentials: no token volume, no token mount.
                volumes = {v["name"] for v in spec.get("volumes", [])}
                assert not [v for v in volumes if v.startswith("kube-api-access")], name
                assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
            assert spec["containers"][0]["image"] == "localhost/gpustack-chain:testbed"
        # Metacontroller, in the cluster, reaches the hooks' Pods by their Service names: the
        # Node decorator's hook labels the node and gives it its flavor summary.
        wait_for(
            lambda: (
                (bed.kube.get("v1", "Node", "node-a") or {})
                .get("metadata", {})
                .get("labels", {})
                .get("gpustack.ai/managed")
                == "true"
            ),
            120,
            "the flavor hook's Pod to label the node, called by the in-cluster Metacontroller",
        )
        wait_for(
            lambda: bed.kube.get(CHAIN_API, "NodeFlavors", "node-a"), 60, "node-a's NodeFlavors"
        )
        # Kueue, in the cluster, runs with the chain's configuration (merged into its ConfigMap
        # the documented way), and its own webhooks admit the pool's ResourceFlavor that the
        # pools hook authors through Metacontroller.
        config = bed.kube.get("v1", "ConfigMap", "kueue-manager-config", "kueue-system") or {}
        assert "credits.gpustack.ai/nvidia" in config["data"]["controller_manager_config.yaml"]
        wait_for(
            lambda: bed.kube.list("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
            90,
            "the pools hook's ResourceFlavor, admitted by the in-cluster Kueue",
        )
        # NFD, in the cluster: its worker read the real node's CPU, its master labelled the Node,
        # and the Node decorator turned that into the node's CPU key.
        wait_for(
            lambda: (
                "feature.node.kubernetes.io/cpu-model.vendor_id"
                in (bed.kube.get("v1", "Node", "node-a") or {})
                .get("metadata", {})
                .get("labels", {})
            ),
            120,
            "nfd-worker's CPU labels on the node",
        )
        _webhooks_serve_over_tls(bed)
    finally:
        bed.down()


def _trusted(bed: Testbed) -> bool:
    secret = bed.kube.get("v1", "Secret", "gpustack-webhook-tls", NAMESPACE) or {}
    ca = (secret.get("data") or {}).get("ca.crt")
    for kind in WEBHOOK_KINDS:
        for config in _shipped(kind):
            found = bed.kube.get(
                "admissionregistration.k8s.io/v1", kind, config["metadata"]["name"]
            )
            hooks = (found or {}).get("webhooks") or []
            if not ca or any(h["clientConfig"].get("caBundle") != ca for h in hooks):
                return False
    return True


def _webhooks_serve_over_tls(bed: Testbed) -> None:
    """The API server calls the webhook Pods through their Services, trusting the CA the driver
    put in every configuration: the InstanceType webhooks default and refuse, the Pod webhook
    refuses a rule-breaking Pod with the rule."""
    wait_for(lambda: _trusted(bed), 60, "every webhook configuration to trust the driver's CA")
    secret = bed.kube.get("v1", "Secret", "gpustack-webhook-tls", NAMESPACE)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    assert b"PRIVATE KEY" not in base64.b64decode(secret["data"]["ca.crt"])

    name = f"gpustack--install-{uuid.uuid4().hex[:6]}"
    created = bed.kube.create(instance_type(name))
    try:
        assert created["spec"]["generalGroup"] == "generic"
        labels = created["metadata"]["labels"]
        assert labels["schedule.gpustack.ai/queue-entrance"].startswith("gpustack-fnv64-")
    finally:
        bed.kube.delete(WORKER, "InstanceType", name)
    try:
        bed.kube.create(instance_type(f"{name}-bad", unitResources={"cpu": "8", "ram": "32GB"}))
    except KubeError as denied:
        assert "spec.unitResources.ram" in denied.message
    else:
        raise AssertionError("an InstanceType with a malformed quantity was admitted")

    sliced = "nvidia.com/gpu.sliced"
    limits = {sliced: "2", f"{sliced}.memory-percentage": "20"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "two-slices", "labels": {"kueue.x-k8s.io/queue-name": "any"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "pause", "resources": {"limits": limits}},
            ]
        },
    }
    try:
        kubectl(bed, "create", "-n", "default", "-f", "-", stdin=yaml.safe_dump(pod))
    except RuntimeError as denied:
        assert "a logical slice request is always a single card" in str(denied)
    else:
        raise AssertionError("a Pod asking two cards of slices was admitted")
