"""One merge patch a keeper decided, and why: shared by the lifecycle keeper's rules."""

from __future__ import annotations

from dataclasses import dataclass

from kubeapi import Obj


@dataclass(frozen=True)
class Patch:
    """A merge patch to one object; `patch` carries the resourceVersion it was decided from, so
    a decision made on a stale read fails with 409 instead of undoing a newer change."""

    api_version: str
    kind: str
    name: str
    patch: Obj
    why: str
    namespace: str | None = None


def version_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
