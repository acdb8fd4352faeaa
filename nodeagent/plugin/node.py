"""What every device-plugin server of one node shares (docs/design/node-agent.md, "Device-plugin
resources"): the node's Pods, the ledger they add up to, this process's reservations, one allocation
mutex, and a notifier.

Kubelet calls each mode's server on its own, yet one card can be asked for in several modes, so
the decisions must see one state under one lock. The outside world is injected: a `PodSource`
lists the node's Pods (raw API objects), an `AnnotationWriter` persists one Pod's
`device.gpustack.ai/accelerator.allocated`. Both are slow I/O and are never called while a
ListAndWatch stream waits; the Pod list is read under the mutex because the decision needs it.

`NodeState` is the one owner of the mutex, the reservations and the visibility grants: an
allocator reads and reserves in a step it hands to `decide` (Allocate: a timed wait for the
mutex) or `read` (a hint), which gets a `Held` for the length of the step, and rolls back,
amends or restores through `NodeState`'s methods; nothing else touches them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, TypeVar, runtime_checkable

from chain.allocation import Code, Refusal
from chain.devices import DevicesSpec
from chain.ledger import DevicesStatus
from chain.ledger_rebuild import AllocationRecord, Holder, PodAllocations, rebuild_status

Pod = Mapping[str, object]
T = TypeVar("T")
log = logging.getLogger(__name__)
UNSEEN_S = 1.0
"""How long a grant's Pod may stay unseen by the cache before a fresh list checks it is still
there. The cache sees a new Pod within milliseconds when its watch is up; past this the watch is
away (waiting out its backoff, up to `kubeapi.watch.BACKOFF_MAX`, 30 s), and a Pod deleted
meanwhile is never heard of: the streams look afresh about once per this period until the cache
catches up, so its cards are offered again in seconds. At most one fresh list per period."""


def pod_annotations(pod: Pod) -> Mapping[str, str]:
    """A listed Pod's annotations (none when it has none, or they are malformed)."""
    meta = pod.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(found, Mapping):
        return {}
    return {str(k): str(v) for k, v in found.items()}


class PodSource(Protocol):
    def pods(self) -> Sequence[Pod]:
        """Every Pod bound to this node (any phase)."""
        ...


@runtime_checkable
class CachedPodSource(Protocol):
    """A `PodSource` answering from a watch-fed cache, which can also list afresh."""

    def pods(self) -> Sequence[Pod]: ...

    def fresh_pods(self) -> Sequence[Pod]:
        """Every Pod bound to this node, read from the API server now."""
        ...


class Unidentified(Refusal):
    """No listed Pod has a container this call can be for (kubelet fails the Pod)."""

    def __init__(self, message: str) -> None:
        super().__init__(Code.INTERNAL, message)


class RefusedFor(Refusal):
    """A refusal once the container it is for is known: its Pod gets an Event saying why."""

    def __init__(self, refusal: Refusal, pod: Pod) -> None:
        super().__init__(refusal.code, refusal.message)
        self.pod = pod


class AnnotationWriter(Protocol):
    def write(self, namespace: str, name: str, value: str) -> None:
        """Set the Pod's allocation annotation to `value` (raises on failure)."""
        ...


@runtime_checkable
class AfterAnswerWriter(AnnotationWriter, Protocol):
    """A writer whose writes land after Allocate answers (the journal's): it holds them while
    an answer is on its way, so a write does not compete with the answer for the interpreter."""

    def answering(self) -> Callable[[], None]:
        """An answer is being given; the returned callable says it has left."""
        ...


def _answered() -> None:
    """Nothing held: the writer writes before the answer."""


class Answers:
    """Allocate answers on their way, counted under `cond`: `begin` counts one and returns what
    says it has left (only its first call counts); once none is left, `on_none` runs under
    `cond` and every waiter on `cond` is woken."""

    def __init__(
        self, cond: threading.Condition, on_none: Callable[[], None] = lambda: None
    ) -> None:
        self.cond = cond
        self.on_none = on_none
        self.count = 0

    def begin(self) -> Callable[[], None]:
        with self.cond:
            self.count += 1
        left = False

        def answered() -> None:
            nonlocal left
            with self.cond:
                if left:
                    return
                left = True
                self.count -= 1
                if self.count == 0:
                    self.on_none()
                    self.cond.notify_all()

        return answered


