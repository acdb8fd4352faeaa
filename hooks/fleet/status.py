"""The fleet InstanceType's status: the `FleetPool` of its name, and the manager's ClusterQueue
of its name, related by name.

The views, summaries and breakdown are the `FleetPool`'s as the gateway summed them. The phase
is Kueue's word on the manager's queue, as a member's is on its own: the manager's queue is what
admits a tenant's Job (it is Active once its MultiKueue check is, which Kueue sets while the
config's clusters are connected). The conditions follow the member's rules
(`chain.pool_conditions`): a fleet whose members count nothing is not Ready (`NoCapacity`).
"""

from __future__ import annotations

from collections.abc import Mapping

from chain import fields
from chain.apis import CLUSTER_QUEUE, CLUSTER_QUEUES_RESOURCE, KUEUE_ACTIVE, KUEUE_API
from chain.conditions import find, generation_of, merge
from chain.fleet_pools import FLEET_POOL, FLEET_POOL_API, FLEET_POOLS_RESOURCE, FleetPoolView
from chain.names import local_queue_name
from chain.pool_conditions import PoolState, pool_conditions
from chain.pools import PoolIdentity
from chain.views import AcceleratorViews, View, shown_views
from hooks.readers import pool_identity
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path

ACTIVE = "Active"
INACTIVE = "Inactive"
PENDING = "Pending"


def _named(request: DecoratorRequest, kind: str, api: str, name: str) -> Obj | None:
    for obj in request.related.of(kind, api):
        if obj["metadata"]["name"] == name:
            return obj
    return None


def fleet_pool(request: DecoratorRequest, name: str) -> FleetPoolView | None:
    obj = _named(request, FLEET_POOL, FLEET_POOL_API, name)
    if obj is None:
        return None
    try:
        return FleetPoolView.parse(obj)
    except ValueError as err:
        raise BadRequest.at(object_path("related", obj), err) from None


def queue_active(request: DecoratorRequest, name: str) -> tuple[bool, Mapping[str, object] | None]:
    """(whether the manager's queue exists, Kueue's `Active` condition on it or None)."""
    queue = _named(request, CLUSTER_QUEUE, KUEUE_API, name)
    if queue is None:
        return False, None
    try:
        status = fields.child(queue, "status", "")
        conditions = status.get("conditions")
        if conditions is not None and not isinstance(conditions, list):
            raise ValueError(
                f"status.conditions: expected a list, got {fields.describe(conditions)}"
            )
    except ValueError as err:
        raise BadRequest.at(object_path("related", queue), err) from None
    return True, find(conditions, KUEUE_ACTIVE)


def phase(
    name: str, deleting: bool, pool: FleetPoolView | None, request: DecoratorRequest
) -> tuple[str, str, str]:
    """(phase, phaseMessage, Kueue's reason) of the fleet type."""
    if deleting:
        return INACTIVE, "instance type is terminating", ""
    if pool is None:
        return PENDING, f"waiting for the worker gateway to write the FleetPool {name}", ""
    exists, active = queue_active(request, name)
    if not exists:
        return PENDING, f"waiting for the ClusterQueue {name} to be created", ""
    if active is None:
        return PENDING, f"waiting for Kueue to report on the ClusterQueue {name}", ""
    state = ACTIVE if active.get("status") == "True" else INACTIVE
    return state, str(active.get("message") or ""), str(active.get("reason") or "")


def sync(request: DecoratorRequest, now: str) -> Obj:
    """`/status/sync`: the fleet type's whole status (a request it cannot read is a 400)."""
    parent = request.object
    name = parent["metadata"]["name"]
    identity: PoolIdentity = pool_identity(parent, "$.object")
    pool = fleet_pool(request, name)
    deleting = bool(parent["metadata"].get("deletionTimestamp"))
    state, message, reason = phase(name, deleting, pool, request)
    views = pool.views if pool else AcceleratorViews()
    cpu = pool.cpu if pool else View()
    conditions = pool_conditions(
        PoolState(
            phase=state,
            message=message,
            acceleratable=identity.acceleratable,
            views=views,
            cpu=cpu,
            terminating=deleting,
            queue_reason=reason,
        )
    )
    held = (parent.get("status") or {}).get("conditions")
    status: Obj = {
        "entrance": local_queue_name(name),
        "phase": state,
        "phaseMessage": message,
        **shown_views(views, cpu),
        "members": list(pool.members) if pool else [],
        "memberSummary": pool.member_summary if pool else "",
        "memberViews": [member.render() for member in pool.member_views] if pool else [],
        "conditions": merge(held, conditions, generation_of(parent), now),
    }
    return {"status": status}


def customize(parent: Obj) -> Obj:
    """Relate the `FleetPool` and the manager's ClusterQueue of the fleet type's name."""
    name = parent["metadata"]["name"]
    return {
        "relatedResources": [
            {"apiVersion": FLEET_POOL_API, "resource": FLEET_POOLS_RESOURCE, "names": [name]},
            {"apiVersion": KUEUE_API, "resource": CLUSTER_QUEUES_RESOURCE, "names": [name]},
        ]
    }
