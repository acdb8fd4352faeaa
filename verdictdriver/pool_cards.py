"""The pool-cards keeper: every card InstanceType's PoolCards, tallied from a Devices watch.

The status hook reads a pool's nodes only through its PoolCards (`chain.pool_cards`: why one
object per pool, and what it holds), so something with credentials has to tally them: this
keeper, in the verdict driver (it already watches every Devices object; `--no-pool-cards` turns
it off) or alone as `python -m verdictdriver.pool_cards`.

- A pass reads the watch caches only: InstanceTypes, the settings singleton (CPU-aware pools
  are narrower; the topology profile's levels), the Devices, the Nodes (their topology domains,
  docs/topology.md, "Views") and the PoolCards already written. A Devices object is parsed once
  per resourceVersion, and a pool whose members and their versions are those of the last pass
  is not tallied again, so a ledger change costs one node's parse and one pool's sum.
- It writes a PoolCards whose spec or owner differs from what the API server holds (server-side
  apply of the whole object, one field manager), so a PoolCards deleted by hand comes back and
  an unchanged pool costs no request.
- Passes follow Devices changes, at most one per `interval` (a burst of ledger writes is one
  tally), and one every `period` for everything else.
- In the driver it writes only while its replica holds the Lease (two replicas with caches a
  moment apart would otherwise undo each other's writes until both caught up); the others keep
  their caches warm and take over with the Lease.
- A Devices object it cannot read is left out of every pool and named in the log, once per
  version: one broken node must not freeze the views of the whole pool.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import requests

from chain.apis import CHAIN_API, CORE_V1, INSTANCE_TYPE, NODE, SETTINGS, SETTINGS_NAME, WORKER_API
from chain.devices import DEVICES_KIND
from chain.pool_cards import (
    POOL_CARDS,
    POOL_CARDS_API,
    Membership,
    PoolCards,
    pool_cards_object,
    tally,
)
from chain.pool_nodes import PoolNode, pool_node
from chain.pools import PoolIdentity
from chain.profiles import node_domain
from chain.settings import Settings
from kubeapi import Kube, KubeError, Obj, kube_parser, run_connected
from kubeapi.watch import Cache, Watcher, all_synced, start_all, stop_all

log = logging.getLogger("pool-cards")

FIELD_MANAGER = "gpustack-pool-cards"
INTERVAL = 0.5
"""Seconds at least between two passes: a burst of ledger writes is tallied once."""


def _meta(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owner_uid(obj: Obj) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:  # type: ignore[attr-defined]
        if isinstance(ref, Mapping) and ref.get("kind") == INSTANCE_TYPE:
            return str(ref.get("uid"))
    return None


@dataclass(frozen=True)
class _Tallied:
    """A pool's last tally and what it was made from."""

    members: tuple[tuple[str, str, str | None], ...]
    """(name, resourceVersion, topology domain) of every member Devices."""
    cards: PoolCards


