"""`status.conditions` in the shape of Kubernetes' `metav1.Condition`, for every writer of a status.

A writer says what each condition is now (`Condition`); `merge` turns that into the list to write,
stamping `observedGeneration` with the object's `metadata.generation` and keeping a condition's
`lastTransitionTime` from the list the object already holds while its status stays the same. The
hooks are stateless, so the previous list comes from the object in the request; and "now" is
taken by the caller's shell and passed in, so an answer is a pure function of the request: a
settled object gets the very list it holds, and Metacontroller has nothing to write on a resync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"

Obj = dict[str, Any]

MESSAGE_LIMIT = 32768
"""`metav1.Condition`'s `maxLength` for a message (the CRDs keep it): a longer one is cut."""


@dataclass(frozen=True)
class Condition:
    """One condition as its writer sees it now (the time and generation come from `merge`)."""

    type: str
    status: str
    reason: str
    """CamelCase: a word a user looks up in docs/instances.md, docs/queues.md, docs/nodeagent.md."""
    message: str

    @classmethod
    def of(cls, type_: str, holds: bool, reason: str, message: str) -> Condition:
        return cls(type_, TRUE if holds else FALSE, reason, message)

    @property
    def holds(self) -> bool:
        return self.status == TRUE


def _previous(held: Any) -> dict[str, Mapping[str, Any]]:
    """The held conditions by type. The list is the writer's own, rewritten whole on every
    write: an entry it cannot read (not an object, no type) is dropped, and the condition it
    stood for takes a new transition time, rather than the status staying unwritable."""
    found: dict[str, Mapping[str, Any]] = {}
    for entry in held if isinstance(held, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
            found[entry["type"]] = entry
    return found


def merge(held: Any, wanted: Sequence[Condition], generation: int, now: str) -> list[Obj]:
    """The `status.conditions` to write: `wanted` in its order, each with `observedGeneration`
    set to `generation` and `lastTransitionTime` kept from `held` (the list the object holds now)
    when its status there is the same, `now` otherwise. Types not in `wanted` are left out."""
    before = _previous(held)
    merged = []
    for condition in wanted:
        old = before.get(condition.type) or {}
        since = old.get("lastTransitionTime")
        if old.get("status") != condition.status or not isinstance(since, str) or not since:
            since = now
        merged.append(
            {
                "type": condition.type,
                "status": condition.status,
                "observedGeneration": generation,
                "lastTransitionTime": since,
                "reason": condition.reason,
                "message": condition.message[:MESSAGE_LIMIT],
            }
        )
    return merged


def generation_of(obj: Mapping[str, Any]) -> int:
    """The object's `metadata.generation` (0 where the API server has not set one)."""
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def find(held: Any, type_: str) -> Mapping[str, Any] | None:
    """The condition of `type_` in a held `status.conditions` list, or None."""
    return _previous(held).get(type_)
