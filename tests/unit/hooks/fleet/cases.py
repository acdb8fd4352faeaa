"""Fixture cases of the fleet hooks: one Metacontroller request each and the exact answer.

The `FleetPool`s are what the worker gateway writes: `FleetPool.object()` of the gateway's own
fixtures (tests/unit/workergateway/fixtures), so a change to the gateway's shape that the hooks
do not follow fails here. The answers are written out by hand."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from chain.names import fnv64a, local_queue_name
from tests.unit.hooks.clock import EARLIER, NOW
from workergateway.members import read_member
from workergateway.sums import fleet_pools

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
CHAIN = "gpustack.ai/v1alpha1"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
CPU = "gpustack--generic-linux-amd64"
CHECK = "gpustack-fleet-" + fnv64a(T4)
GATEWAY_FIXTURES = Path(__file__).parents[2] / "workergateway" / "fixtures"
POOL_KEY = f"FleetPool.{CHAIN}"
QUEUE_KEY = f"ClusterQueue.{KUEUE}"

POOLS_CONTROLLER: Obj = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "DecoratorController",
    "metadata": {"name": "gpustack-fleet-pools"},
}
STATUS_CONTROLLER: Obj = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "DecoratorController",
    "metadata": {"name": "gpustack-fleet-status"},
}


def gateway_pool(fixture: str, name: str = T4) -> Obj:
    """The `FleetPool` the gateway writes for `name` from one of its fixtures."""
    members = json.loads((GATEWAY_FIXTURES / f"{fixture}.json").read_text())["members"]
    fleet = fleet_pools(
        read_member(m["cluster"], m["instanceTypes"], m["clusterQueues"]) for m in members
    )
    pool: Obj = fleet.pools[name].object()
    return pool


def t4_spec() -> Obj:
    return {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-tesla-t4",
        "arch": "amd64",
        "displayName": "Tesla-T4",
        "generalGroup": "generic",
        "localStorage": "100Gi",
        "os": "linux",
        "unitResources": {"cpu": "8", "ram": "32Gi"},
    }


def children(
    name: str, members: list[str], quota: list[tuple[str, str]], type_spec: Obj
) -> list[Obj]:
    """The four objects of one pool, as docs/fleet.md describes them."""
    check = "gpustack-fleet-" + fnv64a(name)
    queue_spec: Obj = {"namespaceSelector": {}}
    if quota:
        queue_spec["resourceGroups"] = [
            {
                "coveredResources": [resource for resource, _ in quota],
                "flavors": [
                    {
                        "name": "gpustack-fleet",
                        "resources": [{"name": r, "nominalQuota": q} for r, q in quota],
                    }
                ],
            }
        ]
    queue_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": {"resource.gpustack.ai/type": "instancetypes"}},
            "spec": queue_spec,
        },
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "MultiKueueConfig",
                    "name": name,
                },
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "MultiKueueConfig",
            "metadata": {"name": name},
            "spec": {"clusters": members},
        },
        {
            "apiVersion": WORKER,
            "kind": "InstanceType",
            "metadata": {"name": name, "labels": {"resource.gpustack.ai/fleet": "true"}},
            "spec": type_spec,
        },
    ]


def pool_request(pool: Obj) -> Obj:
    return {"controller": POOLS_CONTROLLER, "object": pool, "attachments": {}}


def pool_case(description: str, pool: Obj, attachments: list[Obj]) -> Obj:
    return {
        "description": description,
        "path": "/sync",
        "request": pool_request(pool),
        "response": {"attachments": attachments},
    }


def refusal(description: str, request: Obj, field: str, path: str = "/sync") -> Obj:
    return {
        "description": description,
        "path": path,
        "request": request,
        "status": 400,
        "errorField": field,
    }


def spoiled(change: Any, fixture: str = "two-members") -> Obj:
    pool = copy.deepcopy(gateway_pool(fixture))
    change(pool)
    return pool


# --- the fleet InstanceType's status ----------------------------------------------------------


def fleet_type(name: str = T4, status: Obj | None = None, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "generation": 1, "labels": {"resource.gpustack.ai/fleet": "true"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T08:00:00Z"
    obj: Obj = {"apiVersion": WORKER, "kind": "InstanceType", "metadata": meta, "spec": t4_spec()}
    if status is not None:
        obj["status"] = status
    return obj


def manager_queue(active: Obj | None, name: str = T4) -> Obj:
    queue: Obj = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}},
    }
    if active is not None:
        queue["status"] = {"conditions": [{"type": "Active", **active}]}
    return queue


QUEUE_ACTIVE: Obj = {"status": "True", "reason": "Ready", "message": "Can admit new workloads"}
QUEUE_CHECK_INACTIVE: Obj = {
    "status": "False",
    "reason": "AdmissionCheckInactive",
    "message": f"Can't admit new workloads: references inactive AdmissionCheck(s): {CHECK}",
}


def status_request(parent: Obj, pool: Obj | None, queue: Obj | None) -> Obj:
    related: Obj = {}
    if pool is not None:
        related[POOL_KEY] = {pool["metadata"]["name"]: pool}
    if queue is not None:
        related[QUEUE_KEY] = {queue["metadata"]["name"]: queue}
    return {"controller": STATUS_CONTROLLER, "object": parent, "related": related}


def condition(type_: str, holds: bool, reason: str, message: str, since: str = NOW) -> Obj:
    return {
        "type": type_,
        "status": "True" if holds else "False",
        "observedGeneration": 1,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    }


ZERO = {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"}
ZERO_VIEWS: Obj = {
    "accelerator": ZERO,
    "acceleratorShared": ZERO,
    "acceleratorSliced": ZERO,
    "acceleratorPartitioned": {**ZERO, "allocatedProfiles": [], "remainingProfiles": []},
}
SPEC_KEYS = (
    "accelerator",
    "acceleratorShared",
    "acceleratorSliced",
    "acceleratorPartitioned",
    "cpu",
    "acceleratorSummary",
    "cpuSummary",
    "partitionSummary",
    "members",
    "memberSummary",
    "memberViews",
)


def fleet_status(pool: Obj | None, phase: str, message: str, conditions: list[Obj]) -> Obj:
    """The status the hook writes: the FleetPool's views and breakdown copied as they are."""
    spec = pool["spec"] if pool else {}
    shown = {key: spec[key] for key in SPEC_KEYS} if pool else {}
    if not pool:
        shown = {
            **ZERO_VIEWS,
            "cpu": ZERO,
            "acceleratorSummary": "0/0 0/0 0/0 0/0",
            "cpuSummary": "0/0",
            "partitionSummary": "",
            "members": [],
            "memberSummary": "",
            "memberViews": [],
        }
    return {
        "entrance": local_queue_name(T4),
        "phase": phase,
        "phaseMessage": message,
        **shown,
        "conditions": conditions,
    }


