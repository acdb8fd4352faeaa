"""One pass of the worker gateway: read the members, sum, write the manager's `FleetPool`s
(docs/fleet.md, "The gateway process").

A pass keeps no state between passes that it decides with: it lists the manager's
`MultiKueueCluster`s, reads each Active member's InstanceTypes and ClusterQueues through that
member's client, sums them (`workergateway.sums`), and brings the manager's `FleetPool`s to the
answer, applying only those whose spec differs. (What it read of an object that has not changed
since, by its uid and version, is not read again: `members.Remembered`.) Everything is
computed from scratch and written by server-side apply under the gateway's own field manager
with `force`, so a write lost to a conflict, a timeout or a crash is made again by the next
pass: nothing remembers that it was ever tried.

A member the gateway cannot read (its Secret missing or refused, its API server unreachable,
its objects malformed) is counted as inactive for that pass, as a member Kueue marks inactive
is: the gateway cannot vouch for its views. It is logged and reported as a Warning Event on its
`MultiKueueCluster`, and the other members are read as usual.

Each `FleetPool`'s status carries what the pass could not vouch for (`workergateway.reports`): a
member it could not read, members that disagree on the pool, and namespaces where the manager
has the pool's LocalQueue and a member of the pool does not (`workergateway.namespaces`; also a
Warning Event `NamespaceMissing` on the `FleetPool`). The status is written only when it
changes, by server-side apply on the status subresource.

A member lost (inactive, or unreadable) leaves every sum at once but stays listed in the
pools it was a member of until the same grace has passed (`workergateway.lost`): Kueue re-dispatches
a Workload that was running there only after `workerLostTimeout`, and only while the worker is
in the config. When each was first seen lost is an annotation on the `FleetPool`.

A pool no Active member has any more is first written with no counted member, its views and
quota at zero and the time it was orphaned in an annotation, and deleted once `grace` has
passed since (Kueue's `workerLostTimeout`, 15 minutes by default): the Workloads MultiKueue
dispatched for it can then be dispatched again before their queue goes. The time lives on the
object, so a restarted gateway keeps counting from it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import requests

from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, LOCAL_QUEUE, WORKER_API
from chain.conditions import Condition, generation_of, merge
from chain.fleet_pools import FLEET_POOL, FLEET_POOL_API, MAX_MEMBERS, MEMBERS_LOST_SINCE
from chain.views import AcceleratorViews, View, shown_views
from kubeapi import KubeError
from workergateway.kubeconfig import FLEET_NAMESPACE, KubeconfigRefused, secret_name
from workergateway.lost import (
    keep_lost,
    parse_lost_since,
    render_lost_since,
    stamp,
)
from workergateway.members import (
    MULTIKUEUE_CLUSTER,
    MemberError,
    MemberPool,
    MemberState,
    read_cluster,
    read_pools,
)
from workergateway.namespaces import Queues, mirroring, queues_of
from workergateway.reports import NAMESPACE_MISSING, pool_conditions
from workergateway.sums import FleetPool, fleet_pools

log = logging.getLogger("gpustack.workergateway")

Obj = dict[str, Any]

FIELD_MANAGER = "gpustack-worker-gateway"
EVENTS_CONTROLLER = "gpustack.ai/worker-gateway"
ORPHANED_SINCE = "gpustack.ai/orphaned-since"
"""On a `FleetPool` no Active member has: when the gateway first found it so (RFC 3339)."""
WORKER_LOST_TIMEOUT = 15 * 60.0
"""Kueue's `multiKueue.workerLostTimeout` default, in seconds."""
UNREADABLE = "MemberUnreadable"
CONFLICT = "PoolConflict"


class Api(Protocol):
    """What the gateway asks of a cluster's API: every kind it reads is cluster-scoped and read
    whole, so no namespace and no selector (`kubeapi.Kube` has more)."""

    def list(self, api_version: str, kind: str) -> list[Obj]: ...

    def apply(self, obj: Obj, manager: str, subresource: str | None = None) -> Obj: ...

    def delete(self, api_version: str, kind: str, name: str) -> None: ...


