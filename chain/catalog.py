"""The pool catalog's wire form, shared by its writer and its reader.

The admission webhooks hold no credentials, so they learn each queue's card memory from a file:
the ConfigMap `gpustack-admission-catalog` (key `catalog.yaml`) that the InstanceType hook's
catalog decorator writes and the webhook Pod mounts. The document is a Kubernetes List of the
chain's InstanceTypes, each trimmed to `CATALOG_SHAPE` (the fields `PoolFacts` reads), plus the
Settings singleton. Both sides pass every item through `catalog_item`, so the writer writes
exactly what the reader reads, and a hand-made catalog of full objects reads the same.

Why trimmed: an InstanceType's status carries its views, which change with every allocation;
the catalog keeps only what changes when a pool does, so the ConfigMap is rewritten rarely and
stays small. Why compact JSON: JSON is YAML, and it is the smallest text that keeps the List
readable. The size that counts is not the ConfigMap's 1 MiB but the API server's 256 KiB for
all annotations of an object: Metacontroller keeps the whole desired ConfigMap, JSON-escaped,
in its `last-applied-configuration` annotation. `annotation_bytes` measures that copy. Under
Metacontroller v4's `--apply-strategy=server-side-apply` no such copy exists and only the 1 MiB
counts; the hook keeps the smaller budget, so one catalog works under either strategy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from chain.apis import CHAIN_API, CORE_V1, INSTANCE_TYPE, SETTINGS, SETTINGS_NAME, WORKER_API
from chain.labels import PART_OF, QUEUE_ENTRANCE

Obj = dict[str, Any]

CATALOG_CONFIGMAP = "gpustack-admission-catalog"
CATALOG_NAMESPACE = "gpustack-system"
CATALOG_KEY = "catalog.yaml"

ANNOTATIONS_LIMIT = 256 * 1024
"""The API server's limit on the total size of one object's annotations (keys and values)."""
ANNOTATIONS_HEADROOM = 4 * 1024
"""Room for the other annotations and for Go escaping `<`, `>` and `&` where Python does not."""

Shape = Mapping[str, Any]
"""Which fields of an object to keep: `True` keeps a value whole, a mapping keeps those keys of
an object, a one-element list keeps each element of a list by that element's shape."""

CATALOG_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": {"name": True, "labels": {QUEUE_ENTRANCE: True}},
    "spec": {"acceleratorGroup": True},
    "status": {
        "detail": {
            "manufacturer": True,
            "memory": True,
            "slicedDetail": {"physical": {"profiles": [{"name": True, "memoryMib": True}]}},
        }
    },
}
SETTINGS_SHAPE: Shape = {
    "apiVersion": True,
    "kind": True,
    "metadata": {"name": True},
    "spec": True,
}


def _project(value: Any, shape: Any) -> Any:
    """`value` cut down to `shape`. A value of the wrong type is kept as it is, so the reader
    meets the same malformed field it would meet in the full object and names it."""
    if shape is True:
        return value
    if isinstance(shape, Mapping) and isinstance(value, Mapping):
        return {key: _project(value[key], inner) for key, inner in shape.items() if key in value}
    if isinstance(shape, list) and isinstance(value, list):
        return [_project(item, shape[0]) for item in value]
    return value


def is_settings(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return (obj.get("kind"), obj.get("apiVersion"), name) == (SETTINGS, CHAIN_API, SETTINGS_NAME)


def is_instance_type(obj: Mapping[str, Any]) -> bool:
    return (obj.get("kind"), obj.get("apiVersion")) == (INSTANCE_TYPE, WORKER_API)


def catalog_item(obj: Any) -> Obj | None:
    """The catalog form of an object: an InstanceType or the Settings singleton, trimmed;
    None for anything else (the reader skips it, the writer leaves it out)."""
    if not isinstance(obj, Mapping):
        return None
    if is_instance_type(obj):
        trimmed: Obj = _project(obj, CATALOG_SHAPE)
        return trimmed
    if is_settings(obj):
        settings: Obj = _project(obj, SETTINGS_SHAPE)
        return settings
    return None


def catalog_items(document: object) -> list[Obj | None]:
    """The items of a catalog document in catalog form (None where an item is not one), by
    position; ValueError when the document is not a List."""
    items = document.get("items") if isinstance(document, Mapping) else None
    if not isinstance(items, list):
        raise ValueError("the catalog must be a Kubernetes List with items")
    return [catalog_item(item) for item in items]


def _name(obj: Obj) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name", "")) if isinstance(meta, Mapping) else ""


def catalog_document(objects: Iterable[Obj]) -> Obj:
    """The List of `objects` in catalog form: the Settings first, then InstanceTypes by name,
    so the same pools always give the same document."""
    items = [item for item in map(catalog_item, objects) if item is not None]
    items.sort(key=lambda item: (not is_settings(item), _name(item)))
    return {"apiVersion": CORE_V1, "kind": "List", "items": items}


def render_catalog(document: Obj) -> str:
    """The file's text: compact JSON with sorted keys (one document, one text)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def catalog_configmap(
    text: str,
    name: str = CATALOG_CONFIGMAP,
    key: str = CATALOG_KEY,
    namespace: str = CATALOG_NAMESPACE,
) -> Obj:
    """A ConfigMap the webhook Pod mounts, holding a catalog's `text` (the pool catalog's by
    default), in the chain's own `namespace` (where the webhook Pod runs)."""
    return {
        "apiVersion": CORE_V1,
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {PART_OF: "gpustack-chain"},
        },
        "data": {key: text},
    }


def annotation_bytes(configmap: Obj) -> int:
    """The size of Metacontroller's `last-applied-configuration` copy of `configmap`."""
    return len(json.dumps(configmap, separators=(",", ":"), ensure_ascii=False).encode())