def status_case(description: str, request: Obj, status: Obj) -> Obj:
    return {
        "description": description,
        "path": "/status/sync",
        "request": request,
        "response": {"status": status},
    }


ACTIVE_TRUE = condition("Active", True, "QueueActive", "Can admit new workloads")
AVAILABLE_TWO = condition(
    "Available",
    True,
    "CapacityFree",
    "a new Instance fits now (Accelerator(EX/SH/SL/PT) 2/4 4/45 100/450 0/0)",
)
READY_TRUE = condition("Ready", True, "Ready", "the pool is active and has counted capacity")


LOST_NORTH = '{"north": "2026-12-05T08:00:00Z"}'


def _with_lost_member(pool: Obj) -> Obj:
    """`pool` as the gateway writes it while north, lost, is kept listed."""
    kept = copy.deepcopy(pool)
    kept["spec"]["members"] = [*kept["spec"]["members"], "north"]
    kept["spec"]["memberSummary"] = kept["spec"]["memberSummary"].replace("2/2", "2/3")
    kept["metadata"]["annotations"] = {"gpustack.ai/members-lost-since": LOST_NORTH}
    return kept


def _config_annotated(objects: list[Obj], lost_since: str) -> list[Obj]:
    for obj in objects:
        if obj["kind"] == "MultiKueueConfig":
            obj["metadata"]["annotations"] = {"gpustack.ai/members-lost-since": lost_since}
    return objects