class Reporter(Protocol):
    """Where the gateway says what went wrong (`kubeapi.events.EventRecorder`)."""

    def event(
        self, regarding: Mapping[str, Any], type_: str, reason: str, note: str, action: str
    ) -> None: ...


class Follower(Protocol):
    """What wakes the loop when a member changes (`workergateway.watches.MemberWatches`): told
    by every pass which members to watch."""

    def follow(self, members: Mapping[str, Api]) -> None: ...


class MemberUnreachable(Exception):
    """A member whose client cannot be made (its Secret missing, say): the member, why."""

    def __init__(self, member: str, message: str) -> None:
        super().__init__(f"member {member}: {message}")
        self.member = member


MemberClients = Callable[[str], Api]
"""The client of a member by name; raises MemberUnreachable or KubeconfigRefused."""

READ_ERRORS = (
    MemberUnreachable,
    KubeconfigRefused,
    MemberError,
    KubeError,
    requests.RequestException,
)

REFUSED = (401, 403)
"""What a member's API server answers a token it no longer accepts, or a role it lacks."""


def why_unread(member: str, err: Exception) -> str:
    """Why `member` could not be read, naming the member: a pool's condition gathers every
    member's reason in one message, so each must say whose it is. A refusal also says where the
    credentials it refused live, the one place a platform team fixes it."""
    if isinstance(err, MemberUnreachable | MemberError):
        return str(err)  # already names the member and the field
    said = f"member {member}: {err}"
    if isinstance(err, KubeError) and err.status in REFUSED:
        said += (
            f" (the credentials in secrets/{secret_name(member)} were refused; docs/fleet.md,"
            ' "Rotating the gateway\'s token")'
        )
    return said


@dataclass
class PassReport:
    """What one pass did, for the log, the metrics and the tests."""

    members: list[str] = field(default_factory=list)
    """The Active members read and summed."""
    unreadable: dict[str, str] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    failed_writes: dict[str, str] = field(default_factory=dict)
    unmirrored: dict[str, str] = field(default_factory=dict)
    """Pools a member lacks namespaces for (or whose members' LocalQueues could not be listed),
    with what their condition says."""
    kept_lost: dict[str, list[str]] = field(default_factory=dict)
    """Per pool, the lost members it still lists (`workergateway.lost`)."""


