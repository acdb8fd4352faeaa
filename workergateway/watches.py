"""The watches that wake the gateway's loop: the manager's `MultiKueueCluster`s, and each Active
member's InstanceTypes and pool ClusterQueues (docs/fleet.md, "The gateway process").

A watch here is a doorbell, never a source: the pass still lists every Active member afresh and
sums from scratch (`workergateway.gateway`), so what it writes never depends on which events
arrived, in what order, or whether one was lost. A watch only makes the pass come sooner than
the resync timer would.

- Every watch rings one `Doorbell`, and only when something the pass reads changed
  (`RingingCache`): an InstanceType's spec or status, a ClusterQueue's spec (Kueue rewrites its
  status on every admission, and the pass reads only the nominal quota), a
  `MultiKueueCluster`'s spec or status. A watch's first list always rings: a change that landed
  between the pass that started the watch and the watch's own list must not wait for a resync.
- The members' Secrets in the fleet's namespace (`gpustack-gateway-<member>`): a rotated
  token, or a Secret made after its `MultiKueueCluster`, is read by the pass it wakes rather
  than by the resync's.
- `MemberWatches` keeps one watch per Active member whose client could be made: started when
  the member joins, started anew when its client changes (a rotated Secret makes a new one),
  torn down when it leaves (inactive, deleted, or its Secret gone). A member Kueue still says
  is Active but the gateway cannot read keeps its watch: the watch retries with a doubling
  backoff (`kubeapi.watch.Watcher`), and its list on reconnecting rings, so the member's
  return is seen at once.
- Bursts are coalesced by the loop (`workergateway.cli.run`), not here: it waits for the bell
  to fall quiet for a moment, within a bound, then runs one pass for all of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.labels import RESOURCE_TYPE, RESOURCE_TYPE_INSTANCE_TYPES
from kubeapi import Kube
from kubeapi.watch import Cache, Event, Watcher, key_of
from workergateway.gateway import Api, Obj
from workergateway.kubeconfig import SECRET_PREFIX

log = logging.getLogger("gpustack.workergateway")


class Doorbell:
    """A count of rings that a waiter can block on; every watch of the gateway rings one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._rings = 0

    def ring(self) -> None:
        with self._cond:
            self._rings += 1
            self._cond.notify_all()

    @property
    def rings(self) -> int:
        with self._cond:
            return self._rings

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the count differs from `seen` or `timeout` passes; the count."""
        with self._cond:
            self._cond.wait_for(lambda: self._rings != seen, timeout)
            return self._rings


Relevant = Callable[[Obj], object]
"""The part of an object the pass reads: a change elsewhere (its resourceVersion, managed
fields, a queue's usage) rings nothing."""


def spec_and_status(obj: Obj) -> object:
    return obj.get("spec"), obj.get("status")


def spec_only(obj: Obj) -> object:
    return obj.get("spec")


def member_credentials(obj: Obj) -> object:
    """A member's Secret's data (a rotated token, a new CA); any other Secret of the fleet's
    namespace is none of the pass's business."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    return obj.get("data") if name.startswith(SECRET_PREFIX) else None


class RingingCache(Cache):
    """A watch's cache that rings `bell` when the `relevant` part of an object changed, or an
    object came or went; always on its first list."""

    def __init__(self, bell: Doorbell, relevant: Relevant) -> None:
        super().__init__()
        self.bell = bell
        self.relevant = relevant

    def _read(self) -> dict[tuple[str, str], object]:
        return {key_of(obj): self.relevant(obj) for obj in self.items()}

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        first = not self.synced
        before = self._read()
        super().replace(items, resource_version)
        if first or self._read() != before:
            self.bell.ring()

    def apply(self, event: Event) -> None:
        key = key_of(event.object)
        before = self.get(key)
        super().apply(event)
        if event.type == "BOOKMARK":
            return
        after = self.get(key)
        if before is None or after is None:
            if before is not after:
                self.bell.ring()
        elif self.relevant(before) != self.relevant(after):
            self.bell.ring()


class Following(Protocol):
    """A running watch of one member."""

    def stop(self) -> None: ...


StartWatch = Callable[[str, Api], Following]
"""Starts the watch of a member (its name, the pass's client of it)."""


class MemberWatches:
    """One watch per member the last pass found Active with a client; `follow` is called by
    every pass, on the loop's thread."""

    def __init__(self, start: StartWatch) -> None:
        self.start = start
        self._watching: dict[str, tuple[Api, Following]] = {}
        self.started = 0
        """Watches started so far (a member joining, or its client made anew)."""

    @property
    def members(self) -> list[str]:
        return sorted(self._watching)

    def follow(self, members: Mapping[str, Api]) -> None:
        """Watch exactly `members` (name -> the pass's client): a member whose client is not
        the one its watch was started for is watched anew (its Secret changed)."""
        for name in sorted(set(self._watching) - set(members)):
            self._watching.pop(name)[1].stop()
        for name, client in sorted(members.items()):
            current = self._watching.get(name)
            if current is not None and current[0] is client:
                continue
            if current is not None:
                current[1].stop()
                del self._watching[name]
            try:
                following = self.start(name, client)
            except Exception as err:
                # A watch that cannot start (its clients' files, say) must not fail the pass:
                # the next pass tries again, and the resync covers the member meanwhile.
                log.warning("member %s: its watch did not start: %s", name, err)
                continue
            self._watching[name] = (client, following)
            self.started += 1

    def stop(self) -> None:
        self.follow({})


class KubeMemberWatch:
    """A member's InstanceTypes and pool ClusterQueues, each watched on a client of its own
    (a `requests.Session` is not shared between threads), ringing `bell`."""

    def __init__(self, bell: Doorbell, connect: Callable[[], Kube]) -> None:
        self.clients = [connect(), connect()]
        self.watchers = [
            Watcher(
                self.clients[0],
                WORKER_API,
                INSTANCE_TYPE,
                cache=RingingCache(bell, spec_and_status),
            ),
            # Only the pools' own queues (the queue hook labels them): a tenant's queue
            # changing wakes nothing.
            Watcher(
                self.clients[1],
                KUEUE_API,
                CLUSTER_QUEUE,
                cache=RingingCache(bell, spec_only),
                label_selector=f"{RESOURCE_TYPE}={RESOURCE_TYPE_INSTANCE_TYPES}",
            ),
        ]
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        """Without waiting: a member that left is often one that does not answer, and the pass
        that found it gone must not wait on its connection. The watch threads end on their own
        once their stream is shut or their request fails on the closed client."""
        for watcher in self.watchers:
            watcher.stop(timeout=0.0)
        for client in self.clients:
            close = getattr(client, "close", None)
            if callable(close):
                close()


def kube_member_watches(bell: Doorbell, connect: Callable[[str], Kube]) -> MemberWatches:
    """`MemberWatches` over the members' API servers, each watch on clients `connect` makes
    from the member's current credentials."""
    return MemberWatches(lambda name, _client: KubeMemberWatch(bell, lambda: connect(name)))
