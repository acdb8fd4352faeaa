"""The queue hook's inputs, read out of a Metacontroller request into small typed views.

Every shape problem is a BadRequest naming the field, so Metacontroller gets a 400 that says
what to fix and changes nothing. Objects are found by kind and name, never by map key, so hook
versions v1 and v2 read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chain import queues
from chain.apis import ADMISSION_CHECK, CLUSTER_QUEUE, KUEUE_ACTIVE, KUEUE_API, RESOURCE_FLAVOR
from chain.labels import QUEUE_STOP_POLICY
from chain.pools import PoolIdentity, pool_flavor_selector
from chain.quantity import parse_quantity
from chain.queues import (
    NODE_DEVICES_CHECK,
    STOP_NONE,
    STOP_POLICIES,
    PoolFlavor,
)
from hooks.readers import pool_identity
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path


@dataclass(frozen=True)
class Pool:
    """The InstanceType as the queue hook sees it."""

    name: str
    identity: PoolIdentity
    inactive: bool
    """`spec.inactive`: the admin's switch, which the lifecycle keeper also sets once the queue is
    stopped by hand (`chain.queues.backfill_inactive`)."""


def read_pool(obj: Obj, where: str) -> Pool:
    """The pool an InstanceType (at JSON path `where`) stands for; a missing `generalGroup`
    is the `generic` group, as for every type derived with CPU awareness off."""
    identity = pool_identity(obj, where)
    inactive = (obj.get("spec") or {}).get("inactive")
    if inactive is not None and not isinstance(inactive, bool):
        raise BadRequest(f"{where}.spec.inactive", f"expected a bool, got {inactive!r}")
    return Pool(name=obj["metadata"]["name"], identity=identity, inactive=bool(inactive))


def pool_flavors(
    request: DecoratorRequest, selector: Mapping[str, str] | None, acceleratable: bool
) -> list[PoolFlavor]:
    """The pool's live flavors, smallest per-node count first, then by name
    (chain.queues.pool_flavors)."""
    try:
        return queues.pool_flavors(
            request.related.of(RESOURCE_FLAVOR, KUEUE_API), selector, acceleratable
        )
    except queues.FlavorError as err:
        raise BadRequest.at(object_path("related", err.flavor), err) from None


def selector_of(identity: PoolIdentity, aware: bool) -> dict[str, str] | None:
    return pool_flavor_selector(identity.schedule_labels(aware))


def _part(obj: Obj, key: str, path: str) -> Mapping[str, Any]:
    """`obj[key]` when it is an object, {} when absent; BadRequest naming it otherwise."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{path}.{key}", f"expected an object, got {type(value).__name__}")
    return value


def _conditions(obj: Obj, path: str) -> list[Obj]:
    conditions = _part(obj, "status", path).get("conditions") or []
    if not isinstance(conditions, list) or not all(isinstance(c, dict) for c in conditions):
        raise BadRequest(f"{path}.status.conditions", "expected a list of conditions")
    return conditions


def _condition(obj: Obj, path: str, kind: str) -> Obj | None:
    return next((c for c in _conditions(obj, path) if c.get("type") == kind), None)


def check_active(request: DecoratorRequest) -> bool:
    """True once the node-devices AdmissionCheck exists, is not being deleted, and is Active.

    Naming a check that is not Active would make Kueue stop the whole queue.
    """
    for obj in request.related.of(ADMISSION_CHECK, KUEUE_API):
        meta = obj["metadata"]
        if meta["name"] != NODE_DEVICES_CHECK or meta.get("deletionTimestamp"):
            continue
        active = _condition(obj, object_path("related", obj), KUEUE_ACTIVE)
        return active is not None and active.get("status") == "True"
    return False


@dataclass(frozen=True)
class ObservedQueue:
    """The pool's ClusterQueue as the API server has it."""

    obj: Obj
    stop_policy: str
    groups: list[Obj]
    deleting: bool
    idle: bool
    """Kueue has seen the current spec and no workload holds quota in the queue."""
    decided: str | None = None
    """The stop policy this hook decided last time (`QUEUE_STOP_POLICY`); None when the queue
    carries no readable record."""


def _count(status: Mapping[str, Any], key: str, path: str) -> int:
    value = status.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{path}.status.{key}", f"expected a whole number, got {value!r}")
    return value


def _holds_quota(status: Mapping[str, Any], path: str) -> bool:
    for field in ("flavorsReservation", "flavorsUsage"):
        flavors = status.get(field) or []
        if not isinstance(flavors, list) or not all(isinstance(f, dict) for f in flavors):
            raise BadRequest(f"{path}.status.{field}", "expected a list of objects")
        for i, flavor in enumerate(flavors):
            usages = flavor.get("resources") or []
            if not isinstance(usages, list) or not all(isinstance(u, dict) for u in usages):
                raise BadRequest(
                    f"{path}.status.{field}[{i}].resources", "expected a list of objects"
                )
            for j, usage in enumerate(usages):
                for amount in ("total", "borrowed"):
                    raw = usage.get(amount, "0")
                    try:
                        if parse_quantity(str(raw)) != 0:
                            return True
                    except ValueError as err:
                        where = f"{path}.status.{field}[{i}].resources[{j}].{amount}"
                        raise BadRequest(where, str(err)) from None
    return False


def _idle(obj: Obj, path: str) -> bool:
    """Kueue's status is current (its Active condition saw this generation) and shows no
    reserving or admitted workload and no quota in use."""
    active = _condition(obj, path, KUEUE_ACTIVE)
    generation = obj["metadata"].get("generation", 0)
    seen = active.get("observedGeneration") if active is not None else None
    if not isinstance(seen, int) or not isinstance(generation, int) or seen < generation:
        return False
    status = _part(obj, "status", path)
    busy = _count(status, "reservingWorkloads", path) or _count(status, "admittedWorkloads", path)
    return not busy and not _holds_quota(status, path)


def observed_queue(request: DecoratorRequest, name: str) -> ObservedQueue | None:
    """The attached ClusterQueue named after the InstanceType, if there is one."""
    return next((q for q in observed_queues(request) if q.obj["metadata"]["name"] == name), None)


def observed_queues(request: DecoratorRequest) -> list[ObservedQueue]:
    """Every attached ClusterQueue, whatever its name: Metacontroller attaches only objects the
    InstanceType owns, so each of them is this type's queue to drain before it goes."""
    return [_observed(obj) for obj in request.attachments.of(CLUSTER_QUEUE, KUEUE_API)]


def _observed(obj: Obj) -> ObservedQueue:
    path = object_path("attachments", obj)
    spec = _part(obj, "spec", path)
    stop = spec.get("stopPolicy") or STOP_NONE
    if stop not in STOP_POLICIES:
        raise BadRequest(f"{path}.spec.stopPolicy", f"expected one of {STOP_POLICIES}")
    groups = spec.get("resourceGroups") or []
    if not isinstance(groups, list):
        raise BadRequest(f"{path}.spec.resourceGroups", "expected a list")
    # An unreadable record (edited by hand) is no record: the stop is taken as the hook's.
    decided = (obj["metadata"].get("annotations") or {}).get(QUEUE_STOP_POLICY)
    return ObservedQueue(
        obj=obj,
        stop_policy=stop,
        groups=groups,
        deleting=bool(obj["metadata"].get("deletionTimestamp")),
        idle=_idle(obj, path),
        decided=decided if decided in STOP_POLICIES else None,
    )
