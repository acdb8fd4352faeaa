"""A MIG partition through every gate on the real Kueue: credits, the pool's flavor, the per-card
check and a verdict.

One simulated A100 40GB in MIG mode, served by a real node agent; the chain installed; two
verdict drivers. A tenant's `batch/v1` Job asks one `3g.20gb` instance: the Job webhook folds the
profile's memory into `nvidia.com/gpu.partitioned.units` (19,968 of 40,960 MiB: 780,000 units),
Kueue's transformation turns those into credits of the pool's queue, so Kueue assigns the pool's
flavor and keeps the node-devices check, and the driver judges the partition against the card's
free profiles. Before partitions cost credits, Kueue admitted such a Workload with no flavor and
dropped the check.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from chain.names import local_queue_name
from chain.queues import NODE_DEVICES_CHECK
from kubeapi import KubeError, Obj, wait_for
from testbed.drivers import running_drivers
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.workloads import queued_job
from tests.e2e.test_device_plugin import PluginNode, agent_node
from tests.e2e.test_pools import forget_pool

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
PARTITIONED = "nvidia.com/gpu.partitioned"
CREDITS = "credits.gpustack.ai/nvidia"
A100_POOL = "gpustack--nvidia-a100-sxm4-40gb-linux-amd64"


@pytest.fixture
def mig_pool(testbed: Testbed, chain: Installed) -> Iterator[tuple[PluginNode, str]]:
    """The MIG node, its pool's InstanceType (partition profiles known) and two drivers. An
    earlier test's A100 node may have left the pool drained: start afresh."""
    forget_pool(testbed.kube, A100_POOL)
    with agent_node(testbed, "a100-40gb-mig") as node, running_drivers(testbed):

        def pool() -> str | None:
            for found in testbed.kube.list(WORKER, "InstanceType"):
                detail = (found.get("status") or {}).get("detail") or {}
                physical = (detail.get("slicedDetail") or {}).get("physical") or {}
                if "a100" in found["spec"].get("acceleratorGroup", "") and physical.get("count"):
                    return str(found["metadata"]["name"])
            return None

        name = wait_for(pool, 120, "the A100 pool's InstanceType with its partition profiles")
        yield node, name


def test_a_partition_takes_credits_gets_the_pools_flavor_and_is_judged(
    testbed: Testbed, mig_pool: tuple[PluginNode, str]
) -> None:
    kube = testbed.kube
    node, pool = mig_pool
    # What a real kubelet reports once the partitioned plugin has listed its tokens (the
    # emulator does not write Node status): Kueue's topology placement checks it.
    tokens = node.kubelet.wait_devices(PARTITIONED, lambda d: len(d) > 0, timeout=90)
    offered = {PARTITIONED: str(len(tokens))}
    kube.merge_patch(
        "v1",
        "Node",
        node.name,
        {"status": {"capacity": offered, "allocatable": offered}},
        subresource="status",
    )
    # The agent then adds the partition counting keys (one per profile, and the units) to the
    # Node's capacity; a kubelet copies new extended resources into allocatable, which the
    # scheduler and Kueue's topology placement fit a profile request against.

    def counted() -> dict[str, str] | None:
        found = kube.get("v1", "Node", node.name) or {}
        capacity = found.get("status", {}).get("capacity", {})
        keys = {k: v for k, v in capacity.items() if k.startswith(PARTITIONED + ".")}
        return keys if f"{PARTITIONED}.mig-3g.20gb" in keys else None

    keys = wait_for(counted, 90, "the agent's partition counting keys on the node")
    kube.merge_patch(
        "v1", "Node", node.name, {"status": {"allocatable": keys}}, subresource="status"
    )
    queue = local_queue_name(pool)
    wait_for(lambda: kube.get(KUEUE, "LocalQueue", queue, node.namespace), 90, "the LocalQueue")
    limits = {PARTITIONED: "1", f"{PARTITIONED}.mig-3g.20gb": "1"}
    job = queued_job(
        f"mig-{uuid.uuid4().hex[:5]}", node.namespace, queue, limits, "busybox", "true"
    )

    def created() -> Obj | None:
        try:
            return kube.create(job)
        except KubeError as refused:  # the webhook's catalog may not know the pool yet (503)
            if "not known yet" in refused.message or "retry" in refused.message:
                return None
            raise

    made = wait_for(created, 90, "the Job webhook to fold the partition")
    [container] = made["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"][f"{PARTITIONED}.units"] == "780k"

    def workload() -> Obj | None:
        found = kube.list(KUEUE, "Workload", node.namespace)
        return found[0] if found else None

    def admitted() -> Obj | None:
        found = workload()
        conditions = {
            c["type"]: c["status"] for c in (found or {}).get("status", {}).get("conditions", [])
        }
        return found if conditions.get("Admitted") == "True" else None

    try:
        done = wait_for(admitted, 120, "Kueue to admit the partition Workload")
    except TimeoutError:
        raise AssertionError(
            f"not admitted: {json.dumps((workload() or {}).get('status'))}"
        ) from None
    [assignment] = done["status"]["admission"]["podSetAssignments"]
    # Credits, so the pool's flavor: the Pods are confined to the pool's nodes.
    assert assignment["resourceUsage"][CREDITS] == "780k"
    queue_obj = kube.get(KUEUE, "ClusterQueue", pool) or {}
    flavors = {f["name"] for g in queue_obj["spec"]["resourceGroups"] for f in g["flavors"]}
    assert assignment["flavors"][CREDITS] in flavors
    # And the check was kept and answered by the driver, card by card.
    checks = {c["name"]: c for c in done["status"].get("admissionChecks") or []}
    assert checks[NODE_DEVICES_CHECK]["state"] == "Ready", checks
