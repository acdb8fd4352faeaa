"""The pure core of the queue hook: what an InstanceType's ClusterQueue should be.

`plan` decides the resource groups and the stop policy from the pool's live flavors, the
observed queue and the settings; `cluster_queue` writes them out; `sync`, `finalize` and
`customize` turn requests into answers. See the package docstring for the rules.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chain.apis import (
    CHAIN_API,
    CLUSTER_QUEUE,
    INSTANCE_TYPE,
    KUEUE_API,
    RESOURCE_FLAVORS_RESOURCE,
    SETTINGS_NAME,
    SETTINGS_RESOURCE,
    WORKER_API,
)
from chain.keys import split_accelerator_key
from chain.labels import (
    QUEUE_PROBLEM,
    QUEUE_STOP_POLICY,
    RESOURCE_TYPE,
    RESOURCE_TYPE_INSTANCE_TYPES,
    RESOURCE_TYPE_NODES,
)
from chain.manufacturers import ManufacturerTable
from chain.queues import (
    NODE_DEVICES_CHECK,
    STOP_HOLD,
    STOP_HOLD_AND_DRAIN,
    STOP_NONE,
    PoolFlavor,
    foreign_stop,
    nominal_quota,
    quota_resource,
    stronger_stop,
)
from chain.settings import Settings
from chain.units import MAX_QUEUE_FLAVORS
from hooks.queue.request import (
    ObservedQueue,
    Pool,
    check_active,
    observed_queue,
    observed_queues,
    pool_flavors,
    read_pool,
    selector_of,
)
from hooks.readers import related_settings
from hooks.request import BadRequest, DecoratorRequest, Obj

log = logging.getLogger("hooks.queue")

WAIT_SECONDS = 10
"""Resync delay while waiting on Kueue (a drain, a deletion); queue status changes also
trigger a sync, this only bounds the wait if one is missed."""

ADMISSION_CHECKS_RESOURCE = "admissionchecks"


def isolation() -> Obj:
    """Spec fields of an isolated queue: no cohort, so nothing to borrow, lend or reclaim;
    inside the queue a higher-priority workload may still preempt a lower one."""
    return {
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"},
        "preemption": {
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "LowerPriority",
        },
    }


@dataclass(frozen=True)
class Plan:
    groups: list[Obj]
    stop_policy: str
    problem: str | None = None
    wait: bool = False


def resource_groups(resource: str, acceleratable: bool, flavors: Sequence[PoolFlavor]) -> list[Obj]:
    """One group covering the pool's one resource; flavors in the given (preference) order."""
    entries = [
        {
            "name": flavor.name,
            "resources": [
                {"name": resource, "nominalQuota": str(nominal_quota(flavor.size, acceleratable))}
            ],
        }
        for flavor in flavors
    ]
    return [{"coveredResources": [resource], "flavors": entries}]


def refusal(pool: Pool, flavors: Sequence[PoolFlavor], table: ManufacturerTable) -> str | None:
    """Why the pool's flavors cannot become the queue's groups, or None."""
    if len(flavors) > MAX_QUEUE_FLAVORS:
        return (
            f"TooManyFlavors: the pool has {len(flavors)} flavors and Kueue allows at most "
            f"{MAX_QUEUE_FLAVORS} in a resource group; the queue keeps its last accepted flavors"
        )
    maker = split_accelerator_key(pool.identity.accelerator_group)[0]
    if pool.identity.acceleratable and maker not in table:
        return (
            f"UnknownManufacturer: spec.acceleratorGroup {pool.identity.accelerator_group!r} "
            "names no known manufacturer, so the queue has no credits resource"
        )
    return None


def _asked_stop(pool: Pool) -> str:
    """The stop the type asks for: Hold while inactive, else None. The hook's own drain (a pool
    that lost every flavor, decided in `plan`) is not asked for here: it lasts while the pool
    has no flavor, and flavors that come back, even midway, lift it (upstream reactivates what
    it drained). Someone else's drain is kept by `effective_stop`, as long as they leave it."""
    return STOP_HOLD if pool.inactive else STOP_NONE


