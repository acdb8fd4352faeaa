"""The AdmissionReview v1 envelope: reading a review and answering it.

A webhook answers 200 with `response.allowed`; a refusal carries a `status` whose message is
what `kubectl` prints after "denied the request:", so it must say what to change. A mutation is
a base64 JSONPatch. A review the webhook cannot read is a 400 naming the field (the API server
then applies the webhook's failurePolicy).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from hooks.shell import Obj, validate

ADMISSION_API = "admission.k8s.io/v1"

REVIEW_SCHEMA: Obj = {
    "type": "object",
    "required": ["apiVersion", "kind", "request"],
    "properties": {
        "apiVersion": {"const": ADMISSION_API},
        "kind": {"const": "AdmissionReview"},
        "request": {
            "type": "object",
            "required": ["uid", "operation"],
            "properties": {
                "uid": {"type": "string", "minLength": 1},
                "operation": {"enum": ["CREATE", "UPDATE", "DELETE", "CONNECT"]},
                "namespace": {"type": "string"},
                "object": {"type": ["object", "null"]},
                "oldObject": {"type": ["object", "null"]},
            },
        },
    },
}


@dataclass(frozen=True)
class Review:
    uid: str
    operation: str
    namespace: str
    object: Obj | None
    old_object: Obj | None


def parse_review(body: Any) -> Review:
    """The request of an AdmissionReview; BadRequest naming the field when it is not one."""
    request = validate(body, REVIEW_SCHEMA)["request"]
    return Review(
        uid=request["uid"],
        operation=request["operation"],
        namespace=request.get("namespace") or "",
        object=request.get("object"),
        old_object=request.get("oldObject"),
    )


class Answer(dict[str, Any]):
    """An AdmissionReview answer that also says which rules refused (`rules`) for the webhook's
    metrics; it encodes as the plain review (the rules are not part of the wire format)."""

    rules: tuple[str, ...] = ()


def _answer(response: Obj, rules: tuple[str, ...] = ()) -> Obj:
    answer = Answer(apiVersion=ADMISSION_API, kind="AdmissionReview", response=response)
    answer.rules = rules
    return answer


def allow(uid: str, patch: list[Obj] | None = None) -> Obj:
    """Admit, applying `patch` (JSONPatch operations) when there is one."""
    response: Obj = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return _answer(response)


def deny(
    uid: str, message: str, retryable: bool = False, rules: tuple[str, ...] = ("other",)
) -> Obj:
    """Refuse, for `rules`. A refusal that goes away by itself (the pool has not reported yet)
    answers 503, so clients that retry on server errors retry it; anything the user must change
    is 422."""
    code, reason = (503, "ServiceUnavailable") if retryable else (422, "Invalid")
    status = {"code": code, "reason": reason, "message": message}
    return _answer({"uid": uid, "allowed": False, "status": status}, rules)
