"""The shipped install as a user runs it: `kubectl apply -k` once, on a cluster with real nodes.

`real_chain` (testbed.pytest_plugin) installs NFD (its default overlay: master, worker, garbage
collector), Kueue (its release manifests, with the chain's configuration merged into its
ConfigMap the documented way) and Metacontroller (its own manifests) as Pods on the real nodes,
then applies `testbed/overlay` once: the shipped manifests with the local image and simulated
NVIDIA hardware. Every chain component runs as a Pod from the image: Metacontroller calls the
hooks by their Service names, and the API server calls the webhooks' Pods over TLS with the
certificate the verdict driver issued.
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from chain.apis import CHAIN_API, SETTINGS, SETTINGS_NAME
from chain.release import AGENT_NAMESPACE
from kubeapi import KubeError, Obj, wait_for
from testbed import images
from testbed.cluster import deployment_available, terminating_namespaces
from testbed.harness import Testbed
from testbed.install import MANIFESTS, kustomize
from testbed.kubectl import kubectl
from testbed.realnode import node_pids
from tests.e2e.test_instancetypes import instance_type

NAMESPACE = "gpustack-system"
WORKER = "worker.gpustack.ai/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _shipped(kind: str) -> list[Obj]:
    return [o for o in kustomize(MANIFESTS) if o["kind"] == kind]


def _node_labels(bed: Testbed, node: str) -> dict[str, str]:
    return dict(
        ((bed.kube.get("v1", "Node", node) or {}).get("metadata") or {}).get("labels") or {}
    )


def test_every_component_runs_as_a_pod_from_the_image(real_chain: Testbed) -> None:
    bed = real_chain
    # The verdict driver created the settings singleton on its first start.
    assert bed.kube.get(CHAIN_API, SETTINGS, SETTINGS_NAME) is not None
    # Every Deployment is up, the TLS webhooks too: they mount the Secret the driver issued.
    servers = {d["metadata"]["name"] for d in _shipped("Deployment")}
    assert servers >= {
        "gpustack-hook-flavor",
        "gpustack-admission-driver",
        "gpustack-webhook-admission",
        "gpustack-webhook-instancetype",
    }
    assert all(deployment_available(bed, name) for name in servers)
    for pod in bed.kube.list("v1", "Pod", NAMESPACE):
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        if name.startswith(("gpustack-hook-", "gpustack-webhook-")):
            # Hooks and webhooks hold no Kubernetes credentials: no token volume, no mount.
            volumes = {v["name"] for v in spec.get("volumes", [])}
            assert not [v for v in volumes if v.startswith("kube-api-access")], name
            assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"]
        assert spec["containers"][0]["image"] == images.PROJECT_IMAGE


CAP_SYS_ADMIN = 21  # linux/capability.h


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # gone since the listing


def _process_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_the_nvidia_agent_runs_with_one_capability_under_seccomp(real_chain: Testbed) -> None:
    """What the kernel says of the agent's process on each real node, not what the manifest
    asks: only CAP_SYS_ADMIN effective, bounded and permitted, under a seccomp filter; and it
    still serves (its Devices object is reported)."""
    bed = real_chain
    for node in ("node-a", "node-b"):
        agents = [pid for pid in node_pids(bed, node) if b"nodeagent\x00serve" in _cmdline(pid)]
        assert agents, f"no agent process on {node}"
        for pid in agents:
            status = _process_status(pid)
            for field in ("CapEff", "CapPrm", "CapBnd"):
                assert int(status[field], 16) == 1 << CAP_SYS_ADMIN, (node, field, status[field])
            assert status["Seccomp"].strip() == "2", "filter mode: the runtime's default profile"
        assert bed.kube.get(WORKER, "Devices", node) is not None


def test_upstream_parts_in_the_cluster_drive_the_hooks(real_chain: Testbed) -> None:
    bed = real_chain
    # Metacontroller, in the cluster, reaches the hooks' Pods by their Service names: the Node
    # decorator's hook labels the node and gives it its flavor summary.
    wait_for(
        lambda: _node_labels(bed, "node-a").get("gpustack.ai/managed") == "true",
        120,
        "the flavor hook's Pod to label the node, called by the in-cluster Metacontroller",
    )
    wait_for(lambda: bed.kube.get(CHAIN_API, "NodeFlavors", "node-a"), 60, "node-a's NodeFlavors")
    # Kueue, in the cluster, runs with the chain's configuration (merged into its ConfigMap the
    # documented way), and its own webhooks admit the pools' ResourceFlavors.
    config = bed.kube.get("v1", "ConfigMap", "kueue-manager-config", "kueue-system") or {}
    assert "credits.gpustack.ai/nvidia" in config["data"]["controller_manager_config.yaml"]
    wait_for(lambda: bed.kube.list(KUEUE, "ResourceFlavor"), 90, "the pools' ResourceFlavors")
    # NFD, in the cluster: its worker read the real node's CPU, its master labelled the Node.
    assert "feature.node.kubernetes.io/cpu-model.vendor_id" in _node_labels(bed, "node-a")
    # The verdict driver's Deployment tallies the node's cards into its pool's PoolCards (as
    # shipped: its RBAC, the CRD, the Lease), and the status hook shows them on the type.
    wait_for(partial(_tallied, bed), 120, "the driver's pool-cards keeper to tally node-a")
    name = _tallied(bed)[0]
    wait_for(
        lambda: _summary(bed, name) not in ("", "0/0 0/0 0/0 0/0"),
        90,
        f"InstanceType {name} to show node-a's free cards",
    )


def _tallied(bed: Testbed) -> list[str]:
    """The InstanceTypes whose PoolCards count at least one node."""
    cards = bed.kube.list(CHAIN_API, "PoolCards")
    return [c["metadata"]["name"] for c in cards if c["spec"]["nodes"] >= 1]


def _summary(bed: Testbed, name: str) -> str:
    found = bed.kube.get(WORKER, "InstanceType", name) or {}
    return str((found.get("status") or {}).get("acceleratorSummary", ""))


def test_webhooks_are_called_over_tls_with_the_drivers_certificate(real_chain: Testbed) -> None:
    """The API server calls the webhook Pods through their Services, trusting the CA the driver
    put in every configuration: the InstanceType webhooks default and refuse, the Pod webhook
    refuses a rule-breaking Pod with the rule."""
    bed = real_chain
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
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"limits": limits}}]},
    }
    try:
        kubectl(bed, "create", "-n", "default", "-f", "-", stdin=yaml.safe_dump(pod))
    except RuntimeError as denied:
        assert "a logical slice request is always a single card" in str(denied)
    else:
        raise AssertionError("a Pod asking two cards of slices was admitted")


def _attachments(bed: Testbed) -> dict[tuple[str, str, str], str]:
    """(kind, namespace, name) -> uid of everything the hooks own through Metacontroller."""
    kinds = [
        (KUEUE, "ResourceFlavor"),
        (KUEUE, "ClusterQueue"),
        (KUEUE, "LocalQueue"),
        (WORKER, "InstanceType"),
        (CHAIN_API, "NodeFlavors"),
        ("v1", "ConfigMap"),
    ]
    out = {}
    for api, kind in kinds:
        for obj in bed.kube.list(api, kind):
            meta = obj["metadata"]
            if kind == "ConfigMap" and meta["name"] != "gpustack-admission-catalog":
                continue
            out[(kind, meta.get("namespace", ""), meta["name"])] = meta["uid"]
    return out


def test_killing_every_hook_pod_deletes_no_attachment(real_chain: Testbed) -> None:
    """Every hook Pod killed at once, while Metacontroller is made to sync (a Node label, a
    Settings annotation, a new namespace): the hook calls fail, nothing is deleted, and the
    Deployments bring the hooks back, after which the chain serves the new namespace."""
    bed = real_chain
    # Earlier modules' scratch namespaces may still be terminating; their LocalQueues go with
    # them, which is not the hooks' doing. Start from a cluster where none is.
    wait_for(lambda: not terminating_namespaces(bed), 300, "earlier modules' namespaces to go")
    before = _attachments(bed)
    assert any(kind == "InstanceType" for kind, _, _ in before)
    assert any(kind == "ClusterQueue" for kind, _, _ in before)
    hooks = [
        d["metadata"]["name"] for d in _shipped("Deployment") if "-hook-" in d["metadata"]["name"]
    ]
    lost: list[Any] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            now = _attachments(bed)
            lost.extend(key for key, uid in before.items() if now.get(key) != uid)
            time.sleep(0.2)

    def pods_of(name: str) -> list[Obj]:
        return bed.kube.list(
            "v1", "Pod", NAMESPACE, label_selector=f"app.kubernetes.io/name={name}"
        )

    killed = {p["metadata"]["uid"] for name in hooks for p in pods_of(name)}

    def replaced(name: str) -> bool:
        pods = pods_of(name)
        return deployment_available(bed, name) and not killed & {p["metadata"]["uid"] for p in pods}

    poke = uuid.uuid4().hex[:6]
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        for name in hooks:
            kubectl(
                bed,
                "delete",
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                f"app.kubernetes.io/name={name}",
                "--wait=false",
            )
        bed.kube.merge_patch("v1", "Node", "node-a", {"metadata": {"labels": {"e2e-poke": poke}}})
        bed.kube.merge_patch(
            CHAIN_API, SETTINGS, SETTINGS_NAME, {"metadata": {"annotations": {"e2e-poke": poke}}}
        )
        tenant = f"tenant-{poke}"
        bed.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}})
        for name in hooks:
            wait_for(partial(replaced, name), 180, f"{name} replaced and available")
        # Served again: the entrance hook gives the new namespace its LocalQueues.
        wait_for(
            lambda: bed.kube.list(KUEUE, "LocalQueue", tenant), 120, "the tenant's LocalQueues"
        )
        time.sleep(3)  # a few more syncs with the hooks back
    finally:
        stop.set()
        watcher.join(5)
        bed.kube.merge_patch("v1", "Node", "node-a", {"metadata": {"labels": {"e2e-poke": None}}})
        # The new namespace goes too, so no later module meets it terminating.
        bed.kube.delete("v1", "Namespace", f"tenant-{poke}")
    assert not lost, f"deleted or replaced while the hooks were down: {sorted(set(lost))}"


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


def _dry_run_pod(bed: Testbed, namespace: str, **container: Any) -> str:
    """What the API server says to a Pod in `namespace` (server-side dry run): '' if admitted,
    else kubectl's error."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": images.PAUSE_IMAGE, **container}]},
    }
    try:
        kubectl(bed, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(pod))
    except RuntimeError as error:
        return str(error)
    return ""


