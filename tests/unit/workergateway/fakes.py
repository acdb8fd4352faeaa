"""An API server in memory for the gateway's tests: objects by kind and name, server-side apply
as the gateway uses it (one field manager that owns everything it sends, so an apply replaces
what it sent before), writes that can be made to fail or to be lost, and watchers told of every
change as a watch event would tell them."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubeapi import KubeError

Obj = dict[str, Any]


class MemoryCluster:
    def __init__(self, *objs: Obj) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.refusing: set[str] = set()
        """Names whose next apply or delete is answered 409 (then no longer)."""
        self.calls: list[tuple[str, str]] = []
        self.version = 0
        self.watchers: list[Callable[[str, Obj], None]] = []
        """Told (event type, object) of every change, on the writer's thread."""
        for obj in objs:
            self.put(obj)

    @staticmethod
    def _key(kind: str, name: str, namespace: str | None) -> tuple[str, str, str]:
        return kind, namespace or "", name

    def put(self, obj: Obj) -> None:
        meta = obj["metadata"]
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        key = self._key(obj["kind"], meta["name"], meta.get("namespace"))
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = stored
        self._tell(kind, stored)

    def _tell(self, kind: str, obj: Obj) -> None:
        for watcher in list(self.watchers):
            watcher(kind, copy.deepcopy(obj))

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        gone = self.objects.pop(self._key(kind, name, namespace), None)
        if gone is not None:
            self._tell("DELETED", gone)

    def of_kind(self, kind: str) -> dict[str, Obj]:
        return {key[2]: obj for key, obj in self.objects.items() if key[0] == kind}

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        found = self.objects.get(self._key(kind, name, namespace))
        return copy.deepcopy(found) if found is not None else None

    def list(self, api_version: str, kind: str) -> list[Obj]:
        self.calls.append(("list", kind))
        return [
            copy.deepcopy(obj)
            for key, obj in sorted(self.objects.items())
            if key[0] == kind and obj.get("apiVersion") == api_version
        ]

    def _refuse(self, name: str) -> None:
        if name in self.refusing:
            self.refusing.discard(name)
            raise KubeError(409, f"{name}: the object has been modified")

    def apply(self, obj: Obj, manager: str, subresource: str | None = None) -> Obj:
        """As on a kind with a status subresource: an apply of the object keeps the status it
        holds, an apply of `status` changes nothing else (and finds the object, or is a 404)."""
        meta = obj["metadata"]
        name = meta["name"]
        self.calls.append(("apply/status" if subresource == "status" else "apply", name))
        self._refuse(name)
        key = self._key(obj["kind"], name, meta.get("namespace"))
        held = self.objects.get(key)
        if subresource == "status":
            if held is None:
                raise KubeError(404, f"{name} not found")
            stored = {**held, "status": copy.deepcopy(obj["status"])}
        else:
            stored = copy.deepcopy(obj)
            if held is not None and "status" in held:
                stored["status"] = held["status"]
        self.put(stored)
        return obj

    def delete(self, api_version: str, kind: str, name: str) -> None:
        self.calls.append(("delete", name))
        self._refuse(name)
        self.remove(kind, name)


class Recorded:
    """A `Reporter` that keeps the Events: (kind/name regarded, type, reason, note)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(
        self, regarding: Mapping[str, Any], type_: str, reason: str, note: str, action: str
    ) -> None:
        what = f"{regarding['kind']}/{regarding['metadata']['name']}"
        self.events.append((what, type_, reason, note))


class Clock:
    """A clock of the test's own and a doorbell rung at set times on it, for the gateway's loop:
    `wake` moves the clock to the next ring or to its timeout, whichever comes first, and
    `stopping` is set once the clock reaches `end`. Nothing sleeps."""

    def __init__(self, rings: list[float], end: float, stopping: threading.Event) -> None:
        self.now = 0.0
        self.rings = sorted(rings)
        self.end = end
        self.stopping = stopping

    def count(self) -> int:
        return sum(1 for at in self.rings if at <= self.now)

    def advance(self, to: float) -> None:
        self.now = to
        if self.now >= self.end:
            self.stopping.set()

    def wake(self, seen: int, timeout: float) -> int:
        if self.count() == seen:
            later = [at for at in self.rings if at > self.now]
            self.advance(min([self.now + timeout, *later[:1]]))
        return self.count()
