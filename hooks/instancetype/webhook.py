"""InstanceType admission: defaulting (`/mutate`) and validation (`/validate`), AdmissionReview v1.

Defaulting: an empty `generalGroup` becomes `generic`; the pool schedule labels are stamped (stale
`general.`/`acceleratable.` feature labels pruned) together with
`schedule.gpustack.ai/queue-entrance`, the name of the pool's LocalQueue in every namespace. An
accelerated type without an accelerator group gets no labels (validation refuses it anyway).

The webhook holds no Kubernetes credentials: it reads the settings singleton from the catalog
file the admission webhooks read (`hooks.catalog_file`, the mounted ConfigMap). The schedule
labels follow the `instance-type-aware-cpu-manufacturer` setting, as upstream's do: only when it
is on does a CPU `generalGroup` stamp its `general.feature.gpustack.ai/<key>` label, exactly
what the pools hook does for the types it derives. Without a catalog file the defaults apply.

Validation on CREATE checks the complete shape; on UPDATE only that the spec did not change
except `displayName` (rename) and `inactive` (in or out of service), as the seeds say; a digest
of them also listed `description`, which the seeds freeze like the rest. The create-time shape is
not re-checked, so a type created under older rules stays editable, also while the object is
being deleted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from chain.fields import shown
from chain.labels import ACCELERATABLE_PREFIX, GENERAL_PREFIX, QUEUE_ENTRANCE
from chain.names import GENERIC, local_queue_name
from chain.pools import pool_schedule_labels
from chain.settings import Settings
from hooks.admissionreview import allow, deny, parse_review
from hooks.request import BadRequest, Obj

MUTABLE_SPEC = ("displayName", "inactive")
_POSITIVE_INT = re.compile(r"[1-9][0-9]*")
_GIBIBYTES = re.compile(r"[1-9][0-9]*Gi")
_INT32_MAX = 2**31 - 1


def _refuse(uid: str, rule: str, message: str) -> Obj:
    return deny(uid, message, rules=(rule,))


def _spec(obj: Obj | None) -> dict[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, dict) else {}


def desired_labels(
    name: str, spec: Mapping[str, Any], current: Mapping[str, str], aware: bool
) -> dict[str, str]:
    """The labels after defaulting: schedule labels and the entrance, stale feature keys pruned.
    `aware` is the `instance-type-aware-cpu-manufacturer` setting: only then does a CPU
    `generalGroup` stamp its `general.feature.gpustack.ai/<key>` label."""
    general = spec.get("generalGroup") or GENERIC
    accelerator = spec.get("acceleratorGroup") or ""
    acceleratable = bool(spec.get("acceleratable"))
    if acceleratable and not accelerator:
        return dict(current)
    schedule = pool_schedule_labels(
        acceleratable=acceleratable,
        aware=aware,
        general_group=general,
        accelerator_group=accelerator,
        os=str(spec.get("os") or ""),
        arch=str(spec.get("arch") or ""),
    )
    kept = {
        k: v
        for k, v in current.items()
        if not k.startswith((GENERAL_PREFIX, ACCELERATABLE_PREFIX)) or k in schedule
    }
    return {**kept, **schedule, QUEUE_ENTRANCE: local_queue_name(name)}


# The fields defaulting reads, which must be strings. Mutation runs before the API server checks
# the CRD's schema, so a wrong type is refused here, naming the field, rather than crashing.
_STRING_FIELDS = ("generalGroup", "acceleratorGroup", "os", "arch")


def _type_problem(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    for key in _STRING_FIELDS:
        value = spec.get(key)
        if value is not None and not isinstance(value, str):
            return f"spec.{key}: expected a string, got {type(value).__name__}"
    labels = meta.get("labels")
    if labels is not None and not (
        isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
    ):
        return "metadata.labels: expected a map of strings"
    return None


def mutate(body: Any, settings: Settings | None = None) -> Obj:
    review = parse_review(body)
    obj = review.object
    if review.operation not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return allow(review.uid)
    raw_meta = obj.get("metadata")
    meta = raw_meta if isinstance(raw_meta, dict) else {}
    name = str(meta.get("name") or "")
    spec = _spec(obj)
    problem = _type_problem(meta, spec)
    if problem is not None:
        return _refuse(review.uid, "instancetype-shape", problem)
    patch: list[Obj] = []
    # Only on CREATE: an UPDATE must not change the spec, and validation would refuse it.
    if review.operation == "CREATE" and not spec.get("generalGroup"):
        op = "replace" if "generalGroup" in spec else "add"
        if "spec" not in obj:
            patch.append({"op": "add", "path": "/spec", "value": {}})
        patch.append({"op": op, "path": "/spec/generalGroup", "value": GENERIC})
        spec = {**spec, "generalGroup": GENERIC}
    current = meta.get("labels") or {}
    aware = (settings or Settings()).instance_type_aware_cpu_manufacturer
    labels = desired_labels(name, spec, current, aware)
    if labels != current:
        op = "replace" if "labels" in meta else "add"
        patch.append({"op": op, "path": "/metadata/labels", "value": labels})
    return allow(review.uid, patch)


def _unit_problems(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    acceleratable = bool(spec.get("acceleratable"))
    if acceleratable and not spec.get("acceleratorGroup"):
        problems.append("spec.acceleratorGroup: required when acceleratable is true")
    for key in ("os", "arch"):
        if not spec.get(key):
            problems.append(f"spec.{key}: required (e.g. linux / amd64)")
    raw_units = spec.get("unitResources")
    units: Mapping[str, Any] = raw_units if isinstance(raw_units, dict) else {}
    cpu = str(units.get("cpu", ""))
    if acceleratable:
        # The length first: `int` of thousands of digits fails (Python's limit) before comparing.
        if (
            not _POSITIVE_INT.fullmatch(cpu)
            or len(cpu) > len(str(_INT32_MAX))
            or int(cpu) > _INT32_MAX
        ):
            problems.append(
                f"spec.unitResources.cpu: {shown(cpu)!r} must be a positive whole number of "
                'cores without a unit suffix (e.g. "8")'
            )
    elif cpu != "1":
        problems.append(
            f"spec.unitResources.cpu: {shown(cpu)!r} must be 1 when acceleratable is false"
        )
    for path, value in (
        ("spec.unitResources.ram", units.get("ram", "")),
        ("spec.localStorage", spec.get("localStorage", "")),
    ):
        if not _GIBIBYTES.fullmatch(str(value)):
            quoted = shown(repr(value))
            problems.append(f'{path}: {quoted} must be a positive whole number of Gi (e.g. "32Gi")')
    return problems


def validate_review(body: Any) -> Obj:
    review = parse_review(body)
    uid, operation = review.uid, review.operation
    obj, old = review.object, review.old_object
    if operation == "CREATE":
        if not isinstance(obj, dict):
            raise BadRequest("$.request.object", "a CREATE review must carry the object")
        problems = _unit_problems(_spec(obj))
        if problems:
            return _refuse(
                uid, "instancetype-invalid", "InstanceType is invalid: " + "; ".join(problems)
            )
        return allow(uid)
    if operation == "UPDATE":
        if not isinstance(obj, dict) or not isinstance(old, dict):
            raise BadRequest("$.request", "an UPDATE review must carry object and oldObject")
        new_spec, old_spec = _spec(obj), _spec(old)
        changed = sorted(
            key
            for key in set(new_spec) | set(old_spec)
            if key not in MUTABLE_SPEC and new_spec.get(key) != old_spec.get(key)
        )
        if changed:
            return _refuse(
                uid,
                "instancetype-immutable",
                "InstanceType spec is immutable except displayName and inactive; "
                f"changed: {', '.join('spec.' + k for k in changed)}. "
                "Create a new InstanceType instead.",
            )
    return allow(uid)