def test_the_install_runs_under_a_baseline_pod_security_default(real_chain: Testbed) -> None:
    """The cluster enforces Pod Security `baseline` by default (testbed.components), as many do;
    the whole install is up under it (the fixture waited for every Deployment and agent), the
    agents in their own `privileged` namespace and everything else under `restricted`."""
    bed = real_chain
    privileged = {"securityContext": {"privileged": True}}
    assert 'violates PodSecurity "baseline:latest"' in _dry_run_pod(bed, "default", **privileged)
    # The chain's namespace holds every Pod to `restricted`: even a plain root one is refused.
    assert 'violates PodSecurity "restricted:latest"' in _dry_run_pod(bed, NAMESPACE)
    assert _dry_run_pod(bed, AGENT_NAMESPACE, **privileged) == ""
    # No tenant works beside the agents: their namespace gets no LocalQueue.
    wait_for(lambda: bed.kube.list(KUEUE, "LocalQueue", "default"), 120, "default's LocalQueues")
    assert bed.kube.list(KUEUE, "LocalQueue", AGENT_NAMESPACE) == []
    placed = {
        (pod["metadata"]["namespace"], pod["metadata"]["labels"].get("app.kubernetes.io/name"))
        for ns in (NAMESPACE, AGENT_NAMESPACE)
        for pod in bed.kube.list("v1", "Pod", ns)
    }
    assert {ns for ns, name in placed if name.startswith("gpustack-device-manager-")} == {
        AGENT_NAMESPACE
    }
    assert {
        ns for ns, name in placed if name.startswith(("gpustack-hook-", "gpustack-webhook-"))
    } == {NAMESPACE}
