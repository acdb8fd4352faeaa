"""Pools to queues on the real control plane: credits, admission, inactive, drain, teardown.

Workloads are created through the pool's LocalQueue the way a job integration would; as there is
no job controller for bare Workloads, the test plays the owner when Kueue evicts one (it releases
the quota, as Kueue's own performance runner does).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from chain.names import local_queue_name
from chain.quantity import parse_quantity
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kube import Kube, Obj, wait_for
from testbed.nodes import node_object, register_node
from testbed.workloads import condition, gpu_workload, release_quota
from tests.e2e.test_pools import T4_POOL, device_manager_feature, forget_pool, nfd_worker_feature

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
NFD = "nfd.k8s-sigs.io/v1alpha1"
CREDITS = "credits.gpustack.ai/nvidia"


def _workload(kube: Kube, namespace: str, name: str, gpus: int) -> None:
    kube.create(gpu_workload(name, namespace, local_queue_name(T4_POOL), gpus))


def _get_workload(kube: Kube, namespace: str, name: str) -> Obj | None:
    return kube.get(KUEUE, "Workload", name, namespace)


def _release_if_evicted(kube: Kube, namespace: str, name: str) -> bool:
    """Play the job owner: once Kueue evicted the Workload, release its quota."""
    wl = _get_workload(kube, namespace, name)
    if condition(wl, "Evicted") != "True":
        return False
    if condition(wl, "QuotaReserved") == "True":
        release_quota(kube, namespace, name)
    return True


@pytest.fixture
def t4_pool(testbed: Testbed, chain: Installed) -> Iterator[list[str]]:
    """5 T4 cards on two nodes (2 + 3): one pool, one queue."""
    kube = testbed.kube
    forget_pool(kube, T4_POOL)  # whatever an earlier test left of this pool
    nodes = []
    for i, cards in enumerate((2, 3)):
        name = f"t4q-{uuid.uuid4().hex[:5]}-{i}"
        register_node(kube, node_object(name, cpu="16", capacity={"nvidia.com/gpu": str(cards)}))
        kube.apply(nfd_worker_feature(name))
        kube.apply(device_manager_feature(name, cards))
        nodes.append(name)
    yield nodes
    for name in nodes:
        kube.delete(NFD, "NodeFeature", name, "node-feature-discovery")
        kube.delete(NFD, "NodeFeature", f"{name}-gpustack-device-manager", "node-feature-discovery")
        kube.delete("v1", "Node", name)


def _nominal(cq: Obj | None) -> int:
    total = 0
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for res in flavor["resources"]:
                if res["name"] == CREDITS:
                    total += int(parse_quantity(res["nominalQuota"]))
    return total


def test_pool_queue_admits_drains_and_tears_down(
    testbed: Testbed, chain: Installed, t4_pool: list[str]
) -> None:
    kube = testbed.kube
    cq = wait_for(
        lambda: (q := kube.get(KUEUE, "ClusterQueue", T4_POOL)) and _nominal(q) == 8_000_000 and q,
        120,
        "the T4 queue with 8,000,000 credits",
    )
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["namespaceSelector"] == {}
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == [CREDITS]
    wait_for(
        lambda: condition(kube.get(KUEUE, "ClusterQueue", T4_POOL), "Active") == "True",
        60,
        "the T4 queue to be Active",
    )

    ns = f"team-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        wait_for(
            lambda: kube.get(KUEUE, "LocalQueue", local_queue_name(T4_POOL), ns),
            60,
            "the pool's LocalQueue in the namespace",
        )

        # nvidia.com/gpu: 2 is charged 2 x 1,600,000 credits.
        _workload(kube, ns, "two-cards", 2)
        wl = wait_for(
            lambda: (
                (w := _get_workload(kube, ns, "two-cards"))
                and condition(w, "Admitted") == "True"
                and w
            ),
            90,
            "admission",
        )
        usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert parse_quantity(usage[CREDITS]) == 3_200_000, usage
        assert "nvidia.com/gpu" not in usage

        # Inactive: new Workloads wait, the admitted one keeps running.
        kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": True}})
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL)["spec"]["stopPolicy"] == "Hold",
            60,
            "the queue to Hold",
        )
        _workload(kube, ns, "while-held", 1)
        time.sleep(5)  # long enough for Kueue to admit it if the queue were not held
        assert condition(_get_workload(kube, ns, "while-held"), "Admitted") != "True"
        assert condition(_get_workload(kube, ns, "two-cards"), "Admitted") == "True"
        kube.delete(KUEUE, "Workload", "while-held", ns)
        kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": False}})
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL)["spec"]["stopPolicy"] == "None",
            60,
            "the queue to be released",
        )

        # Every node leaves: the queue drains (the admitted Workload is evicted), then its
        # groups are emptied and the type is marked drained.
        for name in t4_pool:
            kube.delete(
                NFD, "NodeFeature", f"{name}-gpustack-device-manager", "node-feature-discovery"
            )
            kube.delete("v1", "Node", name)
        wait_for(
            lambda: _release_if_evicted(kube, ns, "two-cards"),
            120,
            "the admitted Workload to be evicted by the drain",
        )
        drained = wait_for(
            lambda: (
                (q := kube.get(KUEUE, "ClusterQueue", T4_POOL))
                and not q["spec"].get("resourceGroups")
                and q
            ),
            120,
            "the queue's groups emptied",
        )
        assert drained["spec"]["stopPolicy"] in ("Hold", "HoldAndDrain")
        it = kube.get(WORKER, "InstanceType", T4_POOL)
        assert it is not None
        assert it["metadata"]["annotations"]["schedule.gpustack.ai/drained"] == "true"

        # Deleting the type drains and deletes its queue, then the type goes.
        kube.delete(KUEUE, "Workload", "two-cards", ns)
        kube.delete(WORKER, "InstanceType", T4_POOL)
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL) is None, 120, "the queue to be deleted"
        )
        wait_for(
            lambda: kube.get(WORKER, "InstanceType", T4_POOL) is None,
            120,
            "the InstanceType to go once its queue is gone",
        )
    finally:
        kube.delete("v1", "Namespace", ns)
