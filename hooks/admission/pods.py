"""The Pod webhook (`POST /mutate-pods`): request rules, defaults and fold, shared card-count pin.

Registered for Pods CREATE with the objectSelector `kueue.x-k8s.io/queue-name Exists` and
failurePolicy Fail, under a configuration name that sorts before Kueue's, so the fold lands
before Kueue hashes the Pod's resources. One mutating webhook does what upstream splits into
defaulting and validation: the rules, then the fold (see `chain.requests`), then the pin.

The shared card-count pin: a `<base>.shared: N` request (N >= 2 in one container) must spread
over N distinct cards of one node, which a node with fewer cards can never give, yet Kueue's
topology-aware scheduler counts shared tokens (10 per card) and would place it there. Requiring
`acceleratable.feature.gpustack.ai/<group>.count Gt N-1` keeps it off such nodes; the group
comes from the pool catalog, and without it the Pod is refused rather than left unpinned.
"""

from __future__ import annotations

import copy
from typing import Any

from chain.labels import KUEUE_QUEUE_NAME, accelerator_feature_key, count_key
from chain.manufacturers import ManufacturerTable
from chain.requests import (
    Container,
    fit_demand,
    fold,
    needs_pool,
    read_containers,
    request_problems,
)
from chain.validation import is_qualified_name
from hooks.admission.affinity import greater_than, with_requirements
from hooks.admission.catalog import Catalog
from hooks.admissionreview import allow, deny, parse_review
from hooks.shell import BadRequest, Obj

_OBJECT = "$.request.object"


def _bad(err: ValueError) -> BadRequest:
    field, _, message = str(err).partition(": ")
    return BadRequest(f"{_OBJECT}.{field}", message)


def _resources_patch(pod: Obj, container: Container, writes: dict[str, int]) -> Obj:
    raw = pod["spec"][container.list_name][container.index]
    resources = copy.deepcopy(raw.get("resources") or {})
    for section in ("requests", "limits"):
        values = resources.setdefault(section, {})
        values.update((key, str(value)) for key, value in writes.items())
    pointer = f"/spec/{container.list_name}/{container.index}/resources"
    return {"op": "add", "path": pointer, "value": resources}


def mutate_pods(body: Any, catalog: Catalog, table: ManufacturerTable) -> Obj:
    review = parse_review(body)
    pod = review.object
    if review.operation != "CREATE" or pod is None:
        return allow(review.uid)
    try:
        containers = read_containers(pod.get("spec"), "spec", table)
    except ValueError as err:
        raise _bad(err) from None
    problems = request_problems(containers, table)
    if problems:
        return deny(review.uid, "; ".join(problems))

    labels = (pod.get("metadata") or {}).get("labels") or {}
    queue = str(labels.get(KUEUE_QUEUE_NAME, ""))
    shared = fit_demand(containers).shared_cards
    pool = catalog.pool(queue) if needs_pool(containers) or shared >= 2 else None
    folded = fold(containers, pool, queue)
    if folded.problems:
        return deny(review.uid, "; ".join(folded.problems), retryable=folded.retryable)
    patch = [
        _resources_patch(pod, containers[position], writes)
        for position, writes in sorted(folded.writes.items())
    ]
    if shared >= 2:
        group = pool.accelerator_group if pool is not None else ""
        key = count_key(accelerator_feature_key(group))
        if not group or not is_qualified_name(key):
            source = (
                f'the InstanceType "{pool.instance_type}" names no accelerator group'
                if pool is not None
                else f'no InstanceType fronts the queue "{queue}" as far as the webhook knows'
            )
            return deny(
                review.uid,
                f"spec: Internal error: a shared request of {shared} cards must be pinned to "
                f"nodes with at least {shared} cards, but {source}; retry shortly",
                retryable=True,
            )
        try:
            affinity = with_requirements(
                pod["spec"].get("affinity"), [greater_than(key, shared - 1)], "spec.affinity"
            )
        except ValueError as err:
            raise _bad(err) from None
        if affinity is not None:
            patch.append({"op": "add", "path": "/spec/affinity", "value": affinity})
    return allow(review.uid, patch)
