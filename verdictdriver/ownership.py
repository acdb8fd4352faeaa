"""The ownership rules: the settings singleton can be deleted and made again without touching
pools, queues or running work.

Metacontroller makes a decorator's attachments the parent's dependents (a controller reference),
so deleting `settings/default` would let the garbage collector delete every pool's
ResourceFlavor, the Topology, every derived InstanceType and the webhooks' catalog: every queue
would drain and every Workload be evicted. Upstream, an InstanceType's lifecycle is its own
(never deleted for lack of flavors), and a pool lives as long as its nodes.

Metacontroller treats an object as a decorator's child only while it carries both a controller
reference to the parent and the decorator's annotation; it never adopts. So the keeper moves the
references, and Metacontroller needs nothing new:

- **release**: while the singleton is being deleted (the pools decorator's finalize hook holds it
  until nothing is attached), or once it is gone, every object controlled by it loses that
  reference (the decorator's annotation stays, to recognise the object later);
- **adopt**: while a live singleton exists, a ResourceFlavor, the Topology or the catalog
  ConfigMap that carries a chain decorator's annotation and no controller gets a controller
  reference to it, so that decorator updates it in place again. InstanceTypes are never adopted:
  a released type stays its own (the pools hook relates every InstanceType and creates none
  whose name is taken).
"""

from __future__ import annotations

from collections.abc import Iterable

from chain.apis import (
    CATALOG_CONTROLLER,
    CHAIN_API,
    DECORATOR_ANNOTATION,
    POOLS_CONTROLLER,
    RESOURCE_FLAVOR,
    SETTINGS,
    TOPOLOGY,
)
from kubeapi import Obj
from verdictdriver.patch import Patch, version_of

CONFIG_MAP = "ConfigMap"
ADOPTED_BY = {
    RESOURCE_FLAVOR: POOLS_CONTROLLER,
    TOPOLOGY: POOLS_CONTROLLER,
    CONFIG_MAP: CATALOG_CONTROLLER,
}
"""Kinds the keeper hands back to a new singleton, and the decorator each must be marked by."""


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _controller(obj: Obj) -> Obj | None:
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")), None)


def _is_settings_ref(ref: Obj) -> bool:
    return ref.get("kind") == SETTINGS and ref.get("apiVersion") == CHAIN_API


def settings_reference(settings: Obj) -> Obj:
    """A controller reference to the singleton, as Metacontroller writes one, except that it
    does not block the owner's deletion (that would need the owner's finalizers permission)."""
    meta = _meta(settings)
    return {
        "apiVersion": CHAIN_API,
        "kind": SETTINGS,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": False,
    }


def _references(obj: Obj, refs: list[Obj], why: str) -> Patch:
    meta = _meta(obj)
    body: Obj = {"metadata": {"resourceVersion": version_of(obj), "ownerReferences": refs or None}}
    return Patch(
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("name")),
        body,
        why,
        meta.get("namespace"),
    )


def ownership_writes(settings: Obj | None, objects: Iterable[Obj]) -> list[Patch]:
    """Releases and adoptions for `objects` given the singleton (None: there is none)."""
    live = settings is not None and not _meta(settings).get("deletionTimestamp")
    uid = _meta(settings).get("uid") if settings is not None else None
    writes = []
    for obj in objects:
        refs = list(_meta(obj).get("ownerReferences") or [])
        ref = _controller(obj)
        if ref is not None and _is_settings_ref(ref):
            if live and ref.get("uid") == uid:
                continue
            kept = [r for r in refs if r is not ref]
            writes.append(_references(obj, kept, "released: the settings object is going"))
            continue
        decorator = (_meta(obj).get("annotations") or {}).get(DECORATOR_ANNOTATION)
        adoptable = decorator is not None and ADOPTED_BY.get(str(obj.get("kind"))) == decorator
        if live and settings is not None and ref is None and adoptable:
            refs.append(settings_reference(settings))
            writes.append(_references(obj, refs, f"adopted back by {decorator}"))
    return writes
