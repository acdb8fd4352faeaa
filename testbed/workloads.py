"""Kueue helpers the e2e tests, the demo and the benchmarks share: a bare Workload asking for
whole cards, its conditions, and playing its owner; a bare Pod asking for cards."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from chain.apis import KUEUE_API as KUEUE
from chain.names import local_queue_name
from chain.times import timestamp
from kubeapi import Kube, Obj, wait_for


def now() -> str:
    return timestamp(time.time())


@contextmanager
def tenant_namespace(kube: Kube, pool: str) -> Iterator[str]:
    """A fresh tenant Namespace, yielded once the pool's LocalQueue is in it; deleted after."""
    ns = f"team-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        wait_for(
            lambda: kube.get(KUEUE, "LocalQueue", local_queue_name(pool), ns),
            60,
            "the pool's LocalQueue in the namespace",
        )
        yield ns
    finally:
        kube.delete("v1", "Namespace", ns)


def condition(obj: Obj | None, kind: str) -> str | None:
    """The status of condition `kind` of an object, or None when it has none."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def complete_job(kube: Kube, name: str, namespace: str) -> Obj | None:
    """The batch/v1 Job `name` once its `Complete` condition is True, else None (to wait on)."""
    found = kube.get("batch/v1", "Job", name, namespace)
    return found if condition(found, "Complete") == "True" else None


def release_quota(kube: Kube, namespace: str, name: str, manager: str = "e2e-job-owner") -> None:
    """What a job integration does once Kueue evicted its Workload: give the quota back.

    Bare Workloads have no job controller; Kueue's own performance runner does the same.
    """
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "quota released by the owner after eviction",
                        "lastTransitionTime": now(),
                    }
                ]
            },
        },
        manager=manager,
        subresource="status",
    )


def gpu_workload(
    name: str, namespace: str, queue: str, cards: int, hostname: str | None = None
) -> Obj:
    """A bare Workload of one Pod asking `cards` whole `nvidia.com/gpu` on LocalQueue `queue`,
    optionally pinned to one node by its hostname label."""
    gpus = {"nvidia.com/gpu": str(cards)}
    container = {"name": "c", "image": "busybox", "resources": {"requests": gpus, "limits": gpus}}
    pod: Obj = {"restartPolicy": "Never", "containers": [container]}
    if hostname is not None:
        pod["nodeSelector"] = {"kubernetes.io/hostname": hostname}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}],
        },
    }


def card_pod(
    name: str,
    namespace: str,
    limits: dict[str, str],
    image: str,
    command: str,
    node: str | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A bare Pod of one container asking `limits` (its requests the same), run once and gone
    at once when deleted (no grace period: a test deletes many), optionally pinned to one node
    by its hostname label."""
    spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": image,
                "command": ["sh", "-c", command],
                "resources": {"limits": dict(limits), "requests": dict(limits)},
            }
        ],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


def queued_job(
    name: str, namespace: str, queue: str, limits: dict[str, str], image: str, command: str
) -> Obj:
    """A tenant's batch/v1 Job on LocalQueue `queue` whose one Pod asks `limits` (requests the
    same) and runs `command` in `sh`."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": image,
                            "command": ["sh", "-c", command],
                            "resources": {"limits": dict(limits), "requests": dict(limits)},
                        }
                    ],
                },
            },
        },
    }


def sliced_job(
    name: str, namespace: str, queue: str, image: str, percentage: int, command: str
) -> Obj:
    """One NVIDIA slice by memory percentage (the chain's webhooks fold it into units)."""
    limits = {
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": str(percentage),
    }
    return queued_job(name, namespace, queue, limits, image, command)
