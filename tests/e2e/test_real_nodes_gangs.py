"""Gangs on real kubelets: a Job of several Pods that Kueue's topology-aware scheduler places as
one, each Pod through the chain's webhooks, the per-card check, the kubelet and the agent.

The emulated testbed proves the placement rules over many nodes (`test_topology.py`); these cases
prove what only a real node can: every Pod of a gang is folded by the Pod webhook, the gang's
Workload carries the fit pin, and the Allocate response reaches each container, the RDMA devices
nearest its cards included (`NCCL_IB_HCA`, docs/topology.md, "Best-connected card sets").

Simulated, said plainly: the cards (node-a's 4 x T4, node-b's 2 x L4) and node-b's RoCE port
(`mlx5_0` beside its cards under one PCIe switch, the profile `l4x2-roce`), laid out as sysfs for
the agent. Real: Kueue, the webhooks, the verdict driver, the scheduler, the kubelets and runc.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from chain.labels import RDMA_CAPABLE, SLICED_FIT_PREFIX
from chain.names import local_queue_name
from kubeapi import Obj, wait_for
from testbed import images
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.nodes import T4_POOL
from testbed.workloads import queued_job

KUEUE = "kueue.x-k8s.io/v1beta2"
L4_POOL = "gpustack--nvidia-l4-linux-amd64"
HOSTNAME = "kubernetes.io/hostname"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
SLICED = "nvidia.com/gpu.sliced"
# Each Pod prints its environment and stays a while, so that both run at once on their cards.
COMMAND = "env; exec sleep 120"


@pytest.fixture(scope="module")
def tenant(real_chain: Testbed) -> Iterator[tuple[Testbed, str]]:
    """A tenant Namespace holding both pools' LocalQueues, deleted after the module."""
    bed = real_chain
    namespace = f"gang-{uuid.uuid4().hex[:5]}"
    bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        for pool in (T4_POOL, L4_POOL):
            wait_for(
                lambda pool=pool: bed.kube.get(
                    KUEUE, "LocalQueue", local_queue_name(pool), namespace
                ),
                90,
                f"the LocalQueue of {pool} in the tenant namespace",
            )
        yield bed, namespace
    finally:
        bed.kube.delete("v1", "Namespace", namespace)


def _gang(name: str, namespace: str, pool: str, pods: int, limits: dict[str, str]) -> Obj:
    """A Job of `pods` Pods that must all run at once on one node (the hostname level every
    chain flavor's Topology has), each asking `limits`."""
    job = queued_job(name, namespace, local_queue_name(pool), limits, images.PROJECT_IMAGE, COMMAND)
    job["spec"].update({"parallelism": pods, "completions": pods})
    template = job["spec"]["template"]
    template["metadata"]["annotations"] = {REQUIRED_TOPOLOGY: HOSTNAME}
    template["spec"]["terminationGracePeriodSeconds"] = 1
    return job


def _running(bed: Testbed, namespace: str, job: str, pods: int) -> list[Obj] | None:
    found = bed.kube.list("v1", "Pod", namespace, label_selector=f"job-name={job}")
    running = [p for p in found if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) == pods else None


def _environment(bed: Testbed, namespace: str, pod: Obj) -> dict[str, str] | None:
    log = kubectl(bed, "logs", "-n", namespace, pod["metadata"]["name"])
    env = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    return env if "NVIDIA_VISIBLE_DEVICES" in env else None


