"""The Workload fit-pin webhook (`POST /mutate-workloads`, control-plane §4.2).

Registered for `workloads.kueue.x-k8s.io` CREATE and UPDATE with failurePolicy Ignore and the
matchCondition `object.spec.queueName.startsWith('gpustack-fnv64-')`. Each PodSet asking for a
slice of U units gets `sliced-max-free-units.fit.gpustack.ai/<group> Gt U-1`, each asking for
N >= 2 shared cards in one container `shared-free-cards.fit.gpustack.ai/<group> Gt N-1`, so
Kueue's topology-aware scheduler only places it on nodes where one card (or N cards) still has
the room; the node's summed capacity keys cannot tell.

It never denies: whatever it cannot read leaves the Workload unchanged. The pool comes from the
catalog (the InstanceType whose entrance label is the queue name); a queue the catalog does not
know covers upstream's "missing LocalQueue", "ClusterQueue without the chain mark" and "no
InstanceType" alike. An UPDATE is pinned only while the old Workload holds no quota: that is
when Kueue rebuilds a suspended job's PodSets, and a reserved Workload's PodSets are frozen.
"""

from __future__ import annotations

import logging
from typing import Any

from chain.labels import is_fit_label_key, shared_fit_key, sliced_fit_key
from chain.manufacturers import ManufacturerTable
from chain.names import LOCAL_QUEUE_PREFIX
from chain.requests import FitDemand, fit_demand, read_containers
from hooks.admission.affinity import greater_than, with_requirements
from hooks.admission.pool_catalog import Catalog
from hooks.admissionreview import allow, parse_review
from hooks.shell import Obj

log = logging.getLogger("hooks.admission")


def _quota_reserved(workload: Obj | None) -> bool:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in conditions
    )


def _requirements(demand: FitDemand, group: str) -> list[Obj]:
    out = []
    if demand.sliced_units > 0:
        out.append(greater_than(sliced_fit_key(group), demand.sliced_units - 1))
    if demand.shared_cards >= 2:
        out.append(greater_than(shared_fit_key(group), demand.shared_cards - 1))
    return out


def pin_patch(workload: Obj, group: str, table: ManufacturerTable) -> list[Obj]:
    """The JSONPatch pinning every PodSet of `workload` to nodes whose fit labels show room."""
    patch = []
    for number, podset in enumerate(workload["spec"]["podSets"]):
        spec = podset["template"]["spec"]
        path = f"spec.podSets[{number}].template.spec"
        requirements = _requirements(fit_demand(read_containers(spec, path, table)), group)
        if not requirements:
            continue
        affinity = with_requirements(spec.get("affinity"), requirements, f"{path}.affinity")
        if affinity is not None:
            pointer = f"/spec/podSets/{number}/template/spec/affinity"
            patch.append({"op": "add", "path": pointer, "value": affinity})
    return patch


def _fit_demands(workload: Obj, table: ManufacturerTable) -> list[FitDemand]:
    return [
        fit_demand(
            read_containers(p["template"]["spec"], f"spec.podSets[{n}].template.spec", table)
        )
        for n, p in enumerate(workload["spec"]["podSets"])
    ]


def mutate_workloads(body: Any, catalog: Catalog, table: ManufacturerTable) -> Obj:
    review = parse_review(body)
    workload = review.object
    if review.operation not in ("CREATE", "UPDATE") or workload is None:
        return allow(review.uid)
    try:
        queue = str((workload.get("spec") or {}).get("queueName") or "")
        if not queue.startswith(LOCAL_QUEUE_PREFIX):
            return allow(review.uid)
        wanted = _fit_demands(workload, table)
        if not any(d.sliced_units > 0 or d.shared_cards >= 2 for d in wanted):
            return allow(review.uid)
        if not catalog.settings.workload_fit_affinity:
            return allow(review.uid)
        if review.operation == "UPDATE" and _quota_reserved(review.old_object):
            return allow(review.uid)
        pool = catalog.pool(queue)
        group = pool.accelerator_group if pool is not None else ""
        if not group or not is_fit_label_key(sliced_fit_key(group)):
            return allow(review.uid)
        return allow(review.uid, pin_patch(workload, group, table))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        # failurePolicy Ignore would admit it unchanged anyway; say why here instead.
        log.warning("workload %s left unpinned: %s", review.uid, err)
        return allow(review.uid)
