"""The Instance webhooks: defaulting (`/mutate-instances`) and validation (`/validate-instances`),
on CREATE and UPDATE, with the InstanceType's facts from the pool catalog (no credentials).

- Defaulting fills the resources an Instance leaves out from its InstanceType's unit spec
  (`chain.instances.instance_defaults`).
- Validation refuses what the pool cannot serve, each with the message a user can act on
  (`chain.instances.instance_problems`: the shape, the profile against the offered set, slices
  on a pool without them, cards beyond the pool's, RAM beyond unit RAM x cards, local storage
  beyond the type's, CPU beyond a CPU-only pool's capacity).
- The facts come from the instance catalog (`GPUSTACK_INSTANCE_CATALOG`: the ConfigMap
  `gpustack-instance-catalog` the catalog decorator writes, one compact row per InstanceType); an
  InstanceType it does not show yet answers 503 (retry shortly): it follows the InstanceTypes
  within moments.
- The deletion guard (the seed's): an UPDATE of an Instance being deleted is neither defaulted
  nor validated, so an InstanceType deleted first never leaves its Instances undeletable.
- An UPDATE that leaves the InstanceType and the resources as they were (a stop, a start, a new
  image) is not checked again: it needs no facts, so it never waits for a catalog a replica has
  not been shown yet (the kubelet refreshes a mounted ConfigMap within a minute or so), and a
  pool that shrank since does not keep a running Instance from being stopped and started.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chain.fields import shown
from chain.instances import (
    InstanceFacts,
    InstanceSpec,
    instance_defaults,
    instance_problems,
    parse_instance_catalog,
)
from chain.manufacturers import ManufacturerTable
from chain.requests import INT32_MAX, rules_of
from hooks.admissionreview import Review, allow, deny, parse_review
from hooks.catalog_file import catalog_source
from hooks.request import BadRequest, Obj

INSTANCE_CATALOG_ENV = "GPUSTACK_INSTANCE_CATALOG"
Types = Mapping[str, InstanceFacts]
Decide = Callable[[Review, InstanceSpec, InstanceFacts], Obj]


def instance_catalog_from_env(env: Mapping[str, str] | None = None) -> Callable[[], Types]:
    """The InstanceTypes' facts from the file `GPUSTACK_INSTANCE_CATALOG` names (the ConfigMap
    `gpustack-instance-catalog`, mounted); none while there is no such file."""
    empty: Types = {}
    return catalog_source(parse_instance_catalog, empty, env, INSTANCE_CATALOG_ENV)


def _reviewed(body: Any) -> tuple[Review, InstanceSpec] | None:
    """The review and its Instance's spec; None when there is nothing to check (another
    operation, or an Instance being deleted)."""
    review = parse_review(body)
    obj = review.object
    if review.operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if review.operation == "UPDATE" and (
        (isinstance(meta, dict) and meta.get("deletionTimestamp"))
        or _pool_facing(obj) == _pool_facing(review.old_object)
    ):
        return None
    try:
        _check_cards(obj.get("spec"))
        return review, InstanceSpec.parse(obj.get("spec"), "spec")
    except ValueError as err:
        raise BadRequest.at("$.request.object", err) from None


def _pool_facing(obj: object) -> tuple[object, object]:
    """What of an Instance its pool has to serve: the type it names and what it asks of it."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return None, None
    return spec.get("instanceType"), spec.get("resources")


_CARDS = "spec.resources.accelerator"


def _check_cards(spec: object) -> None:
    """`spec.resources.accelerator` is a whole number of cards no pool's count exceeds, read
    before `InstanceSpec.parse`: its `str.isdigit` admits `²`, which `int` cannot read, and a
    count of thousands of digits would be multiplied into the defaults' CPU and RAM."""
    resources = spec.get("resources") if isinstance(spec, dict) else None
    count = resources.get("accelerator") if isinstance(resources, dict) else None
    if not isinstance(count, str) or not count:
        return  # absent, or a type `InstanceSpec.parse` names
    if not (count.isascii() and count.isdigit()):
        raise ValueError(
            f'{_CARDS}: Invalid value: "{shown(count)}": must be a whole number of cards (e.g. "2")'
        )
    if len(count) > len(str(INT32_MAX)) or int(count) > INT32_MAX:
        raise ValueError(
            f'{_CARDS}: Invalid value: "{shown(count)}": asks for more than {INT32_MAX} cards, '
            "more than any pool has"
        )


def _unknown(review: Review, name: str) -> Obj:
    return deny(
        review.uid,
        f'spec.instanceType: the InstanceType "{name}" is not known to the webhook yet (it '
        "learns InstanceTypes from the pool catalog within moments); retry shortly, or check "
        "the name with `kubectl get instancetypes`",
        retryable=True,
        rules=("instance-type-unknown",),
    )


def _answer(body: Any, types: Types, decide: Decide) -> Obj:
    """Allowed when there is nothing to check, refused (retry) when the type is unknown, else
    what `decide` says about the Instance and its type's facts."""
    found = _reviewed(body)
    if found is None:
        return allow(parse_review(body).uid)
    review, spec = found
    facts = types.get(spec.instance_type)
    if facts is None:
        return _unknown(review, spec.instance_type)
    try:
        return decide(review, spec, facts)
    except ValueError as err:
        raise BadRequest.at("$.request.object", err) from None


def mutate_instances(body: Any, types: Types, table: ManufacturerTable) -> Obj:
    def defaulted(review: Review, spec: InstanceSpec, facts: InstanceFacts) -> Obj:
        defaults = instance_defaults(spec, facts)
        if not defaults:
            return allow(review.uid)
        if not isinstance((review.object or {}).get("spec", {}).get("resources"), dict):
            return allow(review.uid, [{"op": "add", "path": "/spec/resources", "value": defaults}])
        patch = [
            {"op": "add", "path": f"/spec/resources/{key}", "value": value}
            for key, value in sorted(defaults.items())
        ]
        return allow(review.uid, patch)

    return _answer(body, types, defaulted)


def validate_instances(body: Any, types: Types, table: ManufacturerTable) -> Obj:
    def validated(review: Review, spec: InstanceSpec, facts: InstanceFacts) -> Obj:
        problems = instance_problems(spec, facts, table)
        if problems:
            return deny(review.uid, "; ".join(problems), rules=rules_of(problems))
        return allow(review.uid)

    return _answer(body, types, validated)
