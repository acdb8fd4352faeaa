"""The watch-fed caches the verdict driver reads instead of the API server, and their indexes.

A verdict used to cost four reads in series (the ResourceFlavor, the Node by hostname, its
Devices, its Pods); now it reads these caches, and only its write goes to the API server. Each
kind is listed once and then followed by a watch (`kubeapi.watch`).

Memory: the caches hold every ResourceFlavor, Node, Devices, AdmissionCheck, Workload and bound
Pod (field selector `spec.nodeName!=`: a Pod the scheduler has not placed holds no card) as
parsed JSON without `managedFields` (the watch cache drops them), a few KiB to a few tens of KiB
per object in Python. Nodes, Devices and Workloads
grow with the cluster and the queue; bound Pods are the largest set (100 nodes x 30 Pods x
~20 KiB is about 60 MiB). The Deployment's memory limit must leave room for that.

The indexes a verdict needs (Nodes by hostname, Pods by node) are rebuilt from a cache only when
it changed since the last build, so an idle pass costs nothing and a burst of verdicts within one
pass shares one build.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from chain.apis import ADMISSION_CHECK, CORE_V1, KUEUE_API, NODE, RESOURCE_FLAVOR, WORKER_API
from chain.apis import WORKLOAD as WORKLOAD_KIND
from chain.devices import DEVICES_KIND
from chain.labels import HOSTNAME
from kubeapi import Kube, Obj
from kubeapi.watch import Cache, Watcher

BOUND_PODS = "spec.nodeName!="
"""Pods placed on a node: only those can hold a card."""

T = TypeVar("T")


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def by_name(objects: Sequence[Obj]) -> dict[str, Obj]:
    """Cluster-scoped objects by name."""
    return {str(_meta(obj).get("name", "")): obj for obj in objects}


def nodes_by_hostname(nodes: Sequence[Obj]) -> dict[str, list[str]]:
    """`kubernetes.io/hostname` -> the names of the Nodes that carry it (one, normally)."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        meta = _meta(node)
        hostname = (meta.get("labels") or {}).get(HOSTNAME)
        if isinstance(hostname, str) and hostname:
            out.setdefault(hostname, []).append(str(meta.get("name", "")))
    return out


def pods_by_node(pods: Sequence[Obj]) -> dict[str, list[Obj]]:
    """Bound Pods by `spec.nodeName`."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if isinstance(node, str) and node:
            out.setdefault(node, []).append(pod)
    return out


@dataclass
class Indexed(Generic[T]):
    """An index of one cache, built again only once the cache has changed."""

    cache: Cache
    build: Callable[[Sequence[Obj]], T]
    _built_at: int = -1
    _value: T | None = None

    def get(self) -> T:
        changes = self.cache.changes
        if self._value is None or changes != self._built_at:
            # Counted before the read: a change landing meanwhile triggers the next build.
            self._value, self._built_at = self.build(self.cache.items()), changes
        return self._value


@dataclass
class Caches:
    """Everything the driver reads, each kind kept current by its own `Watcher`."""

    workloads: Cache = field(default_factory=Cache)
    checks: Cache = field(default_factory=Cache)
    flavors: Cache = field(default_factory=Cache)
    nodes: Cache = field(default_factory=Cache)
    devices: Cache = field(default_factory=Cache)
    pods: Cache = field(default_factory=Cache)

    def __post_init__(self) -> None:
        self.flavor_index = Indexed(self.flavors, by_name)
        self.hostname_index = Indexed(self.nodes, nodes_by_hostname)
        self.pod_index = Indexed(self.pods, pods_by_node)

    @property
    def synced(self) -> bool:
        """True once every cache has been listed."""
        return all(cache.synced for cache in self.all().values())

    def all(self) -> Mapping[str, Cache]:
        return {
            WORKLOAD_KIND: self.workloads,
            ADMISSION_CHECK: self.checks,
            RESOURCE_FLAVOR: self.flavors,
            NODE: self.nodes,
            DEVICES_KIND: self.devices,
            "Pod": self.pods,
        }

    def start(self, kube: Kube) -> list[Watcher]:
        """A Watcher per kind, started; the caller may `stop` them."""
        watchers = [
            Watcher(kube, KUEUE_API, WORKLOAD_KIND, cache=self.workloads),
            Watcher(kube, KUEUE_API, ADMISSION_CHECK, cache=self.checks),
            Watcher(kube, KUEUE_API, RESOURCE_FLAVOR, cache=self.flavors),
            Watcher(kube, CORE_V1, NODE, cache=self.nodes),
            Watcher(kube, WORKER_API, DEVICES_KIND, cache=self.devices),
            Watcher(kube, CORE_V1, "Pod", cache=self.pods, field_selector=BOUND_PODS),
        ]
        return [w.start() for w in watchers]
