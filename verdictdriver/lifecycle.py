"""The lifecycle keeper: the writes no Metacontroller hook may make, from watch caches.

Three sets of rules, all pure: `stops` (drain a chain queue being deleted; mark an InstanceType
inactive once its queue is stopped by hand), `instance_stops` (running-instance stop:
`spec.stop` on an Instance whose pool drains or whose InstanceType goes) and `ownership` (the
settings singleton can be deleted and made again without touching pools, queues or running
work). Every write is a
merge patch guarded by the resourceVersion it was decided from, so every verdict-driver replica
runs the keeper (as every replica keeps the webhook certificate): a decision made on a stale
read is a 409, and the next pass decides again. It runs inside the verdict driver
(`--no-lifecycle` turns it off) and alone as `python -m verdictdriver.lifecycle`.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Sequence

import requests

from chain.apis import (
    CHAIN_API,
    CLUSTER_QUEUE,
    INSTANCE_TYPE,
    KUEUE_API,
    RESOURCE_FLAVOR,
    SETTINGS,
    SETTINGS_NAME,
    TOPOLOGY,
    WORKER_API,
)
from chain.catalog import CATALOG_CONFIGMAP, CATALOG_NAMESPACE
from chain.instances import INSTANCE
from chain.labels import (
    RESOURCE_TYPE,
    RESOURCE_TYPE_INSTANCE_TYPES,
    RESOURCE_TYPE_NODES,
    RESOURCE_TYPE_TOPOLOGY,
)
from kubeapi import Kube, KubeError, Obj, kube_parser, run_connected
from kubeapi.watch import Cache, Watcher, all_synced, start_all, stop_all
from verdictdriver.instance_stops import instance_stop_writes
from verdictdriver.ownership import CONFIG_MAP, ownership_writes
from verdictdriver.patch import Patch
from verdictdriver.stops import stop_writes

log = logging.getLogger("lifecycle")


def _selector(value: str) -> str:
    return f"{RESOURCE_TYPE}={value}"


class LifecycleKeeper:
    """Watches what the rules read; makes the writes they decide."""

    def __init__(self, kube: Kube, namespace: str = CATALOG_NAMESPACE) -> None:
        self.kube = kube
        self.namespace = namespace
        """The chain's own namespace: where the catalog ConfigMap lives."""
        self.queues = Cache()
        self.types = Cache()
        self.settings = Cache()
        self.flavors = Cache()
        self.topologies = Cache()
        self.instances = Cache()
        self._watchers: list[Watcher] = []
        self._catalog_settled_for: str | None = None
        """The singleton (uid, or "" for none) the catalog ConfigMap was last settled for: it is
        read by name (no watch: that would need every ConfigMap), so only when that changes."""

    def start(self) -> LifecycleKeeper:
        kube = self.kube
        self._watchers = [
            Watcher(
                kube,
                KUEUE_API,
                CLUSTER_QUEUE,
                cache=self.queues,
                label_selector=_selector(RESOURCE_TYPE_INSTANCE_TYPES),
            ),
            Watcher(kube, WORKER_API, INSTANCE_TYPE, cache=self.types),
            Watcher(kube, WORKER_API, INSTANCE, cache=self.instances),
            Watcher(kube, CHAIN_API, SETTINGS, cache=self.settings),
            Watcher(
                kube,
                KUEUE_API,
                RESOURCE_FLAVOR,
                cache=self.flavors,
                label_selector=_selector(RESOURCE_TYPE_NODES),
            ),
            Watcher(
                kube,
                KUEUE_API,
                TOPOLOGY,
                cache=self.topologies,
                label_selector=_selector(RESOURCE_TYPE_TOPOLOGY),
            ),
        ]
        self._watchers = start_all(self._watchers)
        return self

    def stop(self) -> None:
        stop_all(self._watchers)

    @property
    def synced(self) -> bool:
        return all_synced(
            (self.queues, self.types, self.settings, self.flavors, self.topologies, self.instances)
        )

    def singleton(self) -> Obj | None:
        return next(
            (s for s in self.settings.items() if s["metadata"]["name"] == SETTINGS_NAME), None
        )

    def _catalog(self, settings: Obj | None) -> tuple[list[Obj], str | None]:
        """The catalog ConfigMap when it is due a look (a new singleton, or one going), and
        the singleton it will then be settled for."""
        meta = (settings or {}).get("metadata") or {}
        going = bool(meta.get("deletionTimestamp"))
        mark = "" if settings is None else str(meta.get("uid"))
        if not going and self._catalog_settled_for == mark:
            return [], None
        found = self.kube.get("v1", CONFIG_MAP, CATALOG_CONFIGMAP, self.namespace)
        return ([found] if found is not None else []), mark

    def decide(self, settings: Obj | None, catalog: list[Obj]) -> list[Patch]:
        """Everything the rules say to write now, releases first and the catalog first of all:
        the singleton goes once the pools decorator sees nothing attached, and the catalog is
        not that decorator's attachment."""
        by_name = {str(t["metadata"]["name"]): t for t in self.types.items()}
        owned = [*catalog, *self.flavors.items(), *self.topologies.items(), *self.types.items()]
        queues = {str(q["metadata"]["name"]): q for q in self.queues.items()}
        return [
            *ownership_writes(settings, owned),
            *stop_writes(self.queues.items(), by_name),
            *instance_stop_writes(self.instances.items(), by_name, queues),
        ]

    def keep_once(self) -> int:
        """Make every write decided now; a write that fails waits for the next pass. The count
        written. Nothing is decided before every cache is listed (a type not yet seen may be
        inactive, a singleton not yet seen may exist)."""
        if not self.synced:
            return 0
        settings = self.singleton()
        catalog, settling = self._catalog(settings)
        written, failed = 0, False
        for write in self.decide(settings, catalog):
            try:
                self.kube.merge_patch(
                    write.api_version, write.kind, write.name, write.patch, write.namespace
                )
            except KubeError as err:
                # 409: decided from a stale read; 404: gone meanwhile. The caches catch up.
                log.info("%s %s not written (%s): %s", write.kind, write.name, err.status, err)
                failed = failed or write.kind == CONFIG_MAP
                continue
            written += 1
            log.info("%s %s: %s", write.kind, write.name, write.why)
        if settling is not None and not failed:
            self._catalog_settled_for = settling
        return written

    def run(self, period: float = 1.0, stop: Callable[[], bool] = lambda: False) -> None:
        """A pass whenever a queue changes, and every `period` (other changes are seen within
        it)."""
        while not stop():
            seen = self.queues.changes
            try:
                self.keep_once()
            except (KubeError, OSError, requests.RequestException) as err:
                log.warning("lifecycle pass failed: %s", err)
            self.queues.wait(seen, period)


def keep_lifecycle_in_background(
    kube: Kube, period: float = 1.0, namespace: str = CATALOG_NAMESPACE
) -> LifecycleKeeper:
    keeper = LifecycleKeeper(kube, namespace).start()
    threading.Thread(target=keeper.run, args=(period,), name="lifecycle", daemon=True).start()
    return keeper


def main(argv: Sequence[str] | None = None) -> int:
    parser = kube_parser(
        "python -m verdictdriver.lifecycle",
        "The lifecycle keeper alone, outside the verdict driver (which runs it unless "
        "--no-lifecycle): drains the queues being deleted, stops the Instances whose pool or "
        "InstanceType goes, keeps the settings singleton's ownership. Every replica may run it.",
    )
    parser.add_argument(
        "--period", type=float, default=1.0, help="seconds between passes with no change seen"
    )
    return run_connected(
        parser, argv, lambda kube, args: LifecycleKeeper(kube).start().run(args.period)
    )


if __name__ == "__main__":
    sys.exit(main())
