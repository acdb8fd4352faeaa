"""The Pod webhook (`POST /mutate-pods`): request rules, defaults and fold, shared card-count pin;
and the same on a batch/v1 Job's Pod template (`POST /mutate-jobs`).

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
    rules_of,
)
from chain.validation import is_qualified_name
from hooks.admission.affinity import greater_than, with_requirements
from hooks.admission.pool_catalog import Catalog
from hooks.admissionreview import allow, deny, parse_review
from hooks.request import BadRequest, Obj

_OBJECT = "$.request.object"


def _bad(err: ValueError) -> BadRequest:
    field, _, message = str(err).partition(": ")
    return BadRequest(f"{_OBJECT}.{field}", message)


def _resources_patch(spec: Obj, pointer: str, container: Container, writes: dict[str, int]) -> Obj:
    raw = spec[container.list_name][container.index]
    resources = copy.deepcopy(raw.get("resources") or {})
    for section in ("requests", "limits"):
        values = resources.setdefault(section, {})
        values.update((key, str(value)) for key, value in writes.items())
    return {
        "op": "add",
        "path": f"{pointer}/{container.list_name}/{container.index}/resources",
        "value": resources,
    }


def mutate_pods(body: Any, catalog: Catalog, table: ManufacturerTable) -> Obj:
    return _mutate_created(body, "spec", catalog, table)


def mutate_jobs(body: Any, catalog: Catalog, table: ManufacturerTable) -> Obj:
    """`POST /mutate-jobs`: the same rules, fold and pin on a batch/v1 Job's Pod template.

    Kueue builds a Job's Workload from its template, before any Pod exists: a slice asked by
    memory alone would reach Kueue with no units, hence no credits and no flavor ("no TAS flavor
    assigned"), and the Job would wait forever. Folding the template on CREATE gives Kueue the
    units; the Pods the Job makes are folded again by the Pod webhook to the same values."""
    return _mutate_created(body, "spec.template.spec", catalog, table)


def _mutate_created(body: Any, field: str, catalog: Catalog, table: ManufacturerTable) -> Obj:
    """A created object (Pod or Job) whose Pod spec lies at `field`, entering the queue its
    `kueue.x-k8s.io/queue-name` label names."""
    review = parse_review(body)
    obj = review.object
    if review.operation != "CREATE" or obj is None:
        return allow(review.uid)
    meta = obj.get("metadata") or {}
    labels = (meta.get("labels") or {}) if isinstance(meta, dict) else None
    if not isinstance(labels, dict):
        raise BadRequest(f"{_OBJECT}.metadata", "expected an object with a map of labels")
    queue = str(labels.get(KUEUE_QUEUE_NAME, ""))
    spec: Any = obj
    for step in field.split("."):
        spec = (spec or {}).get(step) if isinstance(spec, dict) else None
    return admit_pod_spec(review.uid, spec, field, queue, catalog, table)


def admit_pod_spec(
    uid: str, spec: Obj | None, field: str, queue: str, catalog: Catalog, table: ManufacturerTable
) -> Obj:
    """The rules, the fold and the shared pin on one Pod spec at `field` (its JSON pointer is
    the same path), for a Pod that enters `queue`."""
    pointer = "/" + field.replace(".", "/")
    try:
        containers = read_containers(spec, field, table)
    except ValueError as err:
        raise _bad(err) from None
    problems = request_problems(containers, table)
    if problems:
        return deny(uid, "; ".join(problems), rules=rules_of(problems))

    shared = fit_demand(containers).shared_cards
    pool = catalog.pool(queue) if needs_pool(containers) or shared >= 2 else None
    folded = fold(containers, pool, queue)
    if folded.problems:
        return deny(
            uid,
            "; ".join(folded.problems),
            retryable=folded.retryable,
            rules=rules_of(folded.problems),
        )
    assert spec is not None  # read_containers refused anything else
    patch = [
        _resources_patch(spec, pointer, containers[position], writes)
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
                uid,
                f"{field}: Internal error: a shared request of {shared} cards must be pinned to "
                f"nodes with at least {shared} cards, but {source}; retry shortly",
                retryable=True,
                rules=("shared-pin",),
            )
        try:
            affinity = with_requirements(
                spec.get("affinity"), [greater_than(key, shared - 1)], f"{field}.affinity"
            )
        except ValueError as err:
            raise _bad(err) from None
        if affinity is not None:
            patch.append({"op": "add", "path": f"{pointer}/affinity", "value": affinity})
    return allow(uid, patch)
