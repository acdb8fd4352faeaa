"""Garbage collection of per-Pod working directories (docs/design/node-agent.md, "Work-dir GC").

Sliced grants give each container a HAMi-core cache directory under `<pods dir>/<pod uid>/`.
Nothing else removes it, so the sliced server's ListAndWatch tick calls `tick` with the UIDs of
the Pods on the node: a directory whose Pod is absent on three consecutive ticks is removed. The
misses are counted, not acted on at once, so a Pod list that briefly lags a new Pod (a cache
just resynced) costs nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Collection

log = logging.getLogger(__name__)

MISSES_BEFORE_REMOVAL = 3


def _subdirs(root: str) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)}
    except FileNotFoundError:
        return set()


class WorkDirGC:
    def __init__(
        self,
        root: str,
        misses: int = MISSES_BEFORE_REMOVAL,
        remove: Callable[[str], None] = shutil.rmtree,
    ) -> None:
        self.root = root
        self.limit = misses
        self.remove = remove
        self.misses = dict.fromkeys(_subdirs(root), 0)
        self._lock = threading.Lock()  # several ListAndWatch streams may tick at once

    def tick(self, live: Collection[str]) -> list[str]:
        """Count one round; the directories removed in it."""
        removed: list[str] = []
        with self._lock:
            present = _subdirs(self.root)
            for gone in set(self.misses) - present:
                del self.misses[gone]  # removed by someone else: stop tracking it
            for uid in sorted(present):
                if uid in live:
                    self.misses[uid] = 0
                    continue
                self.misses[uid] = self.misses.get(uid, 0) + 1
                if self.misses[uid] < self.limit:
                    continue
                try:
                    self.remove(os.path.join(self.root, uid))
                except OSError as error:
                    log.warning("cannot remove work dir of pod %s: %s", uid, error)
                    continue  # keep counting; the next tick tries again
                del self.misses[uid]
                removed.append(uid)
        return removed
