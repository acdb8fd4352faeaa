"""Running-instance stop, made durable: the seed's `spec.stop=true` on an Instance whose pool can
never admit it again (its InstanceType gone or being deleted, its ClusterQueue `HoldAndDrain`).

The Instance hook already takes such an Instance's Pod away the moment it sees the cause
(`chain.instances.stop_reason`), but it holds no credentials and may write no spec, so on its
own the stop would last only as long as the cause: a drained pool opened again would start
every Instance it had stopped. This rule writes the stop into the Instance, as upstream's
worker does: it stays stopped until its user starts it again. A plain `Hold` (the InstanceType
set inactive) is not a stop. The lifecycle keeper (`verdictdriver.lifecycle`) makes the writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from chain.apis import WORKER_API
from chain.instances import INSTANCE, PoolType, stop_reason
from kubeapi import Obj
from verdictdriver.patch import Patch, version_of


def _pool(instance_type: Obj | None) -> PoolType | None:
    if instance_type is None:
        return None
    meta = instance_type.get("metadata") or {}
    return PoolType(
        name=str(meta.get("name", "")),
        queue_entrance="",
        deleting=bool(meta.get("deletionTimestamp")),
    )


def instance_stop_writes(
    instances: Iterable[Obj], instance_types: Mapping[str, Obj], queues: Mapping[str, Obj]
) -> list[Patch]:
    """`spec.stop: true` for every running Instance whose pool cannot take it (types and queues
    by name: a pool's ClusterQueue is named after its InstanceType)."""
    writes: list[Patch] = []
    for instance in instances:
        meta = instance.get("metadata") or {}
        spec = instance.get("spec") or {}
        type_name = spec.get("instanceType")
        if meta.get("deletionTimestamp") or spec.get("stop") is True:
            continue
        if not isinstance(type_name, str) or not type_name:
            continue  # the webhook refuses such an Instance; nothing to decide from
        reason = stop_reason(_pool(instance_types.get(type_name)), queues.get(type_name))
        if not reason:
            continue
        patch: Obj = {"metadata": {"resourceVersion": version_of(instance)}, "spec": {"stop": True}}
        why = f"stopped: {reason} (running-instance stop)"
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "")
        writes.append(Patch(WORKER_API, INSTANCE, name, patch, why, namespace))
    return writes