class Late(Exception):
    """The internal deadline passed; kubelet gets DEADLINE_EXCEEDED and nothing is kept."""


class Held:
    """The node's allocation state while one step holds the mutex (`NodeState.decide`,
    `NodeState.read`): what the step lists, reads, reserves and grants. Only `NodeState` makes
    one, for the length of the step: `reservations` is the live mapping (read-only), not a
    copy, so it must not be kept past the step."""

    def __init__(self, owner: NodeState, fresh: bool) -> None:
        self._owner = owner
        self.fresh = fresh
        """Whether `listed` reads the API server now rather than the cache."""
        self.reservations: Mapping[Holder, AllocationRecord] = MappingProxyType(owner._reservations)

    def listed(self) -> Sequence[Pod]:
        return self._owner.listed(self.fresh)

    def granted(self) -> set[Holder]:
        """A copy of the containers already shown their Pod's cards (visibility)."""
        return set(self._owner._grants)

    def prune(self, live: set[str]) -> None:
        """Forget what Pods not in `live` (this step's list of the node's Pods) held."""
        self._owner._prune(live, self.fresh)

    def reserve(self, holder: Holder, record: AllocationRecord) -> AllocationRecord | None:
        """Hold `record` for `holder`; the reservation it replaces (None: none). A Pod found
        only in a fresh list is one the cache has not seen yet (`NodeState._unseen`)."""
        self._mark_unseen(holder)
        return self._owner._put(holder, record)

    def grant(self, holder: Holder) -> None:
        """Note a visibility container shown its Pod's cards (kept as a reservation is)."""
        self._mark_unseen(holder)
        self._owner._grants.add(holder)

    def _mark_unseen(self, holder: Holder) -> None:
        # Only a cache lags: a source that lists the API server every time has seen the Pod,
        # and an entry it could never clear would wake the streams once per `UNSEEN_S` forever.
        if self.fresh and isinstance(self._owner.source, CachedPodSource):
            self._owner._unseen.setdefault(holder.pod_uid, time.monotonic())
            self._owner._unseen_changed()

    def revoke(self, holder: Holder) -> None:
        self._owner._grants.discard(holder)


