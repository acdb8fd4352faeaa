"""The pool catalog decorator: the ConfigMap the admission webhooks read pool facts from.

DecoratorController `gpustack-admission-catalog` on the Settings singleton (hooks
`/catalog/sync` and `/catalog/customize`, Service `gpustack-hook-instancetype`). Related: every
InstanceType. Answer `attachments`: the ConfigMap `<chain ns>/gpustack-admission-catalog`
whose key `catalog.yaml` is the List of every InstanceType in catalog form plus the Settings
(`chain.catalog`: trimmed to what the Pod fold reads, sorted, compact), so the ConfigMap changes
only when a pool's facts do, not with every allocation that moves an InstanceType's views; and
the ConfigMap `gpustack-instance-catalog` (key `instances.json`): each InstanceType's unit spec,
capacities and offers as one compact row (`chain.instances.instance_catalog`), what the Instance
webhooks read; and the ConfigMap `gpustack-kvcache-catalog` (key `pools.json`): every
KVCachePool's endpoint and member groups' transports (`chain.kvcache.kvcache_catalog`), what the
KV cache injection webhook reads. Separate objects, so each has the whole annotation budget.

InstanceTypes pass through the pool catalog as they are, malformed field values included: the
webhook skips such an item with a warning, and one bad pool must not stop every other pool's
facts from updating. The instance catalog is different: the hook reads each InstanceType into
its row itself, so a field the CRD's schema types that has another type (a `spec` or `status`
that is not an object, a count that is not an integer) is a 400 naming it under the related
object's path, as every hook answers a related object it cannot read (`hooks.request`); the API
server never holds such an object, and Metacontroller keeps the last ConfigMaps meanwhile.
A Settings spec the chain cannot read is a 400 naming the field, as in every other hook.

A catalog too large to store is a 500 with the figures: Metacontroller keeps the last
ConfigMap and retries, so the webhook goes on with the pools it knew (never an empty catalog).
"""

from __future__ import annotations

from collections.abc import Iterable

from chain.apis import (
    INSTANCE_TYPE,
    INSTANCE_TYPE_RESOURCE,
    WORKER_API,
)
from chain.catalog import (
    ANNOTATIONS_HEADROOM,
    ANNOTATIONS_LIMIT,
    CATALOG_NAMESPACE,
    annotation_bytes,
    catalog_configmap,
    catalog_document,
    render_catalog,
)
from chain.instances import (
    INSTANCE_CATALOG_CONFIGMAP,
    INSTANCE_CATALOG_KEY,
    InstanceFacts,
    facts_catalog,
)
from chain.kvcache import (
    KVCACHE_CATALOG_CONFIGMAP,
    KVCACHE_CATALOG_KEY,
    KVCACHE_POOL,
    KVCACHE_POOL_RESOURCE,
    kvcache_catalog,
)
from hooks.readers import parent_settings
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path

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


def instance_facts(types: Iterable[Obj]) -> list[InstanceFacts]:
    """Each related InstanceType's row facts; a field of the wrong type is a 400 naming it by the
    object's path in the request (`$.related['InstanceType...']['<name>'].spec`)."""
    found = []
    for obj in types:
        try:
            found.append(InstanceFacts.from_instance_type(obj))
        except ValueError as err:
            raise BadRequest.at(object_path("related", obj), err) from None
    return found


def sync(request: DecoratorRequest, namespace: str = CATALOG_NAMESPACE) -> Obj:
    """The three catalog ConfigMaps, in `namespace`: the chain's own, where the webhook Pods
    that mount them run (`KUBERNETES_POD_NAMESPACE` of the hook, a Helm release's namespace)."""
    if parent_settings(request) is None:
        return {"attachments": []}
    related = request.related.of(INSTANCE_TYPE, WORKER_API)
    document = catalog_document([request.object, *related])
    pools = catalog_configmap(render_catalog(document), namespace=namespace)
    instances = catalog_configmap(
        render_catalog(facts_catalog(instance_facts(related))),
        name=INSTANCE_CATALOG_CONFIGMAP,
        key=INSTANCE_CATALOG_KEY,
        namespace=namespace,
    )
    kv_pools = request.related.of(KVCACHE_POOL, WORKER_API)
    kvcache = catalog_configmap(
        render_catalog(kvcache_catalog(kv_pools)),
        name=KVCACHE_CATALOG_CONFIGMAP,
        key=KVCACHE_CATALOG_KEY,
        namespace=namespace,
    )
    return {
        "attachments": [
            _fitting(pools, f"catalog of {len(document['items']) - 1} InstanceTypes"),
            _fitting(instances, f"instance catalog of {len(related)} InstanceTypes"),
            _fitting(kvcache, f"KV cache catalog of {len(kv_pools)} pools"),
        ]
    }
