"""The Workload fit-pin webhook (`POST /mutate-workloads`, docs/design/control-plane.md, "Workload
fit pin").

Registered for `workloads.kueue.x-k8s.io` CREATE and UPDATE with failurePolicy Ignore and the
matchCondition `object.spec.queueName.startsWith('gpustack-fnv64-')`. Each PodSet asking for a
slice of U units gets `sliced-max-free-units.fit.gpustack.ai/<group> Gt U-1`, each asking for
N >= 2 shared cards in one container `shared-free-cards.fit.gpustack.ai/<group> Gt N-1`, so
Kueue's topology-aware scheduler only places it on nodes where one card (or N cards) still has
the room; the node's summed capacity keys cannot tell.

It denies only a created Workload entering a chain queue whose PodSets it cannot read (a
quantity out of every range such as `10e9999999`, a field of the wrong type), naming the field:
Kueue could never admit it, and the refusal tells the job's owner why (`hooks.admissionreview`).
Anything else it cannot read leaves the Workload unchanged, as failurePolicy Ignore would: an
UPDATE (a refusal could keep Kueue from removing the finalizer of a Workload stored before this
rule) and a failure of the webhook itself. The pool comes from the catalog (the InstanceType
whose entrance label is the queue name); a queue the catalog does not know covers upstream's
"missing LocalQueue", "ClusterQueue without the chain mark" and "no InstanceType" alike. An
UPDATE is pinned only while the old Workload holds no quota: that is when Kueue rebuilds a
suspended job's PodSets, and a reserved Workload's PodSets are frozen.
"""

from __future__ import annotations

import logging
from typing import Any

from chain import fields
from chain.labels import is_fit_label_key, shared_fit_key, sliced_fit_key
from chain.manufacturers import ManufacturerTable
from chain.names import LOCAL_QUEUE_PREFIX
from chain.requests import FitDemand, fit_demand, read_containers
from hooks.admission.affinity import greater_than, with_requirements
from hooks.admission.pool_catalog import Catalog
from hooks.admissionreview import Review, allow, parse_review
from hooks.request import BadRequest, Obj

log = logging.getLogger("hooks.admission")


def _quota_reserved(workload: Obj | None) -> bool:
    status = (workload or {}).get("status")
    conditions = (status.get("conditions") if isinstance(status, dict) else None) or []
    return isinstance(conditions, list) and any(
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


def _pod_specs(workload: Obj) -> list[tuple[int, str, Any]]:
    """(number, path, Pod spec) of each PodSet's template; ValueError naming a missing or
    malformed field."""
    spec = fields.child(workload, "spec", "")
    out = []
    for number, (podset, where) in enumerate(fields.items(spec, "podSets", "spec")):
        template = fields.child(podset, "template", where, required=True)
        out.append((number, f"{where}.template.spec", template.get("spec")))
    return out


def pin_patch(workload: Obj, group: str, table: ManufacturerTable) -> list[Obj]:
    """The JSONPatch pinning every PodSet of `workload` to nodes whose fit labels show room."""
    patch = []
    for number, path, spec in _pod_specs(workload):
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
        fit_demand(read_containers(spec, path, table)) for _, path, spec in _pod_specs(workload)
    ]


def mutate_workloads(body: Any, catalog: Catalog, table: ManufacturerTable) -> Obj:
    review = parse_review(body)
    workload = review.object
    if review.operation not in ("CREATE", "UPDATE") or workload is None:
        return allow(review.uid)
    try:
        return _pinned(review, workload, catalog, table)
    except ValueError as err:
        if review.operation == "CREATE":
            raise BadRequest.at("$.request.object", err) from None
        log.warning("workload %s left unpinned: %s", review.uid, err)
        return allow(review.uid)
    except (KeyError, TypeError, AttributeError) as err:
        # failurePolicy Ignore would admit it unchanged anyway; say why here instead.
        log.warning("workload %s left unpinned: %s", review.uid, err)
        return allow(review.uid)


def _pinned(review: Review, workload: Obj, catalog: Catalog, table: ManufacturerTable) -> Obj:
    spec = workload.get("spec")
    queue = spec.get("queueName") if isinstance(spec, dict) else None
    if not isinstance(queue, str) or not queue.startswith(LOCAL_QUEUE_PREFIX):
        return allow(review.uid)  # not a chain queue's: none of this webhook's business
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