def _workload(bed: Testbed, namespace: str, job: str) -> Obj | None:
    for found in bed.kube.list(KUEUE, "Workload", namespace):
        owners = found["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return found
    return None


def _node_terms(spec: Any) -> list[Obj]:
    required = (
        ((spec or {}).get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    return list(required.get("nodeSelectorTerms") or [])


def _fit_pins(spec: Any) -> list[Obj]:
    return [
        expression
        for term in _node_terms(spec)
        for expression in term.get("matchExpressions") or []
        if str(expression.get("key", "")).startswith(SLICED_FIT_PREFIX)
    ]


def _pinned_when_created(bed: Testbed, namespace: str) -> bool:
    """Whether a sliced Workload entering the T4 queue now would be pinned: the Workload webhook
    reads the pool from its catalog file, which the kubelet refreshes in the webhook's Pod a
    while after the InstanceType hook wrote it; until then the webhook lets a Workload through
    unpinned (docs/topology.md, "The webhooks"). A dry-run create asks without storing; its
    PodSet is already folded (the Job webhook folds a Job's template before Kueue copies it)."""
    limits = {SLICED: "1", f"{SLICED}.units": "400k"}
    probe = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": "pin-probe", "namespace": namespace},
        "spec": {
            "queueName": local_queue_name(T4_POOL),
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "c",
                                    "image": images.PROJECT_IMAGE,
                                    "resources": {"limits": limits, "requests": limits},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }
    path = bed.kube.resource(KUEUE, "Workload").path(namespace)
    answer = bed.kube.request("POST", path, body=probe, params={"dryRun": "All"})
    return bool(_fit_pins(answer["spec"]["podSets"][0]["template"]["spec"]))


def test_a_sliced_gang_runs_every_pod_through_the_webhooks(tenant: tuple[Testbed, str]) -> None:
    """Two Pods of a quarter T4 each, required on one node: the gang's Workload carries the fit
    pin (a card with at least a quarter free), Kueue admits both Pods together on node-a, each
    Pod is folded into units and runs with its own slice's memory limit."""
    bed, namespace = tenant
    wait_for(
        lambda: _pinned_when_created(bed, namespace),
        180,
        "the webhook's catalog to know the T4 queue",
    )
    limits = {SLICED: "1", f"{SLICED}.memory-percentage": "25"}
    bed.kube.create(_gang("sliced-gang", namespace, T4_POOL, 2, limits))
    workload = wait_for(lambda: _workload(bed, namespace, "sliced-gang"), 60, "the gang's Workload")
    (podset,) = workload["spec"]["podSets"]
    assert podset["count"] == 2
    pins = _fit_pins(podset["template"]["spec"])
    # A quarter of a card is 400,000 of its 1,600,000 units: room means more than 399,999 free.
    assert [p["values"] for p in pins] == [["399999"]], pins

    pods = wait_for(lambda: _running(bed, namespace, "sliced-gang", 2), 240, "both Pods to run")
    assert {p["spec"]["nodeName"] for p in pods} == {"node-a"}
    for pod in pods:
        limits_seen = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits_seen[f"{SLICED}.units"] == "400k", limits_seen
        env = wait_for(lambda pod=pod: _environment(bed, namespace, pod), 60, "a Pod's environment")
        assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{16384 // 4}m"  # a quarter of a T4
    bed.kube.delete("batch/v1", "Job", "sliced-gang", namespace)


def test_a_gang_of_whole_cards_is_told_its_nearest_rdma_device(tenant: tuple[Testbed, str]) -> None:
    """Two Pods of one L4 each, required on one node: only node-b has L4s; each container is
    told the RoCE device under its card's PCIe switch, and the node says it is RDMA-capable."""
    bed, namespace = tenant
    labels = wait_for(
        lambda: (bed.kube.get("v1", "Node", "node-b") or {}).get("metadata", {}).get("labels"),
        30,
        "node-b",
    )
    assert labels.get(RDMA_CAPABLE) == "true", labels
    bed.kube.create(_gang("l4-gang", namespace, L4_POOL, 2, {"nvidia.com/gpu": "1"}))
    pods = wait_for(lambda: _running(bed, namespace, "l4-gang", 2), 240, "both Pods to run")
    cards = set()
    for pod in pods:
        assert pod["spec"]["nodeName"] == "node-b"
        env = wait_for(lambda pod=pod: _environment(bed, namespace, pod), 60, "a Pod's environment")
        cards.add(env["NVIDIA_VISIBLE_DEVICES"])
        assert env["NCCL_IB_HCA"] == "=mlx5_0", env
    assert len(cards) == 2  # one card each, never the same
    bed.kube.delete("batch/v1", "Job", "l4-gang", namespace)