def _cases() -> dict[str, Obj]:
    two = gateway_pool("two-members")
    none_count = gateway_pool("no-member-counts")
    cpu = gateway_pool("three-members", CPU)
    a10g = gateway_pool("pool-of-one-member", A10G)
    cases: dict[str, Obj] = {
        "two-members": pool_case(
            "a pool of two members: its queue holds the summed credits over the one fleet "
            "flavor and admits through its MultiKueue check, whose config lists both members",
            two,
            children(T4, ["east", "west"], [("credits.gpustack.ai/nvidia", "9600000")], t4_spec()),
        ),
        "lost-member-kept": pool_case(
            "north is lost and still listed after the members that have the pool (the gateway "
            "keeps it for the grace): the config lists it last and carries the gateway's note of "
            "since when, the quota is the two others' alone",
            _with_lost_member(two),
            _config_annotated(
                children(
                    T4,
                    ["east", "west", "north"],
                    [("credits.gpustack.ai/nvidia", "9600000")],
                    t4_spec(),
                ),
                LOST_NORTH,
            ),
        ),
        "cpu-pool": pool_case(
            "the CPU pool of three members: its queue covers cpu, summed",
            cpu,
            children(CPU, ["east", "north", "west"], [("cpu", "192")], cpu["spec"]["instanceType"]),
        ),
        "pool-of-one-member": pool_case(
            "a pool only east has: its config lists east alone",
            a10g,
            children(
                A10G,
                ["east"],
                [("credits.gpustack.ai/nvidia", "1600000")],
                a10g["spec"]["instanceType"],
            ),
        ),
        "no-member-counts": pool_case(
            "no member counts: the queue keeps its resources at 0, so it admits nothing",
            none_count,
            children(
                T4,
                [m["name"] for m in none_count["spec"]["memberViews"]],
                [(q["name"], "0") for q in none_count["spec"]["quota"]],
                none_count["spec"]["instanceType"],
            ),
        ),
        "no-quota-yet": pool_case(
            "no member's queue names a resource yet: the queue has no resource group at all",
            spoiled(lambda p: p["spec"].update(quota=[])),
            children(T4, ["east", "west"], [], t4_spec()),
        ),
        "error-not-a-fleet-pool": refusal(
            "an object of another kind is refused, naming its kind",
            pool_request(spoiled(lambda p: p.update(kind="InstanceType"))),
            "$.object.kind",
        ),
        "error-no-members": refusal(
            "a pool without members is refused: a MultiKueueConfig lists at least one cluster",
            pool_request(spoiled(lambda p: p["spec"].update(members=[]))),
            "$.object.spec.members",
        ),
        "error-too-many-members": refusal(
            "a pool of 21 members is refused: a MultiKueueConfig lists at most 20 clusters",
            pool_request(
                spoiled(lambda p: p["spec"].update(members=[f"m{n:02}" for n in range(21)]))
            ),
            "$.object.spec.members",
        ),
        "error-member-twice": refusal(
            "a member listed twice is refused, naming the second",
            pool_request(spoiled(lambda p: p["spec"].update(members=["east", "west", "east"]))),
            "$.object.spec.members[2]",
        ),
        "error-quota-not-a-quantity": refusal(
            "a quota that is no quantity is refused, naming it",
            pool_request(spoiled(lambda p: p["spec"]["quota"][0].update(nominalQuota="lots"))),
            "$.object.spec.quota[0].nominalQuota",
        ),
        "error-missing-view": refusal(
            "a pool without one of the four views is refused, naming it",
            pool_request(spoiled(lambda p: p["spec"].pop("acceleratorSliced"))),
            "$.object.spec.acceleratorSliced",
        ),
        "error-identity-wrong-type": refusal(
            "an instanceType whose identity has the wrong type is refused, naming the field",
            pool_request(spoiled(lambda p: p["spec"]["instanceType"].update(acceleratable="yes"))),
            "$.object.spec.instanceType.acceleratable",
        ),
        "error-no-os": refusal(
            "an instanceType without os is refused: the fleet InstanceType could not be created",
            pool_request(spoiled(lambda p: p["spec"]["instanceType"].pop("os"))),
            "$.object.spec.instanceType.os",
        ),
        "error-card-pool-without-group": refusal(
            "a card pool's instanceType without acceleratorGroup is refused, naming it",
            pool_request(spoiled(lambda p: p["spec"]["instanceType"].pop("acceleratorGroup"))),
            "$.object.spec.instanceType.acceleratorGroup",
        ),
        "error-member-view-of-a-stranger": refusal(
            "a breakdown entry of a member the pool does not list is refused",
            pool_request(spoiled(lambda p: p["spec"]["memberViews"][0].update(name="south"))),
            "$.object.spec.memberViews[0].name",
        ),
        "status-active": status_case(
            "the manager's queue admits: Active, Available and Ready, the views and breakdown "
            "the FleetPool's",
            status_request(fleet_type(), two, manager_queue(QUEUE_ACTIVE)),
            fleet_status(
                two,
                "Active",
                "Can admit new workloads",
                [
                    ACTIVE_TRUE,
                    AVAILABLE_TWO,
                    READY_TRUE,
                ],
            ),
        ),
        "status-kept-transition": status_case(
            "conditions the type already holds with the same status keep their time",
            status_request(
                fleet_type(
                    status={
                        "conditions": [
                            condition(
                                "Active", True, "QueueActive", "Can admit new workloads", EARLIER
                            )
                        ]
                    }
                ),
                two,
                manager_queue(QUEUE_ACTIVE),
            ),
            fleet_status(
                two,
                "Active",
                "Can admit new workloads",
                [
                    condition("Active", True, "QueueActive", "Can admit new workloads", EARLIER),
                    AVAILABLE_TWO,
                    READY_TRUE,
                ],
            ),
        ),
        "status-check-inactive": status_case(
            "the manager's queue does not admit (its MultiKueue check is inactive): Kueue's "
            "reason and message",
            status_request(fleet_type(), two, manager_queue(QUEUE_CHECK_INACTIVE)),
            fleet_status(
                two,
                "Inactive",
                QUEUE_CHECK_INACTIVE["message"],
                [
                    condition(
                        "Active", False, "AdmissionCheckInactive", QUEUE_CHECK_INACTIVE["message"]
                    ),
                    condition(
                        "Available",
                        False,
                        "Inactive",
                        f"not Active: {QUEUE_CHECK_INACTIVE['message']}",
                    ),
                    condition(
                        "Ready", False, "AdmissionCheckInactive", QUEUE_CHECK_INACTIVE["message"]
                    ),
                ],
            ),
        ),
        "status-no-member-counts": status_case(
            "the queue admits but no member counts: not Available and not Ready (NoCapacity)",
            status_request(fleet_type(), none_count, manager_queue(QUEUE_ACTIVE)),
            fleet_status(
                none_count,
                "Active",
                "Can admit new workloads",
                [
                    ACTIVE_TRUE,
                    condition("Available", False, "NoCapacity", NO_CARDS),
                    condition("Ready", False, "NoCapacity", NO_CARDS),
                ],
            ),
        ),
        "status-queue-pending": status_case(
            "Kueue has not reported on the manager's queue yet: Pending",
            status_request(fleet_type(), two, manager_queue(None)),
            fleet_status(two, "Pending", WAIT_KUEUE, pending(WAIT_KUEUE)),
        ),
        "status-no-queue": status_case(
            "the manager's queue is not there yet: Pending",
            status_request(fleet_type(), two, None),
            fleet_status(two, "Pending", WAIT_QUEUE, pending(WAIT_QUEUE)),
        ),
        "status-no-fleet-pool": status_case(
            "no FleetPool of the type's name (the gateway deleted it): Pending, every view 0",
            status_request(fleet_type(), None, manager_queue(QUEUE_ACTIVE)),
            fleet_status(None, "Pending", WAIT_POOL, pending(WAIT_POOL)),
        ),
        "status-terminating": status_case(
            "a fleet type being deleted is Inactive, whatever its queue says",
            status_request(fleet_type(deleting=True), two, manager_queue(QUEUE_ACTIVE)),
            fleet_status(
                two,
                "Inactive",
                "instance type is terminating",
                [
                    condition("Active", False, "Terminating", "the InstanceType is being deleted"),
                    condition(
                        "Available",
                        False,
                        "Inactive",
                        "not Active: the InstanceType is being deleted",
                    ),
                    condition("Ready", False, "Terminating", "the InstanceType is being deleted"),
                ],
            ),
        ),
        "error-status-pool-malformed": refusal(
            "a related FleetPool the hook cannot read is refused, naming its field",
            status_request(
                fleet_type(),
                spoiled(lambda p: p["spec"]["cpu"].update(remaining=-1)),
                manager_queue(QUEUE_ACTIVE),
            ),
            f"$.related['{POOL_KEY}']['{T4}'].spec.cpu.remaining",
            "/status/sync",
        ),
        "error-status-queue-status": refusal(
            "a related queue whose status is no object is refused, naming it",
            status_request(fleet_type(), two, {**manager_queue(None), "status": "ready"}),
            f"$.related['{QUEUE_KEY}']['{T4}'].status",
            "/status/sync",
        ),
        "status-customize": {
            "description": "customize relates the FleetPool and the manager's queue by name",
            "path": "/status/customize",
            "request": {"controller": STATUS_CONTROLLER, "parent": fleet_type()},
            "response": {
                "relatedResources": [
                    {"apiVersion": CHAIN, "resource": "fleetpools", "names": [T4]},
                    {"apiVersion": KUEUE, "resource": "clusterqueues", "names": [T4]},
                ]
            },
        },
    }
    return cases


NO_CARDS = "the pool has no cards counted: no node of it reported any, or every node of it left"
WAIT_KUEUE = f"waiting for Kueue to report on the ClusterQueue {T4}"
WAIT_QUEUE = f"waiting for the ClusterQueue {T4} to be created"
WAIT_POOL = f"waiting for the worker gateway to write the FleetPool {T4}"


def pending(message: str) -> list[Obj]:
    return [
        condition("Active", False, "QueuePending", message),
        condition("Available", False, "Inactive", f"not Active: {message}"),
        condition("Ready", False, "QueuePending", message),
    ]


CASES = _cases()
