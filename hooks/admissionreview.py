"""The AdmissionReview v1 envelope: reading a review and answering it.

A webhook answers 200 with `response.allowed`; a refusal carries a `status` whose message is
what `kubectl` prints after "denied the request:", so it must say what to change. A mutation is
a base64 JSONPatch.

Whatever a review holds, once its `request.uid` can be read the answer is a 200 AdmissionReview:
a value the webhook cannot read (a wrong type, a missing field, a quantity out of every range) is
a refusal naming the field (`unreadable`), never an HTTP error, because the API server reports any
non-200 as its own failure ("failed calling webhook ... for an unknown reason") and drops the
message. Only a body that is no AdmissionReview at all (not JSON, no `request.uid`) gets a 4xx.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from hooks.request import Obj, validate

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


def _refusal(uid: str, code: int, reason: str, message: str, rules: tuple[str, ...]) -> Obj:
    status = {"code": code, "reason": reason, "message": message}
    return _answer({"uid": uid, "allowed": False, "status": status}, rules)


def deny(
    uid: str, message: str, retryable: bool = False, rules: tuple[str, ...] = ("other",)
) -> Obj:
    """Refuse, for `rules`. A refusal that goes away by itself (the pool has not reported yet)
    answers 503, so clients that retry on server errors retry it; anything the user must change
    is 422."""
    code, reason = (503, "ServiceUnavailable") if retryable else (422, "Invalid")
    return _refusal(uid, code, reason, message, rules)


def review_uid(body: Any) -> str | None:
    """The uid of a body shaped like an AdmissionReview at all (an object whose `request` holds a
    non-empty string `uid`), else None. A refusal must echo the uid, so without one there is
    nothing to answer but an HTTP error."""
    request = body.get("request") if isinstance(body, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and uid else None


_OBJECT = "$.request.object."
# A refusal's message is printed by kubectl and stored in events; a value quoted from the request
# (a jsonschema message quotes the whole instance) must not make it megabytes long.
MESSAGE_LIMIT = 2048


def unreadable(uid: str, field: str, message: str, rule: str = "unreadable") -> Obj:
    """Refuse a review the webhook cannot read, naming the field (a JSON path into the review,
    as `BadRequest` names it). A field of the object is named as the user wrote it
    (`spec.containers[0]...`) and refused 422 Invalid, like any value the user must change; so is
    a domain error whose message names its own field (`field` empty); a field of the review
    itself (`request.operation`, or `$`: the review as a whole) is refused 400 BadRequest."""
    if field.startswith(_OBJECT) or not field:
        where, code, reason = field[len(_OBJECT) :], 422, "Invalid"
    else:
        where, code, reason = field.removeprefix("$.").removeprefix("$"), 400, "BadRequest"
    text = f"{where}: {message}" if where else message
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + "... (cut)"
    return _refusal(uid, code, reason, text, (rule,))


def failed(uid: str, err: Exception) -> Obj:
    """Refuse a review the webhook failed on unexpectedly (a bug, logged with its traceback):
    still a 200 AdmissionReview, so the user reads what happened instead of the API server's
    "failed calling webhook"."""
    message = (
        f"Internal error: the webhook failed reading this object ({type(err).__name__}: {err}); "
        "report it together with the object"
    )
    return _refusal(uid, 500, "InternalError", message[:MESSAGE_LIMIT], ("internal-error",))