class NodeState:
    """The allocation state of one node, shared by all its plugin servers, and its only owner:
    the mutex, this process's reservations and the visibility grants are private, and the
    methods below are the only way to read or change them (a step under the mutex gets a
    `Held`)."""

    def __init__(
        self,
        spec: Callable[[], DevicesSpec],
        source: PodSource,
        writer: AnnotationWriter,
        release_terminated: bool = True,
        sliced_gate: bool = True,
    ) -> None:
        self.spec = spec
        self.source = source
        self.writer = writer
        self.release_terminated = release_terminated
        self.sliced_gate = sliced_gate
        self._mutex = threading.Lock()
        """Held around identify + decide + reserve (never around a write)."""
        self._reservations: dict[Holder, AllocationRecord] = {}
        self._grants: set[Holder] = set()
        """Containers already shown their Pod's cards by the visibility plugin
        (docs/design/node-agent.md, "Visibility Allocate"): never identified again, so a second
        visibility container of a Pod gets its own call."""
        self._unseen: dict[str, float] = {}
        """Pods reserved for from a fresh list that the cache has not listed since, with when:
        the cache lags (after the API server was away, the watch comes back only after its
        backoff, seconds), and pruned by its list their grants would be forgotten while they
        run, their cards offered again and handed to another mode (#35). Kept until the cache
        lists them or a fresh list does not."""
        self._unseen_due = float("inf")
        """When a fresh list is next due for `_unseen` (monotonic; written under the mutex,
        read by `wait_change` as one float)."""
        self._live_listeners: list[Callable[[frozenset[str]], None]] = []
        """Told every live-Pod set the plugins list (the partition reclaimer's broadcast)."""
        self._changed = threading.Condition()
        self._version = 0
        self._answers = Answers(self._changed, self._wake_held)
        """Allocate answers on their way (`answering`)."""
        self._held_change = False
        """A change `notify` keeps until those answers have left."""

    def pods(self) -> list[PodAllocations]:
        return [PodAllocations.from_pod(pod) for pod in self.source.pods()]

    def live(self) -> tuple[list[PodAllocations], dict[Holder, AllocationRecord]]:
        """The node's Pods and this process's reservations, for a ListAndWatch tick. Listed
        under the mutex, so a reservation made for a Pod newer than the list is never pruned;
        a Pod gone since the last Allocate must not keep its cards held."""
        with self._mutex:
            fresh = self._settle_unseen()
            try:
                raw = self.listed(fresh)
            except Exception:
                if not fresh:
                    raise
                log.warning("cannot list the node's Pods afresh; the cache's list for now")
                now = time.monotonic()  # look again a period from now, not on every tick
                self._unseen.update(dict.fromkeys(self._unseen, now))
                fresh, raw = False, self.listed()
            pods = [PodAllocations.from_pod(pod) for pod in raw]
            self._prune({pod.uid for pod in pods}, fresh)
            return pods, dict(self._reservations)

    def _settle_unseen(self) -> bool:
        """Whether to list afresh (under the mutex): once a Pod the cache has not seen was
        reserved for longer than `UNSEEN_S` ago, it may have been deleted before the cache
        could see it; only a fresh list can tell, and free its cards then. Only a caching source
        marks Pods unseen (`Held._mark_unseen`), so it is never due for any other."""
        return time.monotonic() >= self._unseen_due

    def _unseen_changed(self) -> None:
        """Recompute when `_unseen` next needs a fresh list (under the mutex)."""
        oldest = min(self._unseen.values(), default=float("inf"))
        self._unseen_due = oldest + UNSEEN_S

    def listed(self, fresh: bool = False) -> Sequence[Pod]:
        """The node's Pods: from the source's cache, or from the API server when `fresh`."""
        if fresh and isinstance(self.source, CachedPodSource):
            return self.source.fresh_pods()
        return self.source.pods()

    def identified(self, decide: Callable[[bool], T]) -> T:
        """`decide(fresh)` over the listed Pods. A cache may not have seen a Pod bound a moment
        ago, and kubelet admits a Pod as soon as it is bound: when the cached list names no
        container for the call, decide once more over a fresh list rather than fail the Pod."""
        try:
            return decide(False)
        except Unidentified:
            if not isinstance(self.source, CachedPodSource):
                raise
            return decide(True)

    def decide(self, step: Callable[[Held], T], timeout: float) -> T:
        """Allocate's read-and-reserve `step` under the mutex, waited for no longer than
        `timeout` (`Late` then), over the cached Pods and if need be a fresh list
        (`identified`), both in one hold of the mutex."""
        if not self._mutex.acquire(timeout=timeout):
            raise Late("another allocation held the node past the deadline")
        try:
            return self.identified(lambda fresh: step(Held(self, fresh)))
        finally:
            self._mutex.release()

    def read(self, step: Callable[[Held], T], fresh: bool) -> T:
        """A hint's read `step` under the mutex (it reserves nothing)."""
        with self._mutex:
            return step(Held(self, fresh))

    def reserve(self, holder: Holder, record: AllocationRecord) -> AllocationRecord | None:
        """Hold `record` for `holder` in place of its reservation (a partition's grant once the
        instance is made); the reservation it replaces."""
        with self._mutex:
            return self._put(holder, record)

    def rollback(self, holder: Holder, prior: AllocationRecord | None) -> None:
        """Put `holder`'s reservation back as it was before a grant that failed (`prior`; None:
        none), and wake ListAndWatch."""
        with self._mutex:
            if prior is None:
                self._reservations.pop(holder, None)
            else:
                self._reservations[holder] = prior
        self.notify()

    def restore(self, records: Mapping[Holder, AllocationRecord]) -> None:
        """Hold again what a previous agent granted and did not see recorded (the journal's
        replay, before any Allocate is served)."""
        with self._mutex:
            self._reservations.update(records)

    def revoke(self, holder: Holder) -> None:
        """A visibility grant that failed: the container can be identified again."""
        with self._mutex:
            self._grants.discard(holder)

    def reservation(self, holder: Holder) -> AllocationRecord | None:
        with self._mutex:
            return self._reservations.get(holder)

    def reserved_in(self, pod_uid: str) -> dict[str, AllocationRecord]:
        """This process's reservations for the containers of one Pod, by container."""
        with self._mutex:
            return {h.container: r for h, r in self._reservations.items() if h.pod_uid == pod_uid}

    def reserved(self) -> dict[Holder, AllocationRecord]:
        """A copy of this process's reservations."""
        with self._mutex:
            return dict(self._reservations)

    def granted(self) -> frozenset[Holder]:
        """A copy of the visibility grants."""
        with self._mutex:
            return frozenset(self._grants)

    def on_live(self, listener: Callable[[frozenset[str]], None]) -> None:
        """Tell `listener` every live-Pod set the plugins list from now on (a reclaimer)."""
        with self._mutex:
            self._live_listeners.append(listener)

    def ledger(self, pods: Sequence[PodAllocations] | None = None) -> DevicesStatus:
        """The ledger the Pods' annotations add up to (what the reconciler would publish)."""
        listed = self.pods() if pods is None else pods
        return rebuild_status(self.spec(), listed, self.release_terminated).status

    def _put(self, holder: Holder, record: AllocationRecord) -> AllocationRecord | None:
        """Reserve (under the mutex); the reservation replaced."""
        prior = self._reservations.get(holder)
        self._reservations[holder] = record
        return prior

    def _prune(self, live: set[str], fresh: bool) -> None:
        """Forget reservations and visibility grants of Pods no longer on the node (under the
        mutex): not in `live`, the uids a list of the node's Pods names. A cached list (not
        `fresh`) does not prove gone a Pod the cache has not seen yet (`_unseen`): it counts
        as live."""
        for uid in list(self._unseen):
            if fresh and uid in live:
                self._unseen[uid] = time.monotonic()  # still there; the cache is still behind
            elif fresh or uid in live:
                del self._unseen[uid]  # gone by the API server's word, or the cache caught up
        self._unseen_changed()
        live = live | self._unseen.keys()
        for holder in [h for h in self._reservations if h.pod_uid not in live]:
            del self._reservations[holder]
        for holder in [h for h in self._grants if h.pod_uid not in live]:
            self._grants.discard(holder)
        for listener in self._live_listeners:
            listener(frozenset(live))

    # --- notifier: ListAndWatch resends on every tick -------------------------------------

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    def answering(self) -> Callable[[], None]:
        """Called as an Allocate begins; call what it returns once the answer has left (a
        second call does nothing). Until every answer on its way has left, ListAndWatch is not
        woken (`notify` keeps the change for then) and a writer that writes after the answer
        holds its writes: woken at once, each would share the interpreter with the answer."""
        writer_left = (
            self.writer.answering() if isinstance(self.writer, AfterAnswerWriter) else _answered
        )
        node_left = self._answers.begin()

        def answered() -> None:
            node_left()
            writer_left()

        return answered

    def _wake_held(self) -> None:
        """The last answer has left (under `_changed`): wake the streams for a held change."""
        if self._held_change:
            self._held_change = False
            self._version += 1

    def notify(self) -> None:
        """Wake every ListAndWatch stream: now, or once the answers on their way have left."""
        with self._changed:
            if self._answers.count:
                self._held_change = True
                return
            self._version += 1
            self._changed.notify_all()

    def wait_change(self, seen: int, timeout: float) -> int:
        """The version after a change past `seen`, or `seen` when `timeout` ran out. A Pod the
        cache has not seen and that is due a fresh look (`UNSEEN_S`) counts as a change: nothing
        else would wake the streams while the Pod watch is away."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout)
            if self._version == seen and time.monotonic() >= self._unseen_due:
                self._version += 1
                self._changed.notify_all()
            return self._version