def plan(
    pool: Pool,
    flavors: Sequence[PoolFlavor],
    observed: ObservedQueue | None,
    settings: Settings,
    table: ManufacturerTable,
) -> Plan:
    """Groups and stop policy of the queue (package docstring, "Rules")."""
    live = observed if observed is not None and not observed.deleting else None
    asked = _asked_stop(pool)
    if flavors:
        problem = refusal(pool, flavors, table)
        if problem is None:
            maker = split_accelerator_key(pool.identity.accelerator_group)[0]
            resource = quota_resource(pool.identity.acceleratable, maker)
            groups = resource_groups(resource, pool.identity.acceleratable, flavors)
            return Plan(groups, asked)
        log.warning("instance type %s: %s", pool.name, problem)
        kept = live.groups if live is not None else []
        return Plan(kept, asked if kept else stronger_stop(asked, STOP_HOLD), problem=problem)
    if live is None or not live.groups:
        # Nothing to drain: an empty queue admits nothing; Hold makes it read Inactive.
        return Plan([], stronger_stop(asked, STOP_HOLD))
    if settings.instance_type_drain_when_no_flavors:
        # Keep the groups under HoldAndDrain until Kueue shows the stopped queue empty.
        if live.stop_policy == STOP_HOLD_AND_DRAIN and live.idle:
            return Plan([], stronger_stop(asked, STOP_HOLD))
        return Plan(live.groups, STOP_HOLD_AND_DRAIN, wait=True)
    # Switch off, it gates the drain and nothing else: the queue keeps its groups and its stop
    # policy while workloads hold quota in it (upstream requeues and waits), and empties (held)
    # once none does. Nothing is evicted, so nothing marks the type.
    if live.idle:
        return Plan([], stronger_stop(asked, STOP_HOLD))
    return Plan(live.groups, asked, wait=True)


def effective_stop(decided: str, observed: ObservedQueue | None) -> str:
    """The hook's decision, unless someone else stopped the live queue harder: an admin's
    stop is kept (never undone by the hook), and the lifecycle keeper marks the type inactive."""
    if observed is None or observed.deleting:
        return decided
    if foreign_stop(observed.stop_policy, observed.decided):
        return stronger_stop(decided, observed.stop_policy)
    return decided


def cluster_queue(
    pool: Pool,
    labels: dict[str, str],
    groups: list[Obj],
    stop: str,
    checks: Sequence[str],
    decided: str | None = None,
) -> Obj:
    """The ClusterQueue as the hook owns it; empty groups and checks are left out, since
    Kueue's API omits empty lists and an `[]` would read as a difference on every sync.
    `decided` (default: `stop`) is the hook's own decision, recorded beside the stop."""
    spec: Obj = {
        "namespaceSelector": {},
        "stopPolicy": stop,
        **isolation(),
    }
    if groups:
        spec["resourceGroups"] = groups
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {
        "apiVersion": KUEUE_API,
        "kind": CLUSTER_QUEUE,
        "metadata": {
            "name": pool.name,
            "labels": labels,
            "annotations": {QUEUE_STOP_POLICY: decided or stop},
        },
        "spec": spec,
    }


def queue_labels(pool: Pool, aware: bool) -> dict[str, str]:
    return {**pool.identity.schedule_labels(aware), RESOURCE_TYPE: RESOURCE_TYPE_INSTANCE_TYPES}


def _instance_type(obj: Obj, where: str) -> None:
    if obj.get("kind") != INSTANCE_TYPE or obj.get("apiVersion") != WORKER_API:
        raise BadRequest(
            f"{where}.kind", f"expected a {WORKER_API} {INSTANCE_TYPE}, got {obj.get('kind')!r}"
        )