class NodeReader:
    """`pool_node`, once per (object, resourceVersion, group); an unreadable object is None,
    logged once per version."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, str, str], PoolNode | None] = {}
        self._seen: set[str] = set()

    def __call__(self, obj: Mapping[str, object], akey: str) -> PoolNode | None:
        meta = _meta(obj)
        key = (str(meta.get("name")), str(meta.get("resourceVersion")), akey)
        if key not in self._read:
            try:
                self._read[key] = pool_node(obj, akey)
            except ValueError as err:
                self._read[key] = None
                log.warning("Devices %s left out of its pools, unreadable: %s", key[0], err)
        return self._read[key]

    def unreadable(self, obj: Mapping[str, object], err: ValueError) -> None:
        """An object whose labels cannot be matched: left out, logged once per version."""
        meta = _meta(obj)
        mark = f"{meta.get('name')}@{meta.get('resourceVersion')}"
        if mark not in self._seen:
            self._seen.add(mark)
            log.warning("Devices %s left out of its pools, unreadable: %s", meta.get("name"), err)

    def forget_all_but(self, live: set[tuple[str, str]]) -> None:
        """Drop what was read of versions no longer in the cache."""
        self._read = {k: v for k, v in self._read.items() if (k[0], k[1]) in live}
        self._seen = {mark for mark in self._seen if tuple(mark.split("@", 1)) in live}


class PoolCardsKeeper:
    """Watches what a tally reads; writes the PoolCards that differ."""

    def __init__(
        self,
        kube: Kube,
        devices: Cache | None = None,
        leading: Callable[[], bool] = lambda: True,
        nodes: Cache | None = None,
    ) -> None:
        self.kube = kube
        self.types = Cache()
        self.settings = Cache()
        self.written = Cache()
        self._own_devices = devices is None
        self.devices = Cache() if devices is None else devices
        self._own_nodes = nodes is None
        self.nodes = Cache() if nodes is None else nodes
        self.leading = leading
        self.read = NodeReader()
        self._tallies: dict[str, _Tallied] = {}
        self._watchers: list[Watcher] = []

    def start(self) -> PoolCardsKeeper:
        kube = self.kube
        watchers = [
            Watcher(kube, WORKER_API, INSTANCE_TYPE, cache=self.types),
            Watcher(kube, CHAIN_API, SETTINGS, cache=self.settings),
            Watcher(kube, POOL_CARDS_API, POOL_CARDS, cache=self.written),
        ]
        if self._own_devices:
            watchers.append(Watcher(kube, WORKER_API, DEVICES_KIND, cache=self.devices))
        if self._own_nodes:
            watchers.append(Watcher(kube, CORE_V1, NODE, cache=self.nodes))
        self._watchers = start_all(watchers)
        return self

    def stop(self) -> None:
        stop_all(self._watchers)

    @property
    def synced(self) -> bool:
        return all_synced((self.types, self.settings, self.written, self.devices, self.nodes))

    def _settings(self) -> Settings:
        for obj in self.settings.items():
            if _meta(obj).get("name") == SETTINGS_NAME:
                try:
                    return Settings.from_spec(obj.get("spec"))
                except ValueError as err:
                    log.warning(
                        "settings unreadable, pools taken as not CPU-aware and hostname-only: %s",
                        err,
                    )
        return Settings()

    def _domains(self, levels: Sequence[str]) -> dict[str, str]:
        """Each Node's topology domain by name; none while the profile is hostname-only."""
        if len(levels) < 2:
            return {}
        found = {}
        for obj in self.nodes.items():
            labels = _meta(obj).get("labels") or {}
            if isinstance(labels, Mapping):
                domain = node_domain(levels, labels)
                if domain is not None:
                    found[str(_meta(obj).get("name"))] = domain
        return found

    def _cards(
        self,
        name: str,
        membership: Membership,
        devices: Sequence[Obj],
        domains: Mapping[str, str],
    ) -> PoolCards:
        found = membership.members(devices, skip=self.read.unreadable)
        members = tuple(
            (str(_meta(obj).get("name")), _version(obj), domains.get(str(_meta(obj).get("name"))))
            for obj in found
        )
        last = self._tallies.get(name)
        if last is not None and last.members == members:
            return last.cards
        cards = tally(membership.nodes(found, self.read), domains)
        self._tallies[name] = _Tallied(members, cards)
        return cards

    def decide(self) -> list[Obj]:
        """Every PoolCards whose spec or owner is not what the server holds."""
        settings = self._settings()
        aware = settings.instance_type_aware_cpu_manufacturer
        domains = self._domains(settings.topology_levels)
        devices = self.devices.items()
        self.read.forget_all_but({(str(_meta(o).get("name")), _version(o)) for o in devices})
        held = {str(_meta(o).get("name")): o for o in self.written.items()}
        writes, names = [], set()
        for instance_type in self.types.items():
            name = str(_meta(instance_type).get("name"))
            try:
                identity = PoolIdentity.of_spec(instance_type.get("spec"), "spec")
            except ValueError as err:
                log.warning("InstanceType %s unreadable: %s", name, err)
                continue
            membership = Membership.of(identity, aware)
            if membership is None:
                continue
            names.add(name)
            cards = self._cards(name, membership, devices, domains)
            desired = pool_cards_object(instance_type, cards)
            current = held.get(name)
            uid = str(_meta(instance_type).get("uid"))
            if (
                current is None
                or current.get("spec") != desired["spec"]
                or _owner_uid(current) != uid
            ):
                writes.append(desired)
        self._tallies = {k: v for k, v in self._tallies.items() if k in names}
        return writes

    def keep_once(self) -> int:
        """Write what `decide` says, when allowed to; the count written."""
        if not self.synced or not self.leading():
            return 0
        written = 0
        for obj in self.decide():
            try:
                self.kube.apply(obj, FIELD_MANAGER)
            except KubeError as err:
                # 404/409: the InstanceType went meanwhile; the caches catch up.
                log.info(
                    "PoolCards %s not written (%s): %s", obj["metadata"]["name"], err.status, err
                )
                continue
            written += 1
        return written

    def run(
        self,
        period: float = 5.0,
        interval: float = INTERVAL,
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """A pass on every Devices change (at most one per `interval`) and every `period`."""
        while not stop():
            seen = self.devices.changes
            started = time.monotonic()
            try:
                self.keep_once()
            except (KubeError, OSError, requests.RequestException) as err:
                log.warning("pool-cards pass failed: %s", err)
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
            self.devices.wait(seen, period)


def _version(obj: Mapping[str, object]) -> str:
    return str(_meta(obj).get("resourceVersion"))


def keep_pool_cards_in_background(
    kube: Kube,
    devices: Cache | None = None,
    leading: Callable[[], bool] = lambda: True,
    nodes: Cache | None = None,
) -> PoolCardsKeeper:
    keeper = PoolCardsKeeper(kube, devices, leading, nodes).start()
    threading.Thread(target=keeper.run, name="pool-cards", daemon=True).start()
    return keeper


def main(argv: Sequence[str] | None = None) -> int:
    parser = kube_parser(
        "python -m verdictdriver.pool_cards",
        "The pool-cards keeper alone, outside the verdict driver (which runs it unless "
        "--no-pool-cards): tallies every card InstanceType's PoolCards from the Devices of its "
        "pool's nodes. Run one: alone it does not wait for a Lease.",
    )
    parser.add_argument(
        "--period", type=float, default=5.0, help="seconds between passes with no change seen"
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=INTERVAL,
        help="the fewest seconds between two passes that Devices changes set off",
    )
    return run_connected(
        parser,
        argv,
        lambda kube, args: PoolCardsKeeper(kube).start().run(args.period, args.interval),
    )


if __name__ == "__main__":
    sys.exit(main())
