"""Who holds which cards, for the verdicts to come: the node-pinned shares of the Workloads
holding cards, by hostname, kept current one Workload at a time (a cache its caller owns)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from chain import fields
from chain.manufacturers import ManufacturerTable
from chain.queues import NODE_DEVICES_CHECK
from chain.workload_state import Share, holds_cards, workload_shares


def workload_key(obj: fields.Obj) -> tuple[str, str]:
    meta = fields.child(obj, "metadata", "")
    return fields.string(meta, "namespace", "metadata"), fields.string(meta, "name", "metadata")


def _part(obj: fields.Obj, outer: str, inner: str) -> object:
    """`obj[outer][inner]` as it is (None where absent or not an object): a key for `Holdings.read`,
    never a reading (`workload_shares` reads, and names a malformed field)."""
    found = obj.get(outer)
    return found.get(inner) if isinstance(found, Mapping) else None


@dataclass
class Holdings:
    """The node-pinned shares of the Workloads holding cards (`holds_cards`), by hostname.

    Only shares pinned to a node can be charged to that node's cards; a pool-wide share waits
    for Kueue to name its nodes. Built once from all Workloads, then kept current one Workload at
    a time (`update`), so judging n Workloads costs O(n), not O(n^2)."""

    check: str = NODE_DEVICES_CHECK
    by_host: dict[str, dict[tuple[str, str], list[Share]]] = field(default_factory=dict)
    hosts_of: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    read: dict[tuple[str, str], tuple[object, object, list[Share]]] = field(default_factory=dict)
    """Per Workload holding cards, the shares last read and the `spec.podSets` and
    `status.admission` they were read from: a Workload changes several times while it holds
    (Kueue's conditions, our entry, its Pods' counts) and its shares only when those two do."""

    @classmethod
    def of(
        cls,
        workloads: Iterable[fields.Obj],
        table: ManufacturerTable,
        check: str = NODE_DEVICES_CHECK,
    ) -> Holdings:
        """ValueError naming a malformed field of some Workload."""
        held = cls(check)
        for workload in workloads:
            held.update(workload, table)
        return held

    def update(self, workload: fields.Obj, table: ManufacturerTable) -> None:
        """Replace what `workload` holds (nothing once it no longer holds cards)."""
        key = workload_key(workload)
        self._unindex(key)
        if not holds_cards(workload, self.check):
            self.read.pop(key, None)
            return
        for share in self._shares(key, workload, table):
            if share.node:
                self.by_host.setdefault(share.node, {}).setdefault(key, []).append(share)
                self.hosts_of.setdefault(key, set()).add(share.node)

    def _shares(
        self, key: tuple[str, str], workload: fields.Obj, table: ManufacturerTable
    ) -> list[Share]:
        podsets, admission = (
            _part(workload, "spec", "podSets"),
            _part(workload, "status", "admission"),
        )
        last = self.read.get(key)
        if last is not None and last[0] == podsets and last[1] == admission:
            return last[2]
        shares = workload_shares(workload, table)
        self.read[key] = (podsets, admission, shares)
        return shares

    def forget(self, key: tuple[str, str]) -> None:
        """The Workload `key` is gone: it holds nothing."""
        self._unindex(key)
        self.read.pop(key, None)

    def _unindex(self, key: tuple[str, str]) -> None:
        for host in self.hosts_of.pop(key, set()):
            held = self.by_host[host]
            held.pop(key, None)
            if not held:
                del self.by_host[host]

    def on(
        self, hosts: Iterable[str], besides: tuple[str, str]
    ) -> list[tuple[tuple[str, str], Share]]:
        """The shares held on `hosts` by Workloads other than `besides`, in a stable order."""
        return [
            (key, share)
            for host in sorted(hosts)
            for key, shares in sorted(self.by_host.get(host, {}).items())
            if key != besides
            for share in shares
        ]
