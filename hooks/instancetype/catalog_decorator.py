"""The pool catalog decorator: the ConfigMap the admission webhooks read pool facts from.

DecoratorController `gpustack-admission-catalog` on the Settings singleton (hooks
`/catalog/sync` and `/catalog/customize`, Service `gpustack-hook-instancetype`). Related: every
InstanceType. Answer `attachments`: the ConfigMap `gpustack-system/gpustack-admission-catalog`
whose key `catalog.yaml` is the List of every InstanceType in catalog form plus the Settings
(`chain.catalog`: trimmed to what the Pod fold reads, sorted, compact), so the ConfigMap changes
only when a pool's facts do, not with every allocation that moves an InstanceType's views; and
the ConfigMap `gpustack-instance-catalog` (key `instances.json`): each InstanceType's unit spec,
capacities and offers as one compact row (`chain.instances.instance_catalog`), what the Instance
webhooks read; and the ConfigMap `gpustack-kvcache-catalog` (key `pools.json`): every
KVCachePool's endpoint and member groups' transports (`chain.kvcache.kvcache_catalog`), what the
KV cache injection webhook reads. Separate objects, so each has the whole annotation budget.

InstanceTypes pass through as they are, malformed fields included: the webhook skips such an
item with a warning, and one bad pool must not stop every other pool's facts from updating.
A Settings spec the chain cannot read is a 400 naming the field, as in every other hook.

A catalog too large to store is a 500 with the figures: Metacontroller keeps the last
ConfigMap and retries, so the webhook goes on with the pools it knew (never an empty catalog).
"""

from __future__ import annotations

from chain.apis import (
    INSTANCE_TYPE,
    INSTANCE_TYPE_RESOURCE,
    WORKER_API,
)
from chain.catalog import (
    ANNOTATIONS_HEADROOM,
    ANNOTATIONS_LIMIT,
    annotation_bytes,
    catalog_configmap,
    catalog_document,
    render_catalog,
)
from chain.instances import INSTANCE_CATALOG_CONFIGMAP, INSTANCE_CATALOG_KEY, instance_catalog
from chain.kvcache import (
    KVCACHE_CATALOG_CONFIGMAP,
    KVCACHE_CATALOG_KEY,
    KVCACHE_POOL,
    KVCACHE_POOL_RESOURCE,
    kvcache_catalog,
)
from hooks.shell import (
    DecoratorRequest,
    Obj,
    parent_settings,
)

CATALOG_BUDGET = ANNOTATIONS_LIMIT - ANNOTATIONS_HEADROOM


class CatalogTooLarge(RuntimeError):
    """The catalog would not fit in the ConfigMap Metacontroller writes."""


def customize(parent: Obj) -> Obj:
    """Relate every InstanceType and every KVCachePool; the rule reads nothing of the parent
    (the answer is cached)."""
    return {
        "relatedResources": [
            {"apiVersion": WORKER_API, "resource": INSTANCE_TYPE_RESOURCE},
            {"apiVersion": WORKER_API, "resource": KVCACHE_POOL_RESOURCE},
        ]
    }


def _fitting(configmap: Obj, what: str) -> Obj:
    size = annotation_bytes(configmap)
    if size > CATALOG_BUDGET:
        raise CatalogTooLarge(
            f"the {what} takes {size} bytes; Metacontroller's copy in an annotation must stay "
            f"under {CATALOG_BUDGET}"
        )
    return configmap


def sync(request: DecoratorRequest) -> Obj:
    if parent_settings(request) is None:
        return {"attachments": []}
    related = request.related.of(INSTANCE_TYPE, WORKER_API)
    document = catalog_document([request.object, *related])
    pools = catalog_configmap(render_catalog(document))
    instances = catalog_configmap(
        render_catalog(instance_catalog(related)),
        name=INSTANCE_CATALOG_CONFIGMAP,
        key=INSTANCE_CATALOG_KEY,
    )
    kv_pools = request.related.of(KVCACHE_POOL, WORKER_API)
    kvcache = catalog_configmap(
        render_catalog(kvcache_catalog(kv_pools)),
        name=KVCACHE_CATALOG_CONFIGMAP,
        key=KVCACHE_CATALOG_KEY,
    )
    return {
        "attachments": [
            _fitting(pools, f"catalog of {len(document['items']) - 1} InstanceTypes"),
            _fitting(instances, f"instance catalog of {len(related)} InstanceTypes"),
            _fitting(kvcache, f"KV cache catalog of {len(kv_pools)} pools"),
        ]
    }
