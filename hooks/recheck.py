"""The write-recheck policy: a hook whose answer still asks Metacontroller to change the parent
asks for a resync within seconds, so a parent write Metacontroller lost is tried again
(docs/architecture.md, "A lost parent write is retried within seconds, whatever the
Metacontroller version")."""

from __future__ import annotations

from hooks.request import Obj

WRITE_RECHECK_SECONDS = 5.0
"""How soon a parent is synced again while the answer asks to change it. Metacontroller v4
gives up on a 409 from the parent's update (labels, annotations, status) without an error or a
requeue, and with `ignoreStatusChanges` it may hear of nothing else for a whole resync period;
the resync a hook asks for is queued before those writes, so a lost one is tried again within
seconds. Once the parent shows what the hook wants, no recheck is asked for."""


def parent_write_outstanding(parent: Obj, answer: Obj, composite: bool = False) -> bool:
    """Does the answer ask Metacontroller to change the parent (a label, an annotation, or a
    status that differs from what the request shows)? A null value means "remove".

    A CompositeController (`composite`) writes the parent's `metadata.generation` into the
    status it is given as `observedGeneration`, and the CRD keeps it: the status it will write
    is compared, or a settled parent would look outstanding on every sync. (An answer without
    a status, a customize answer among them, claims no status write.)"""
    meta = parent.get("metadata") or {}
    for field_name in ("labels", "annotations"):
        desired = answer.get(field_name) or {}
        have = meta.get(field_name) or {}
        if any(have.get(key) != value for key, value in desired.items()):
            return True
    status = answer.get("status")
    if composite and isinstance(status, dict):
        status = {**status, "observedGeneration": meta.get("generation", 0)}
    return status is not None and status != parent.get("status")


def with_write_recheck(body: Obj, answer: Obj) -> Obj:
    """The answer, with a resync within WRITE_RECHECK_SECONDS while a parent write is
    outstanding (a longer resync the hook asked for is shortened, a shorter one kept)."""
    # A decorator's request holds its parent as `object`, a composite's as `parent`.
    composite = body.get("object") is None
    parent = body.get("parent") if composite else body.get("object")
    if not isinstance(parent, dict) or not parent_write_outstanding(parent, answer, composite):
        return answer
    asked = float(answer.get("resyncAfterSeconds") or 0)
    recheck = min(asked, WRITE_RECHECK_SECONDS) if asked > 0 else WRITE_RECHECK_SECONDS
    return {**answer, "resyncAfterSeconds": recheck}
