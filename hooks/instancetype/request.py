"""The status hook's inputs, read out of a Metacontroller request into small typed views.

Every shape problem is a BadRequest naming the field, so Metacontroller gets a 400 that says
what to fix and leaves the status as it is. Objects are found by kind, labels and name, never by
map key, so hook versions v1 and v2 read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from chain import fields, queues
from chain.apis import (
    CLUSTER_QUEUE,
    INSTANCE_TYPE,
    KUEUE_ACTIVE,
    KUEUE_API,
    RESOURCE_FLAVOR,
    WORKER_API,
)
from chain.names import flavor_count
from chain.pool_cards import POOL_CARDS, POOL_CARDS_API, PoolCards
from chain.pools import PoolIdentity
from chain.quantity import parse_quantity
from chain.queues import CPU_RESOURCE, STOP_NONE, STOP_POLICIES
from hooks.readers import pool_identity
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path


@dataclass(frozen=True)
class InstanceType:
    name: str
    identity: PoolIdentity
    deleting: bool


def read_instance_type(obj: Obj, where: str) -> InstanceType:
    """The pool an InstanceType (at JSON path `where`) stands for; a missing `generalGroup` is
    the `generic` group, as the defaulting webhook writes it."""
    if obj.get("kind") != INSTANCE_TYPE or obj.get("apiVersion") != WORKER_API:
        raise BadRequest(
            f"{where}.kind", f"expected a {WORKER_API} {INSTANCE_TYPE}, got {obj.get('kind')!r}"
        )
    identity = pool_identity(obj, where)
    meta = obj["metadata"]
    return InstanceType(meta["name"], identity, bool(meta.get("deletionTimestamp")))


def pool_flavors(
    request: DecoratorRequest, selector: Mapping[str, str] | None, acceleratable: bool
) -> list[Obj]:
    """The pool's live ResourceFlavors in the queue's order (chain.queues.pool_flavors)."""
    try:
        found = queues.pool_flavors(
            request.related.of(RESOURCE_FLAVOR, KUEUE_API), selector, acceleratable
        )
    except queues.FlavorError as err:
        raise BadRequest.at(object_path("related", err.flavor), err) from None
    return [flavor.obj for flavor in found]


def pool_cards(request: DecoratorRequest, name: str) -> PoolCards:
    """The related PoolCards named after the InstanceType; an empty pool until the keeper has
    written one (a new type, or a pool with no node yet)."""
    for obj in request.related.of(POOL_CARDS, POOL_CARDS_API):
        if obj["metadata"]["name"] != name:
            continue
        path = object_path("related", obj)
        try:
            return PoolCards.parse(fields.child(obj, "spec", "", required=True), "spec")
        except ValueError as err:
            raise BadRequest.at(path, err) from None
    return PoolCards()


@dataclass(frozen=True)
class QueueState:
    """What the views read of the pool's ClusterQueue."""

    stop_policy: str
    active: Obj | None
    """Kueue's `Active` condition, None until Kueue reports one."""
    cpu_quota: Fraction
    cpu_reserved: Fraction
    node_cores: tuple[int, ...]
    """Per-node cores of the CPU flavors the queue names (from the flavor names)."""


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(path, "expected a list")
    return value


def _quantity(raw: Any, path: str) -> Fraction:
    try:
        return parse_quantity(str(raw))
    except ValueError as err:
        raise BadRequest(path, str(err)) from None


def _cpu_entries(flavors: Any, path: str, amount: str) -> list[tuple[str, Fraction]]:
    """(flavor name, amount of `cpu`) for each flavor entry of a queue spec or status list."""
    found = []
    for i, flavor in enumerate(_list(flavors, path)):
        where = f"{path}[{i}]"
        if not isinstance(flavor, dict):
            raise BadRequest(where, "expected an object")
        for j, resource in enumerate(_list(flavor.get("resources"), f"{where}.resources")):
            if isinstance(resource, dict) and resource.get("name") == CPU_RESOURCE:
                value = _quantity(resource.get(amount, "0"), f"{where}.resources[{j}].{amount}")
                found.append((str(flavor.get("name", "")), value))
    return found


def pool_queue(request: DecoratorRequest, name: str) -> QueueState | None:
    """The related ClusterQueue named after the InstanceType, if it exists."""
    for obj in request.related.of(CLUSTER_QUEUE, KUEUE_API):
        if obj["metadata"]["name"] != name:
            continue
        path = object_path("related", obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not isinstance(spec, dict) or not isinstance(status, dict):
            raise BadRequest(path, "expected spec and status to be objects")
        stop = spec.get("stopPolicy") or STOP_NONE
        if stop not in STOP_POLICIES:
            raise BadRequest(f"{path}.spec.stopPolicy", f"expected one of {STOP_POLICIES}")
        quota: list[tuple[str, Fraction]] = []
        for i, group in enumerate(_list(spec.get("resourceGroups"), f"{path}.spec.resourceGroups")):
            where = f"{path}.spec.resourceGroups[{i}]"
            if not isinstance(group, dict):
                raise BadRequest(where, "expected an object")
            quota += _cpu_entries(group.get("flavors"), f"{where}.flavors", "nominalQuota")
        reserved = _cpu_entries(
            status.get("flavorsReservation"), f"{path}.status.flavorsReservation", "total"
        )
        conditions = _list(status.get("conditions"), f"{path}.status.conditions")
        active = next(
            (c for c in conditions if isinstance(c, dict) and c.get("type") == KUEUE_ACTIVE), None
        )
        cores = (flavor_count(flavor) for flavor, amount in quota if amount > 0)
        return QueueState(
            stop_policy=stop,
            active=active,
            cpu_quota=sum((amount for _, amount in quota), Fraction(0)),
            cpu_reserved=sum((amount for _, amount in reserved), Fraction(0)),
            node_cores=tuple(count for count in cores if count is not None),
        )
    return None
