"""The `FleetPool` decorator: the manager's objects for one pool of the fleet.

Every object is named after the pool except the check, whose name is the pool's FNV hash
(`chain.fleet_pools.fleet_check_name`) so that it fits whatever the pool's name. One check per
pool because a check's parameters name one MultiKueueConfig, and pools have different members.
"""

from __future__ import annotations

from chain.apis import ADMISSION_CHECK, CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.fleet_pools import (
    FLEET_FLAVOR,
    FLEET_LABEL,
    FLEET_LABEL_VALUE,
    KUEUE_GROUP,
    MEMBERS_LOST_SINCE,
    MULTIKUEUE_CONFIG,
    MULTIKUEUE_CONTROLLER,
    FleetPoolView,
    fleet_check_name,
)
from chain.labels import RESOURCE_TYPE, RESOURCE_TYPE_INSTANCE_TYPES
from hooks.request import BadRequest, DecoratorRequest, Obj


def read_pool(obj: Obj, where: str) -> FleetPoolView:
    try:
        return FleetPoolView.parse(obj)
    except ValueError as err:
        raise BadRequest.at(where, err) from None


def cluster_queue(pool: FleetPoolView) -> Obj:
    """The pool's queue on the manager. Labelled as a chain queue, so the entrance hook gives it
    the same LocalQueue name as every member's. Its one flavor carries the summed quota (no
    resource group while no member's queue names a resource yet: Kueue omits empty lists, and
    a queue without quota admits nothing). Its only check is MultiKueue's: the per-card check
    runs on the member the Workload lands on."""
    spec: Obj = {"namespaceSelector": {}}
    if pool.quota:
        spec["resourceGroups"] = [
            {
                "coveredResources": [quota.name for quota in pool.quota],
                "flavors": [
                    {
                        "name": FLEET_FLAVOR,
                        "resources": [
                            {"name": quota.name, "nominalQuota": quota.text} for quota in pool.quota
                        ],
                    }
                ],
            }
        ]
    spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": fleet_check_name(pool.name)}]}
    return {
        "apiVersion": KUEUE_API,
        "kind": CLUSTER_QUEUE,
        "metadata": {
            "name": pool.name,
            "labels": {RESOURCE_TYPE: RESOURCE_TYPE_INSTANCE_TYPES},
        },
        "spec": spec,
    }


def admission_check(pool: FleetPoolView) -> Obj:
    return {
        "apiVersion": KUEUE_API,
        "kind": ADMISSION_CHECK,
        "metadata": {"name": fleet_check_name(pool.name)},
        "spec": {
            "controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {"apiGroup": KUEUE_GROUP, "kind": MULTIKUEUE_CONFIG, "name": pool.name},
        },
    }


def multikueue_config(pool: FleetPoolView) -> Obj:
    """The members that have the pool, in the gateway's order (by name, then the lost members it
    still lists): the Incremental dispatcher nominates in this order, so it must not change
    between passes. The gateway's note of when each listed lost member was lost is copied, so
    that the config says why a cluster Kueue marks inactive is still listed."""
    metadata: Obj = {"name": pool.name}
    if pool.lost_since:
        metadata["annotations"] = {MEMBERS_LOST_SINCE: pool.lost_since}
    return {
        "apiVersion": KUEUE_API,
        "kind": MULTIKUEUE_CONFIG,
        "metadata": metadata,
        "spec": {"clusters": list(pool.members)},
    }


def instance_type(pool: FleetPoolView) -> Obj:
    """The fleet InstanceType: the spec the members agree on. `inactive` is never written here,
    so the manager's admin may set it (Metacontroller leaves fields it does not own)."""
    return {
        "apiVersion": WORKER_API,
        "kind": INSTANCE_TYPE,
        "metadata": {"name": pool.name, "labels": {FLEET_LABEL: FLEET_LABEL_VALUE}},
        "spec": dict(pool.instance_type),
    }


def sync(request: DecoratorRequest) -> Obj:
    pool = read_pool(request.object, "$.object")
    return {
        "attachments": [
            cluster_queue(pool),
            admission_check(pool),
            multikueue_config(pool),
            instance_type(pool),
        ]
    }
