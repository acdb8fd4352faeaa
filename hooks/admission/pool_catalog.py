"""The pool catalog: how the webhooks learn a queue's card memory and accelerator group.

Upstream's Pod webhook reads the InstanceType fronting a Pod's queue (by the label
`schedule.gpustack.ai/queue-entrance=<queue>`) through the API. Our webhooks hold no
credentials, so they read the same InstanceTypes from a file instead: a Kubernetes List of
InstanceType objects (at least `metadata.name`, `metadata.labels`, `spec.acceleratorGroup` and
`status.detail`), optionally with the chain's `Settings` singleton. In a cluster that file is the
ConfigMap `gpustack-system/gpustack-admission-catalog` mounted into the webhook Pod, written by
the InstanceType hook's catalog decorator; every item is read through `chain.catalog`'s
`catalog_item`, the trimming the writer applies, so both sides agree on the shape. Only
operator-owned objects feed it, never the user-writable LocalQueue, as upstream insists.

The file is named by `GPUSTACK_ADMISSION_CATALOG` and re-read when it changes (the kubelet
swaps a mounted ConfigMap in place). No file, or an unreadable one, is an empty catalog: Pods
that need no pool facts (whole cards, percentage slices) are still admitted, the others are
refused with a message that says the pool is not known yet.

Judgment call: an entrance label carried by two InstanceTypes resolves to none (upstream: "0 or
more than 1 is an error"), logged once per load, so the fold never divides by the wrong card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from chain.catalog import catalog_items, is_settings
from chain.labels import QUEUE_ENTRANCE
from chain.requests import PoolFacts
from chain.settings import Settings
from hooks.catalog_file import WatchedFile, catalog_source

log = logging.getLogger("hooks.admission")


@dataclass(frozen=True)
class Catalog:
    pools: Mapping[str, PoolFacts] = field(default_factory=dict)
    """By queue name (the InstanceType's entrance label)."""
    settings: Settings = field(default_factory=Settings)

    def pool(self, queue: str) -> PoolFacts | None:
        return self.pools.get(queue)


def parse_catalog(document: object) -> Catalog:
    """A catalog from a List of InstanceTypes (and Settings); bad items are skipped, logged."""
    found: dict[str, list[PoolFacts]] = {}
    settings = Settings()
    for number, item in enumerate(catalog_items(document)):
        if item is None:
            continue
        raw_meta = item.get("metadata")
        meta: dict[str, object] = raw_meta if isinstance(raw_meta, dict) else {}
        try:
            if is_settings(item):
                settings = Settings.from_spec(item.get("spec"))
            else:
                labels = meta.get("labels") or {}
                queue = labels.get(QUEUE_ENTRANCE) if isinstance(labels, dict) else None
                if isinstance(queue, str) and queue:
                    found.setdefault(queue, []).append(PoolFacts.from_instance_type(item))
        except ValueError as err:
            log.warning("catalog items[%d] skipped: %s", number, err)
    pools = {}
    for queue, facts in found.items():
        if len(facts) == 1:
            pools[queue] = facts[0]
        else:
            names = ", ".join(sorted(p.instance_type for p in facts))
            log.warning("queue %s is fronted by several InstanceTypes (%s): ignored", queue, names)
    return Catalog(pools, settings)


class FileCatalog(WatchedFile[Catalog]):
    """The catalog in a file, re-read whenever the file's modification time changes."""

    def __init__(self, path: str) -> None:
        super().__init__(path, parse_catalog, Catalog())


def catalog_from_env(env: Mapping[str, str] | None = None) -> Callable[[], Catalog]:
    """The catalog source the environment names; an empty catalog when it names none."""
    return catalog_source(parse_catalog, Catalog(), env)
