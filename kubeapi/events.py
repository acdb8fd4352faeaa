"""Kubernetes Events (`events.k8s.io/v1`) for what a user should see in `kubectl describe`.

Written from a thread of their own, never on the caller's path, and kept down the way
client-go's recorder keeps them: the same event about the same object within `SERIES_WINDOW_S`
becomes one Event whose `series.count` grows, and each object gets at most `BURST` Events,
refilled one every `REFILL_S` (the spam filter). A failed write is logged and dropped: an Event
is a courtesy, never a reason to fail the work it describes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from chain.times import micro_timestamp
from kubeapi.client import KubeError, Obj

log = logging.getLogger("events")

EVENTS_API = "events.k8s.io/v1"
SERIES_WINDOW_S = 6 * 60.0
"""client-go's isomorphic-event window: a repeat within it counts on the same Event."""
BURST = 25
REFILL_S = 300.0
"""client-go's spam filter: 25 Events per object at once, then one every five minutes."""
BUCKETS_KEPT = 4096
"""Past this many objects' spam-filter buckets, the full ones are forgotten."""
NORMAL = "Normal"
WARNING = "Warning"


def micro_time() -> str:
    return micro_timestamp(time.time())


class EventsClient(Protocol):
    """What the recorder needs of `kubeapi.Kube`."""

    def create(self, obj: Obj) -> Obj: ...

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj: ...


@dataclass
class _Series:
    name: str
    namespace: str
    count: int
    last: float


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass(frozen=True)
class _Pending:
    regarding: Mapping[str, Any]
    type: str
    reason: str
    note: str
    action: str


def _reference(obj: Mapping[str, Any]) -> Obj:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {k: v for k, v in ref.items() if v}


class EventRecorder:
    def __init__(
        self,
        kube: EventsClient,
        controller: str,
        instance: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`controller` is the `reportingController` (e.g. `gpustack.ai/admission-driver`),
        `instance` this replica (its Pod name)."""
        self.kube = kube
        self.controller = controller
        self.instance = instance
        self.clock = clock
        self._series: dict[tuple[str, str, str, str], _Series] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._idle = threading.Condition()
        self._busy = 0
        threading.Thread(target=self._run, name="events", daemon=True).start()

    def event(
        self,
        regarding: Mapping[str, Any],
        type_: str,
        reason: str,
        note: str,
        action: str = "Judged",
    ) -> None:
        """Record an Event about `regarding` (returns at once)."""
        with self._idle:
            self._busy += 1
        self._queue.put(_Pending(regarding, type_, reason, note[:1024], action))

    def drain(self, timeout: float) -> bool:
        """Wait until every recorded Event was written or dropped; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def _run(self) -> None:
        while True:
            pending = self._queue.get()
            try:
                self._write(pending)
            except (KubeError, OSError, ValueError) as err:
                log.warning("event %s not written: %s", pending.reason, err)
            except Exception:  # a courtesy: never let it end the thread
                log.exception("event %s not written", pending.reason)
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _allowed(self, uid: str, now: float) -> bool:
        if len(self._buckets) > BUCKETS_KEPT:
            # A bucket refilled to its burst says nothing a fresh one would not: forget it, so
            # the map does not grow with every object ever mentioned.
            for key, old in list(self._buckets.items()):
                if old.tokens + (now - old.at) / REFILL_S >= BURST:
                    del self._buckets[key]
        bucket = self._buckets.setdefault(uid, _Bucket(float(BURST), now))
        bucket.tokens = min(float(BURST), bucket.tokens + (now - bucket.at) / REFILL_S)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _write(self, pending: _Pending) -> None:
        ref = _reference(pending.regarding)
        uid = str(ref.get("uid") or ref.get("name"))
        key = (uid, pending.type, pending.reason, pending.note)
        now = self.clock()
        series = self._series.get(key)
        if series is not None and now - series.last < SERIES_WINDOW_S:
            series.count += 1
            series.last = now
            patch = {"series": {"count": series.count, "lastObservedTime": micro_time()}}
            self.kube.merge_patch(EVENTS_API, "Event", series.name, patch, series.namespace)
            return
        if not self._allowed(uid, now):
            log.debug("event %s about %s dropped by the spam filter", pending.reason, uid)
            return
        namespace = str(ref.get("namespace") or "default")
        name = f"{ref.get('name')}.{time.time_ns():x}"
        self.kube.create(
            {
                "apiVersion": EVENTS_API,
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": micro_time(),
                "reportingController": self.controller,
                "reportingInstance": self.instance,
                "action": pending.action,
                "reason": pending.reason,
                "type": pending.type,
                "note": pending.note,
                "regarding": ref,
            }
        )
        self._series[key] = _Series(name, namespace, 1, now)
        # Forget series that can no longer grow, so the map stays the size of a window.
        for stale in [k for k, s in self._series.items() if now - s.last >= SERIES_WINDOW_S]:
            del self._series[stale]
