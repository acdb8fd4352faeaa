"""An API server in memory for the gateway's tests: objects by kind and name, server-side apply
as the gateway uses it (one field manager that owns everything it sends, so an apply replaces
what it sent before), and writes that can be made to fail or to be lost."""

from __future__ import annotations

import copy
from collections.abc import Mapping
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
        self.objects[self._key(obj["kind"], meta["name"], meta.get("namespace"))] = stored

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.objects.pop(self._key(kind, name, namespace), None)

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
