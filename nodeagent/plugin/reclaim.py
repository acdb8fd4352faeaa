"""The partition reclaimer (docs/design/node-agent.md, "The reclaimer"): unmake the MIG instances of
Pods that are gone.

A partition outlives its container: the ledger charges it until the Pod object is gone, and the
driver keeps the instance until someone destroys it. `ReclaimLoop` runs a reconcile on every
live-Pod set the node broadcasts (each Pod list the plugins take) and again every period with
the last set, never before the first set (an agent that has not seen the Pods yet would take
every instance for an orphan). `MigReclaimer.reconcile` is one sweep:

- an instance whose marker names a Pod not in the live set is destroyed (compute instance, then
  GPU instance), retrying a few times while the driver answers IN_USE;
- an instance with a running process is left alone, whoever owned it;
- an instance without a marker (made by hand, or by a crash between marker and instance) is an
  orphan: destroyed only once it has stayed one for the debounce time;
- a GPU instance with more than one compute instance was cut by hand (we make exactly one): the
  whole sweep stops, so the reclaimer never fights an administrator;
- a marker whose instance is gone and whose Pod is gone is dropped.

Time, sleeping and the loop are injected, so tests drive sweeps deterministically.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from chain.partitions import Placement
from nodeagent.plugin.mig import Instance, Partitioner, PartitionError, in_use

log = logging.getLogger(__name__)

RECLAIM_PERIOD_S = 60.0
ORPHAN_DEBOUNCE_S = 300.0
IN_USE_TRIES = 3
IN_USE_BACKOFF_S = 1.0


@dataclass
class Sweep:
    """What one reconcile did (for the log and the tests)."""

    destroyed: list[tuple[str, int]] = field(default_factory=list)
    """(card, slot start) of every instance unmade."""
    kept_busy: list[tuple[str, int]] = field(default_factory=list)
    failed: list[tuple[str, int]] = field(default_factory=list)
    stopped: str = ""
    """Why the sweep stopped before touching anything ("" when it ran)."""


class MigReclaimer:
    """One manufacturer's partition reclaimer on a node (NVIDIA, T-Head); `cards` lists its
    partitioned card UUIDs."""

    def __init__(
        self,
        partitioner: Partitioner,
        cards: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        debounce_s: float = ORPHAN_DEBOUNCE_S,
        tries: int = IN_USE_TRIES,
        backoff_s: float = IN_USE_BACKOFF_S,
        live_now: Callable[[], frozenset[str]] | None = None,
    ) -> None:
        """`live_now` lists the node's Pod UIDs afresh: asked before a marked instance is unmade
        or a marker dropped for a Pod missing from the sweep's set, read after the marker, since
        that set may be older than a grant made during the sweep (a Pod listed before its
        Allocate cuts the instance and writes the marker)."""
        self.partitioner = partitioner
        self.live_now = live_now
        self.cards = cards
        self.clock = clock
        self.sleep = sleep
        self.debounce_s = debounce_s
        self.tries = tries
        self.backoff_s = backoff_s
        self._orphans: dict[tuple[str, int], float] = {}
        """(card, slot start) -> when the instance was first seen without a marker."""

    def reconcile(self, live: frozenset[str]) -> Sweep:
        sweep = Sweep()
        nvml = self.partitioner.nvml
        found: dict[str, list[Instance]] = {}
        for card in self.cards():
            with self.partitioner.card_lock(card):
                try:
                    found[card] = self.partitioner.instances(card)
                except nvml.NVMLError as error:
                    log.warning("cannot list the MIG instances of %s: %s", card, error)
        cut = [i for instances in found.values() for i in instances if i.compute_instances > 1]
        if cut:
            first = cut[0]
            sweep.stopped = (
                f"GPU instance {first.gpu_instance} of {first.card} holds "
                f"{first.compute_instances} compute instances (cut by hand); reclaim paused"
            )
            log.warning("%s", sweep.stopped)
            return sweep
        now = self.clock()
        seen_orphans: set[tuple[str, int]] = set()
        for card, instances in found.items():
            for instance in instances:
                key = (card, instance.placement.start)
                marker = self.partitioner.markers.read(card, instance.placement.start)
                if marker is not None and self._alive(marker.pod_uid, live):
                    continue
                if marker is None:
                    seen_orphans.add(key)
                    since = self._orphans.setdefault(key, now)
                    if now - since < self.debounce_s:
                        continue
                if instance.busy:
                    sweep.kept_busy.append(key)
                    continue
                if self._destroy(card, instance.placement):
                    sweep.destroyed.append(key)
                    seen_orphans.discard(key)
                else:
                    sweep.failed.append(key)
        self._orphans = {k: t for k, t in self._orphans.items() if k in seen_orphans}
        self._drop_stale_markers(found, live)
        return sweep

    def _destroy(self, card: str, placement: Placement) -> bool:
        for attempt in range(1, self.tries + 1):
            try:
                self.partitioner.destroy(card, placement)
                log.info("reclaimed the MIG instance at slot %d of %s", placement.start, card)
                return True
            except PartitionError as error:
                if not in_use(self.partitioner.nvml, error) or attempt == self.tries:
                    log.warning("cannot reclaim slot %d of %s: %s", placement.start, card, error)
                    return False
                self.sleep(self.backoff_s)
        return False

    def _alive(self, pod_uid: str, live: frozenset[str]) -> bool:
        """Whether the Pod is in the sweep's set or, asked now, on the node."""
        return pod_uid in live or (self.live_now is not None and pod_uid in self.live_now())

    def _drop_stale_markers(self, found: dict[str, list[Instance]], live: frozenset[str]) -> None:
        stale = []
        for marker in self.partitioner.markers.all():
            present = found.get(marker.card)
            if present is None or marker.pod_uid in live:
                continue  # a card not listed this sweep, or a live Pod's (being made) marker
            if not any(i.placement.start == marker.start for i in present):
                stale.append(marker)
        # The markers were read before the Pods are listed again: a marker written during the
        # sweep (its instance made after the listing above) belongs to a Pod listed now.
        now = self.live_now() if stale and self.live_now is not None else frozenset()
        for marker in stale:
            if marker.pod_uid not in now:
                self.partitioner.markers.remove(marker.card, marker.start)


class ReclaimLoop:
    """Runs `reconcile(live)` on every broadcast live-Pod set and every `period_s` with the last
    one; never before the first broadcast."""

    def __init__(
        self,
        reconcile: Callable[[frozenset[str]], object],
        period_s: float = RECLAIM_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reconcile = reconcile
        self.period_s = period_s
        self.clock = clock
        self._changed = threading.Condition()
        self._live: frozenset[str] | None = None
        self._pending = False
        self._last_run: float | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def broadcast(self, live: Iterable[str]) -> None:
        with self._changed:
            self._live = frozenset(live)
            self._pending = True
            self._changed.notify_all()

    def due(self, now: float) -> bool:
        if self._live is None:
            return False
        return self._pending or self._last_run is None or now - self._last_run >= self.period_s

    def tick(self) -> bool:
        """One reconcile if one is due; whether it ran."""
        now = self.clock()
        with self._changed:
            if not self.due(now):
                return False
            live = self._live
            self._pending = False
            self._last_run = now
        assert live is not None
        try:
            self.reconcile(live)
        except Exception:
            log.exception("partition reclaim failed; next broadcast or period retries")
        return True

    def run(self, stopped: threading.Event, wait_s: float = 1.0) -> None:
        while not stopped.is_set():
            self.tick()
            with self._changed:
                self._changed.wait_for(lambda: self._pending or stopped.is_set(), wait_s)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(self._stopped,), name="reclaim", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()