def orphaned_spec(spec: Mapping[str, Any]) -> Obj:
    """`spec` of a pool no Active member has: no member counted, views and quota at zero. The
    members stay (a MultiKueueConfig may not be empty), and so does the fleet type's spec."""
    zeroed = copy.deepcopy(dict(spec))
    zeroed.update(shown_views(AcceleratorViews(), View()))
    zeroed["quota"] = [
        {"name": entry.get("name"), "nominalQuota": "0"}
        for entry in spec.get("quota") or []
        if isinstance(entry, Mapping)
    ]
    members = [name for name in spec.get("members") or [] if isinstance(name, str)]
    zeroed["memberSummary"] = f"0/{len(members)}"
    zeroed["memberViews"] = [
        {**entry, "counted": False}
        for entry in spec.get("memberViews") or []
        if isinstance(entry, Mapping)
    ]
    return zeroed


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off for one pass. A pass decodes every member's lists (ten
    members of a thousand nodes: about 1 MiB of JSON) and reads them at once, so the
    collections that the pass's allocations trigger would walk those young lists over and over,
    finding nothing: what a pass makes is acyclic and freed by reference counting, or kept
    (`members.Remembered`). Up to about a fifth of the first pass after a start (0 to 18 % in
    side-by-side runs, docs/benchmarks.md, "Fleet"). The collector is on again after the pass,
    as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _since(obj: Mapping[str, Any]) -> datetime | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ORPHANED_SINCE)
    try:
        return datetime.strptime(str(raw), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None  # none, or not ours: counting starts again from now


def _lost_since(obj: Mapping[str, Any]) -> str | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(MEMBERS_LOST_SINCE)
    return None if raw is None else str(raw)


class Gateway:
    """Reads, sums and writes; one `run_pass` at a time."""

    def __init__(
        self,
        manager: Api,
        members: MemberClients,
        reporter: Reporter,
        grace: float = WORKER_LOST_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        readers: int = 8,
        fleet_namespace: str = FLEET_NAMESPACE,
        watches: Follower | None = None,
    ) -> None:
        self.manager = manager
        self.members = members
        self.reporter = reporter
        self.grace = grace
        self.clock = clock
        self.readers = readers
        """Members read at once."""
        self.own_namespaces = frozenset({fleet_namespace})
        """The manager's namespaces no member is asked to mirror."""
        self.watches = watches
        """Told the Active members each pass, so that a member's change wakes the next."""
        self.passes = 0
        self.pools = 0
        """Pools of the last pass's answer."""
        self.last: PassReport = PassReport()

    @staticmethod
    def _read(
        member: tuple[MemberState, Api],
    ) -> tuple[tuple[MemberPool, ...], Queues | str] | str:
        """An Active member's pools and its LocalQueues (or why those could not be listed), or
        why its pools cannot be read."""
        state, client = member
        try:
            types = client.list(WORKER_API, INSTANCE_TYPE)
            # Only a pool's own queue holds its quota; another queue of the member (a tenant's,
            # malformed or not) is none of the fleet's business.
            names = {str((obj.get("metadata") or {}).get("name")) for obj in types}
            queues = [
                obj
                for obj in client.list(KUEUE_API, CLUSTER_QUEUE)
                if (obj.get("metadata") or {}).get("name") in names
            ]
            pools = read_pools(state.name, types, queues)
        except READ_ERRORS as err:
            return why_unread(state.name, err)
        # The namespace report only: a member whose LocalQueues cannot be listed (a member-side
        # role from before the report, say) still counts in the sums.
        try:
            return pools, queues_of(client.list(KUEUE_API, LOCAL_QUEUE))
        except (KubeError, requests.RequestException) as err:
            return pools, str(err)

    def _unreadable(self, cluster: Obj, why: str | Exception, report: PassReport) -> None:
        """Counted as inactive: the gateway cannot vouch for its views. Left out of the sums
        whole, as an inactive member is, and said."""
        name = str((cluster.get("metadata") or {}).get("name") or "?")
        message = why if isinstance(why, str) else why_unread(name, why)
        report.unreadable[name] = message
        log.warning("member %s left out of this pass: %s", name, message)
        self.reporter.event(cluster, "Warning", UNREADABLE, message, action="Read")

    def run_pass(self) -> PassReport:
        """One pass; a failed write is left to the next pass, a failed manager read raises."""
        with collector_paused():
            return self._pass()

    def _pass(self) -> PassReport:
        report = PassReport()
        read: list[tuple[MemberState, tuple[MemberPool, ...]]] = []
        active: list[tuple[Obj, tuple[MemberState, Api]]] = []
        # On this thread: the manager's client (the Secrets' reads) is not shared between
        # threads.
        clusters = self.manager.list(KUEUE_API, MULTIKUEUE_CLUSTER)
        for cluster in clusters:
            try:
                state = read_cluster(cluster)
                if state.active:
                    active.append((cluster, (state, self.members(state.name))))
                else:
                    read.append((state, ()))
            except READ_ERRORS as err:
                self._unreadable(cluster, err, report)
        if self.watches is not None:
            # Before the reads: a change that lands while this pass reads the member wakes the
            # next one. A member that does not answer keeps its watch (it retries, and rings
            # when the member is back); one without a client has none.
            self.watches.follow({state.name: client for _, (state, client) in active})
        # The members side by side, each on its own client: one slow to answer (up to its
        # client's timeouts) holds up the pass once, not once per member behind it.
        with ThreadPoolExecutor(max_workers=max(1, min(self.readers, len(active)))) as workers:
            answers = list(workers.map(self._read, [member for _, member in active]))
        local_queues: dict[str, Queues | str] = {}
        for (cluster, (state, _)), answer in zip(active, answers, strict=True):
            if isinstance(answer, str):
                self._unreadable(cluster, answer, report)
                continue
            report.members.append(state.name)
            read.append((state, answer[0]))
            local_queues[state.name] = answer[1]
        fleet = fleet_pools(read)
        existing = {
            str(obj["metadata"]["name"]): obj
            for obj in self.manager.list(FLEET_POOL_API, FLEET_POOL)
        }
        conflicts: dict[str, str] = {}
        for conflict in fleet.conflicts:
            # Its last FleetPool stays as it was: the members' disagreement is not the fleet's
            # answer, and the manager's queue keeps dispatching as before.
            conflicts[conflict.pool] = str(conflict)
            report.conflicts.append(conflict.pool)
            log.warning("%s", conflict)
            if conflict.pool in existing:
                self.reporter.event(
                    existing[conflict.pool], "Warning", CONFLICT, str(conflict), action="Sum"
                )
        # Every member with a MultiKueueCluster that this pass did not read and sum: a pool
        # keeps listing those it listed for the grace (`workergateway.lost`).
        summed = set(report.members)
        lost = {
            name
            for cluster in clusters
            if (name := str((cluster.get("metadata") or {}).get("name") or "")) not in summed
        }
        fresh: dict[str, Obj] = {}
        """What the API server answered to this pass's writes (uid, generation)."""
        for name, pool in fleet.pools.items():
            have = existing.get(name)
            want = self._keeping_lost(pool, have, lost, report)
            if (
                have is not None
                and have.get("spec") == want["spec"]
                and _since(have) is None
                and _lost_since(have) == _lost_since(want)
            ):
                continue
            written = self._write(want, report, report.applied)
            if written is not None:
                fresh[name] = written
        keep = set(fleet.pools) | set(report.conflicts)
        for name, obj in sorted(existing.items()):
            if name not in keep:
                self._orphan(name, obj, report)
        # Which members each pool's namespaces are judged on: a summed pool's members, a
        # conflicting pool's last ones (those still read); an orphaned pool has none.
        judged = {name: list(pool.members) for name, pool in fleet.pools.items()}
        for name in report.conflicts:
            spec = (existing.get(name) or {}).get("spec") or {}
            judged[name] = [m for m in spec.get("members") or [] if m in local_queues]
        for name in report.orphaned:
            judged.setdefault(name, [])
        manager_queues = self.manager.list(KUEUE_API, LOCAL_QUEUE) if judged else []
        for name, members in sorted(judged.items()):
            held = fresh.get(name) or existing.get(name)
            if held is None or name in report.failed_writes:
                continue  # no object to hold a status; the next pass writes both
            mirrored = mirroring(name, members, manager_queues, local_queues, self.own_namespaces)
            if not mirrored.complete:
                report.unmirrored[name] = mirrored.message()
            conditions = pool_conditions(report.unreadable, conflicts.get(name), mirrored)
            # The conditions as listed before this pass's writes (an apply of the spec leaves
            # them as they were), the generation as it is now.
            before = ((existing.get(name) or held).get("status") or {}).get("conditions")
            self._report(held, before, conditions, report)
            if mirrored.missing:
                self.reporter.event(
                    held, "Warning", NAMESPACE_MISSING, mirrored.message(), action="Mirror"
                )
        self.passes += 1
        self.pools = len(fleet.pools)
        self.last = report
        return report

    def _keeping_lost(
        self, pool: FleetPool, have: Obj | None, lost: set[str], report: PassReport
    ) -> Obj:
        """The pool's `FleetPool`, listing after its members the lost ones it listed before
        for the grace, with when each was first seen lost. They count in no sum (they were not
        read) and have no entry in `memberViews`, so `memberSummary` shows them as members
        that do not count (`1/2 east`)."""
        spec = (have or {}).get("spec") or {}
        listed = [name for name in spec.get("members") or [] if isinstance(name, str)]
        raw = _lost_since(have or {})
        try:
            since = parse_lost_since(raw)
        except ValueError as err:
            # Not ours to read (edited by hand, say): counting starts again from now, which keeps
            # a lost member listed longer, never shorter, than the grace.
            log.warning("fleetpools/%s: %s; counting the lost members from now", pool.name, err)
            since = {}
        orphaned = _since(have or {})
        if orphaned is not None:
            # Back from no Active member: its lost members were lost since the pool was orphaned.
            since = {member: orphaned for member in listed} | since
        kept = keep_lost(
            listed,
            pool.members,
            lost,
            since,
            self.clock(),
            timedelta(seconds=self.grace),
            room=MAX_MEMBERS - len(pool.members),
        )
        for member in kept.dropped:
            log.info("fleetpools/%s: lost member %s listed no more", pool.name, member)
        if not kept.members:
            return pool.object()
        report.kept_lost[pool.name] = list(kept.members)
        want = dataclasses.replace(pool, members=pool.members + kept.members).object()
        annotations = {MEMBERS_LOST_SINCE: render_lost_since(kept.lost_since)}
        return {**want, "metadata": {"name": pool.name, "annotations": annotations}}

    def _orphan(self, name: str, obj: Obj, report: PassReport) -> None:
        now = self.clock()
        since = _since(obj) or now
        if now - since >= timedelta(seconds=self.grace):
            try:
                self.manager.delete(FLEET_POOL_API, FLEET_POOL, name)
            except (KubeError, requests.RequestException) as err:
                report.failed_writes[name] = str(err)
                log.warning("could not delete fleetpools/%s: %s (next pass again)", name, err)
                return
            report.deleted.append(name)
            log.info("fleetpools/%s deleted: no Active member has had the pool", name)
            return
        report.orphaned.append(name)
        want = {
            "apiVersion": FLEET_POOL_API,
            "kind": FLEET_POOL,
            "metadata": {"name": name, "annotations": {ORPHANED_SINCE: stamp(since)}},
            "spec": orphaned_spec(obj.get("spec") or {}),
        }
        if obj.get("spec") != want["spec"] or _since(obj) != since:
            self._write(want, report, report.applied)

    def _report(
        self, held: Obj, before: Any, conditions: list[Condition], report: PassReport
    ) -> None:
        """The pool's status conditions, written when they differ from those it holds
        (`before`)."""
        name = held["metadata"]["name"]
        merged = merge(before, conditions, generation_of(held), stamp(self.clock()))
        if merged == before:
            return
        status = {
            "apiVersion": FLEET_POOL_API,
            "kind": FLEET_POOL,
            "metadata": {"name": name},
            "status": {"conditions": merged},
        }
        try:
            self.manager.apply(status, FIELD_MANAGER, subresource="status")
        except (KubeError, requests.RequestException) as err:
            report.failed_writes[name] = str(err)
            log.warning("could not apply fleetpools/%s/status: %s (next pass again)", name, err)

    def _write(self, obj: Obj, report: PassReport, done: list[str]) -> Obj | None:
        """The object as the API server answered the apply, or None when it failed."""
        name = obj["metadata"]["name"]
        try:
            written = self.manager.apply(obj, FIELD_MANAGER)
        except (KubeError, requests.RequestException) as err:
            report.failed_writes[name] = str(err)
            log.warning("could not apply fleetpools/%s: %s (next pass again)", name, err)
            return None
        done.append(name)
        return written