def sync(request: DecoratorRequest, table: ManufacturerTable) -> Obj:
    """`/sync`, and `/finalize` (whose body says `finalizing: true`): a type being deleted is
    finalized whichever route is called, reading nothing but its name and its queue."""
    _instance_type(request.object, "$.object")
    meta = request.object["metadata"]
    if request.finalizing or meta.get("deletionTimestamp"):
        return finalize(observed_queues(request))

    pool = read_pool(request.object, "$.object")
    observed = observed_queue(request, pool.name)
    settings = related_settings(request)
    aware = settings.instance_type_aware_cpu_manufacturer
    flavors = pool_flavors(request, selector_of(pool.identity, aware), pool.identity.acceleratable)
    decided = plan(pool, flavors, observed, settings, table)
    checks = []
    if (
        pool.identity.acceleratable
        and settings.instance_type_derived_from_node
        and check_active(request)
    ):
        checks.append(NODE_DEVICES_CHECK)
    stop = effective_stop(decided.stop_policy, observed)
    queue = cluster_queue(
        pool, queue_labels(pool, aware), decided.groups, stop, checks, decided.stop_policy
    )
    return {
        "annotations": {QUEUE_PROBLEM: decided.problem},
        "attachments": [queue],
        "resyncAfterSeconds": WAIT_SECONDS if decided.wait else 0,
    }


def finalize(observed: Sequence[ObservedQueue]) -> Obj:
    """Drain the type's queues, let them be deleted, and release the InstanceType only once
    they are gone.

    Every attached queue is the type's own (Metacontroller attaches only what the type owns),
    whatever its name. Each is answered as observed, with HoldAndDrain, until Kueue shows it
    drained; then it is left out and Metacontroller deletes it (Kueue's own finalizer holds it
    until no workload remains). `finalized` is true only once no queue is observed.
    """
    if not observed:
        return {"attachments": [], "finalized": True, "resyncAfterSeconds": 0}
    draining: list[Obj] = []
    for queue in observed:
        drained = queue.stop_policy == STOP_HOLD_AND_DRAIN and queue.idle
        if queue.deleting or drained:
            continue
        meta = queue.obj["metadata"]
        draining.append(
            {
                "apiVersion": KUEUE_API,
                "kind": CLUSTER_QUEUE,
                "metadata": {
                    "name": meta["name"],
                    "labels": dict(meta.get("labels") or {}),
                    "annotations": {QUEUE_STOP_POLICY: STOP_HOLD_AND_DRAIN},
                },
                "spec": {**(queue.obj.get("spec") or {}), "stopPolicy": STOP_HOLD_AND_DRAIN},
            }
        )
    return {"attachments": draining, "finalized": False, "resyncAfterSeconds": WAIT_SECONDS}


def customize(parent: Obj) -> Obj:
    """Relate the pool's flavors, the node-devices check and the settings singleton.

    The answer is cached per InstanceType generation, so it depends on the spec alone: the
    flavor selector is the one without CPU awareness, which every aware selector narrows;
    `sync` applies the narrower one when the setting is on.
    """
    _instance_type(parent, "$.parent")
    pool = read_pool(parent, "$.parent")
    rules: list[Obj] = []
    selector = selector_of(pool.identity, aware=False)
    if selector is not None:
        rules.append(
            {
                "apiVersion": KUEUE_API,
                "resource": RESOURCE_FLAVORS_RESOURCE,
                "labelSelector": {"matchLabels": {RESOURCE_TYPE: RESOURCE_TYPE_NODES, **selector}},
            }
        )
    rules += [
        {
            "apiVersion": KUEUE_API,
            "resource": ADMISSION_CHECKS_RESOURCE,
            "names": [NODE_DEVICES_CHECK],
        },
        {"apiVersion": CHAIN_API, "resource": SETTINGS_RESOURCE, "names": [SETTINGS_NAME]},
    ]
    return {"relatedResources": rules}
