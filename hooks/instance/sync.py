"""The Instance hook (a CompositeController): an Instance runs as one Pod.

Parent: an Instance. Children: its Pod. Related (customize): the InstanceType it names and the
ClusterQueue of the same name (the pool's queue).

- stopped (`spec.stop`), or the pool may not take it (running-instance stop: its InstanceType
  gone or being deleted, its ClusterQueue `HoldAndDrain`): no Pod, status `Stopped` with the
  reason. The Pod is deleted (Metacontroller deletes a child the answer leaves out); a plain
  `Hold` is not a stop: the Pod stays, and a new Instance's Pod waits in its queue.
- otherwise the Pod `chain.instances.desired_pod` makes; a Pod already there is kept as it is
  (a Pod's spec cannot change: the controller's child update strategy is `OnDelete`, so an edited
  Instance takes effect at its next start).
- a request the pool cannot serve (cards of a CPU-only pool): no Pod, status `Failed` naming it.

Status: the phase, node and granted cards of the observed Pod (`observed_status`), and the
conditions Admitted, Scheduled and Ready (`hooks.instance.conditions`). The hook
never writes the parent's spec: it takes the Pod away the moment it sees a running-instance
stop's cause (the queue's and the type's changes reach it through the related objects and the
resync), and the lifecycle keeper, which has credentials, writes the seed's `spec.stop=true`
(`verdictdriver.instance_stops`), so the Instance stays stopped once the cause is gone.
"""

from __future__ import annotations

from typing import Any

from chain.apis import (
    CLUSTER_QUEUE,
    CLUSTER_QUEUES_RESOURCE,
    INSTANCE_TYPE,
    INSTANCE_TYPE_RESOURCE,
    KUEUE_API,
    WORKER_API,
)
from chain.conditions import generation_of, merge
from chain.instances import InstanceSpec, PoolType, desired_pod, observed_status, stop_reason
from chain.manufacturers import ManufacturerTable
from hooks.instance.conditions import instance_conditions
from hooks.request import BadRequest, CompositeRequest, Obj


def _spec(parent: Obj) -> InstanceSpec:
    try:
        return InstanceSpec.parse(parent.get("spec"), "spec")
    except ValueError as err:
        raise BadRequest.at("$.parent", err) from None


def customize(parent: Obj) -> Obj:
    """The InstanceType the Instance names, and its pool's ClusterQueue (the same name)."""
    name = _spec(parent).instance_type
    return {
        "relatedResources": [
            {"apiVersion": WORKER_API, "resource": INSTANCE_TYPE_RESOURCE, "names": [name]},
            {"apiVersion": KUEUE_API, "resource": CLUSTER_QUEUES_RESOURCE, "names": [name]},
        ]
    }


def sync(request: CompositeRequest, table: ManufacturerTable, sidecar_image: str, now: str) -> Obj:
    """The Pod and the status; `now` (the shell's clock) is the transition time of a condition
    that changes in this answer."""
    parent = request.parent
    if parent["kind"] != "Instance" or parent["apiVersion"] != WORKER_API:
        raise BadRequest("$.parent.kind", f"expected a {WORKER_API} Instance, got {parent['kind']}")
    meta = parent["metadata"]
    name, namespace = meta["name"], str(meta.get("namespace") or "")
    spec = _spec(parent)
    pods = [pod for pod in request.children.of("Pod", "v1") if pod["metadata"]["name"] == name]
    pod = pods[0] if pods else None
    types = [
        obj
        for obj in request.related.of(INSTANCE_TYPE, WORKER_API)
        if obj["metadata"]["name"] == spec.instance_type
    ]
    pool = PoolType.of(types[0]) if types else None
    queues = [
        obj
        for obj in request.related.of(CLUSTER_QUEUE, KUEUE_API)
        if obj["metadata"]["name"] == spec.instance_type
    ]
    cause = stop_reason(pool, queues[0] if queues else None)
    # The lifecycle keeper writes spec.stop for such a cause; say which while it lasts.
    stopped = f"stopped (spec.stop){': ' + cause if cause else ''}" if spec.stop else cause
    instance_type = types[0] if types else None

    def answer(status: Obj, children: list[Obj], **why: Any) -> Obj:
        conditions = instance_conditions(pod, instance_type, **why)
        held = (parent.get("status") or {}).get("conditions")
        status["conditions"] = merge(held, conditions, generation_of(parent), now)
        return {"status": status, "children": children}

    if stopped or request.finalizing:
        status = observed_status(spec, None, stopped or "deleting")
        return answer(status, [], stopped=stopped, deleting=request.finalizing)
    assert pool is not None  # stop_reason answers for a missing type
    try:
        wanted = desired_pod(name, namespace, spec, pool, table, sidecar_image)
    except ValueError as err:
        return answer(observed_status(spec, None, "", str(err)), [], problem=str(err))
    return answer(observed_status(spec, pod, ""), [wanted])
