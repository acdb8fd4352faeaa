"""The entrance hook: the LocalQueues a Namespace should hold.

Target: a Namespace. Related: the chain's ClusterQueues (label
`resource.gpustack.ai/type=instancetypes`) and the Settings singleton. Attachments: one LocalQueue
per live chain ClusterQueue, named `gpustack-fnv64-<fnv64a(cq)>` and annotated with the full
ClusterQueue name (the LocalQueue name is a hash, so users read the annotation).

A ClusterQueue being deleted gets no new LocalQueue, and its existing ones are dropped
(Metacontroller deletes attachments the answer leaves out): the queue is draining away.
"""

from __future__ import annotations

from collections.abc import Mapping

from chain.apis import (
    CHAIN_API,
    CLUSTER_QUEUE,
    KUEUE_API,
    LOCAL_QUEUE,
    SETTINGS_NAME,
    SETTINGS_RESOURCE,
)
from chain.labels import QUEUE_ANNOTATION, RESOURCE_TYPE, RESOURCE_TYPE_INSTANCE_TYPES
from chain.names import local_queue_name
from chain.settings import Settings, StartupEnv
from hooks.shell import (
    BadRequest,
    DecoratorRequest,
    Obj,
    related_settings,
)

CLUSTER_QUEUES_RESOURCE = "clusterqueues"


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


def chain_queues(request: DecoratorRequest) -> list[str]:
    """Live chain ClusterQueues, by name (sorted, so the answer is stable)."""
    names = set()
    for cq in request.related.of(CLUSTER_QUEUE, KUEUE_API):
        meta = cq["metadata"]
        labels: Mapping[str, str] = meta.get("labels") or {}
        if labels.get(RESOURCE_TYPE) == RESOURCE_TYPE_INSTANCE_TYPES and not meta.get(
            "deletionTimestamp"
        ):
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
