"""The Readys the driver wrote, kept until its watch cache shows them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kubeapi import Obj
from kubeapi.watch import key_of
from verdictdriver.workloads import metadata


@dataclass
class Promises:
    """Readys this driver wrote, kept until the watch cache shows the Workload past that write.

    The cache lags the write; without this a Workload promised cards a moment ago would look
    Pending and its cards free to the next verdict."""

    written: dict[tuple[str, str], tuple[str, str, Obj]] = field(default_factory=dict)
    """(namespace, name) -> (uid, resourceVersion the write was made against, object written)."""

    def remember(self, before: Obj, after: Obj) -> None:
        meta = metadata(before)
        self.written[key_of(before)] = (
            str(meta.get("uid", "")),
            str(meta.get("resourceVersion", "")),
            after,
        )

    def merged(self, listed: Sequence[Obj]) -> list[Obj]:
        """`listed` with each remembered Ready in place of a copy older than the write."""
        keys = [key_of(w) for w in listed]
        for gone in set(self.written) - set(keys):
            del self.written[gone]
        return [self._merged(key, w) for key, w in zip(keys, listed, strict=True)]

    def merged_one(self, key: tuple[str, str], seen: Obj | None) -> Obj | None:
        """The Workload `key` as the cache shows it (`seen`; None: gone, and nothing is
        promised any more), or the Ready we wrote on it while the cache still shows a copy
        older than the write."""
        if seen is None:
            self.written.pop(key, None)
            return None
        return self._merged(key, seen)

    def _merged(self, key: tuple[str, str], seen: Obj) -> Obj:
        promise = self.written.get(key)
        if promise is None:
            return seen
        uid, before, after = promise
        if str(metadata(seen).get("uid", "")) != uid:
            del self.written[key]  # recreated: nothing is promised any more
            return seen
        if str(metadata(seen).get("resourceVersion", "")) != before:
            del self.written[key]  # the cache includes our write (or a later change)
            return seen
        return after
