"""What every device-plugin server of one node shares (docs/design/node-agent.md, "Device-plugin
resources"): the node's Pods, the ledger they add up to, this process's reservations, one allocation
mutex, and a notifier.

Kubelet calls each mode's server on its own, yet one card can be asked for in several modes, so
the decisions must see one state under one lock. The outside world is injected: a `PodSource`
lists the node's Pods (raw API objects), an `AnnotationWriter` persists one Pod's
`device.gpustack.ai/accelerator.allocated`. Both are slow I/O and are never called while a
ListAndWatch stream waits; the Pod list is read under the mutex because the decision needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from chain.allocation import Code, Refusal
from chain.devices import DevicesSpec
from chain.ledger import DevicesStatus
from chain.ledger_rebuild import AllocationRecord, Holder, PodAllocations, rebuild_status

Pod = Mapping[str, object]
T = TypeVar("T")


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


class NodeState:
    """The allocation state of one node, shared by all its plugin servers."""

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
        self.mutex = threading.Lock()
        """Held around identify + decide + reserve (never around a write)."""
        self.reservations: dict[Holder, AllocationRecord] = {}
        self.grants: set[Holder] = set()
        """Containers already shown their Pod's cards by the visibility plugin
        (docs/design/node-agent.md, "Visibility Allocate"): never identified again, so a second
        visibility container of a Pod gets its own call."""
        self.live_listeners: list[Callable[[frozenset[str]], None]] = []
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
        with self.mutex:
            pods = self.pods()
            self.prune({pod.uid for pod in pods})
            return pods, dict(self.reservations)

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

    def ledger(self, pods: Sequence[PodAllocations] | None = None) -> DevicesStatus:
        """The ledger the Pods' annotations add up to (what the reconciler would publish)."""
        listed = self.pods() if pods is None else pods
        return rebuild_status(self.spec(), listed, self.release_terminated).status

    def prune(self, live: set[str]) -> None:
        """Forget reservations and visibility grants of Pods no longer on the node."""
        for holder in [h for h in self.reservations if h.pod_uid not in live]:
            del self.reservations[holder]
        self.grants = {holder for holder in self.grants if holder.pod_uid in live}
        for listener in self.live_listeners:
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
        """The version after a change past `seen`, or `seen` when `timeout` ran out."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout)
            return self._version
