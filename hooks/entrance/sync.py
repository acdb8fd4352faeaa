"""The entrance hook: the LocalQueues a Namespace should hold.

Target: a Namespace. Related: the chain's ClusterQueues (label
`resource.gpustack.ai/type=instancetypes`) and the Settings singleton. Attachments: one LocalQueue
per live chain ClusterQueue, named `gpustack-fnv64-<fnv64a(cq)>` and annotated with the full
ClusterQueue name (the LocalQueue name is a hash, so users read the annotation).

A ClusterQueue being deleted gets no new LocalQueue, but keeps the ones it has until it is gone:
Kueue finds a Workload's ClusterQueue only through its LocalQueue, so dropping the LocalQueue while
the queue drains would leave its admitted Workloads neither evicted nor released, and the queue's
`resource-in-use` finalizer would hold it forever. Once the queue is gone, the next resync drops
them (Metacontroller deletes attachments the answer leaves out).
"""

from __future__ import annotations

from collections.abc import Mapping

from chain import fields
from chain.apis import (
    CHAIN_API,
    CLUSTER_QUEUE,
    CLUSTER_QUEUES_RESOURCE,
    KUEUE_API,
    LOCAL_QUEUE,
    SETTINGS_NAME,
    SETTINGS_RESOURCE,
)
from chain.labels import QUEUE_ANNOTATION, RESOURCE_TYPE, RESOURCE_TYPE_INSTANCE_TYPES
from chain.names import local_queue_name
from chain.settings import Settings, StartupEnv
from hooks.readers import related_settings
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path


def customize(parent: Obj) -> Obj:
    return {
        "relatedResources": [
            {
                "apiVersion": KUEUE_API,
                "resource": CLUSTER_QUEUES_RESOURCE,
                "labelSelector": {"matchLabels": {RESOURCE_TYPE: RESOURCE_TYPE_INSTANCE_TYPES}},
            },
            {"apiVersion": CHAIN_API, "resource": SETTINGS_RESOURCE, "names": [SETTINGS_NAME]},
        ]
    }


def reserved(namespace: str, settings: Settings, env: StartupEnv) -> bool:
    return (
        namespace in env.reserved_namespaces or namespace in settings.entrance_excluded_namespaces
    )


def local_queue(namespace: str, cluster_queue: str) -> Obj:
    return {
        "apiVersion": KUEUE_API,
        "kind": LOCAL_QUEUE,
        "metadata": {
            "name": local_queue_name(cluster_queue),
            "namespace": namespace,
            "annotations": {QUEUE_ANNOTATION: cluster_queue},
        },
        "spec": {"clusterQueue": cluster_queue},
    }


def _held_queues(request: DecoratorRequest) -> set[str]:
    """The ClusterQueues this Namespace already has a LocalQueue for. An attached LocalQueue
    whose `spec` or `spec.clusterQueue` has another type than Kueue's schema gives is a 400
    naming it, as every hook answers an object of its request it cannot read."""
    held = set()
    for lq in request.attachments.of(LOCAL_QUEUE, KUEUE_API):
        try:
            held.add(fields.string(fields.child(lq, "spec", ""), "clusterQueue", "spec"))
        except ValueError as err:
            raise BadRequest.at(object_path("attachments", lq), err) from None
    return held


def chain_queues(request: DecoratorRequest) -> list[str]:
    """The chain ClusterQueues this Namespace gets a LocalQueue for, by name (sorted, so the answer
    is stable): every live one, and every deleting one it already has a LocalQueue for."""
    held = _held_queues(request)
    names = set()
    for cq in request.related.of(CLUSTER_QUEUE, KUEUE_API):
        meta = cq["metadata"]
        labels: Mapping[str, str] = meta.get("labels") or {}
        if labels.get(RESOURCE_TYPE) != RESOURCE_TYPE_INSTANCE_TYPES:
            continue
        if not meta.get("deletionTimestamp") or meta["name"] in held:
            names.add(meta["name"])
    return sorted(names)


def sync(request: DecoratorRequest, env: StartupEnv) -> Obj:
    namespace = request.object
    meta = namespace["metadata"]
    if namespace.get("kind") != "Namespace":
        raise BadRequest("$.object.kind", f"expected a Namespace, got {namespace.get('kind')!r}")
    name = meta["name"]
    settings = related_settings(request)
    if reserved(name, settings, env) or meta.get("deletionTimestamp"):
        return {"attachments": []}
    return {"attachments": [local_queue(name, cq) for cq in chain_queues(request)]}
