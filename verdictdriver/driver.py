"""The serialized loop that answers `gpustack-node-devices`.

Kueue owns a Workload's status, so no Metacontroller hook may write it (docs/architecture.md, "Why
the hooks are shaped this way"). This loop judges one Workload at a time with the pure verdict
(`chain.verdicts.judge`) and applies only its own `status.admissionChecks` entries by server-side
apply: its own field manager, `force` (Kueue co-owns the entry after every reset), and
`resourceVersion` (a stale read fails with 409 instead of overwriting). It keeps the AdmissionCheck
Active, and a Lease (`lease`) makes sure that of all replicas only one judges: two judges could each
promise the same free card.

A verdict reads no API: Workloads, AdmissionChecks, ResourceFlavors, Nodes, Devices and bound
Pods come from watch-fed caches (`caches`), and its only request is the write, which a few
threads make while the loop decides the next (`writes`; a Ready counts as promised from the
moment it is decided, and is taken back if its write fails). A pass runs as soon
as the Workload cache changes and at least every `--period` seconds (the resync tick, which also
renews the Lease: from a thread of its own while held, so no verdict waits for it). An event
pass judges only the Workloads whose object moved since they were last judged; a tick judges
every waiting one again, so a card freed on a node turns a Retry into Ready within a period.
Followers keep their caches warm and judge nothing. A verdict looks at the Nodes Kueue assigned
(found by hostname in an index of the Node cache), or at the flavor's pool when an assignment
names no nodes, and at those nodes' Devices and Pods (indexed by node).

Who holds which cards (`chain.holdings.Holdings`) and which Workloads wait for a verdict are
kept across passes and read again only for the Workloads that moved, then updated after each
verdict: each verdict sees the promises of the ones before it, and a burst of n Workloads costs
O(n) parsing, not O(n^2).

The ledger a verdict judges with is, card by card, the busier of the published `Devices.status`
and the one the node's Pods' allocation annotations add up to (`ledger_merge`): the node
agent's write lags the annotations, and a card granted a moment ago must not be promised again.
The verdict also counts a promised Pod as taken until its allocation record reaches the Pod
(`charged_pods`) as *our Pod cache* shows it: a record that reached the API but not yet the cache
still counts, as a promise, so a lagging cache can only overstate what is taken. A Ready we
wrote is remembered (`Promises`) until the Workload cache shows it, for the same reason. A record
the API server would not take (refused for its Pod) is listed by the node agent beside the ledger
that charges it (`Devices.status.unrecorded`): the verdict reads it in place of the Pod's
annotation (`with_unrecorded`), for the rebuilt ledger and the promised count alike, so those
cards count once and the Pod is not a promise forever.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import requests

from chain import fields
from chain.charged_pods import charged_pods
from chain.charging import flavor_scope
from chain.devices import Devices
from chain.holdings import Holdings
from chain.labels import HOSTNAME
from chain.ledger import UnrecordedRecord
from chain.ledger_rebuild import PodAllocations, rebuild_status, with_unrecorded
from chain.manufacturers import ManufacturerTable, default_manufacturers
from chain.queues import NODE_DEVICES_CONTROLLER
from chain.verdicts import Snapshot, Verdict, judge
from chain.workload_state import State
from kubeapi import Kube, KubeError, Obj
from kubeapi.events import WARNING, EventRecorder
from kubeapi.watch import Cache, key_of
from verdictdriver.caches import Caches
from verdictdriver.entries import active_patch, as_written, now_text, verdict_patch
from verdictdriver.health import Heartbeat
from verdictdriver.lease import Elector
from verdictdriver.ledger_merge import busier_ledger
from verdictdriver.metrics import (
    VERDICT_SECONDS,
    VERDICTS,
    WRITE_FAILURES,
    WRITE_SECONDS,
    since,
)
from verdictdriver.promises import Promises
from verdictdriver.workloads import (
    assigned_hosts,
    controllers,
    metadata,
    own_flavors,
    owned_checks,
    reserved_at,
    to_judge,
)
from verdictdriver.writes import Write, Writers

log = logging.getLogger("admission-driver")

FIELD_MANAGER = "gpustack-admission-driver"
"""Owns our `admissionChecks` entries and the AdmissionCheck's Active condition."""
EVENTS_CONTROLLER = "gpustack.ai/admission-driver"
RETRY_REASON = "NodeDevicesRetry"


def write_verdict(kube: Kube, body: Obj) -> Obj:
    """Apply a verdict's entries (`entries.verdict_patch`), its round trip timed."""
    with WRITE_SECONDS.time():
        return kube.apply(body, FIELD_MANAGER, subresource="status")


def judged_ledger(devices: Devices, pods: Iterable[PodAllocations], release: bool) -> Devices:
    """The node's Devices with, per card, the busier of its published and its Pods' ledger."""
    rebuilt = rebuild_status(devices.spec, pods, release).status
    return replace(devices, status=busier_ledger(devices.spec, devices.status, rebuilt))


@dataclass
class Driver:
    kube: Kube
    elector: Elector
    caches: Caches
    """Everything a verdict reads, kept current by watches (`caches`)."""
    table: ManufacturerTable = field(default_factory=default_manufacturers)
    promises: Promises = field(default_factory=Promises)
    release_terminated: bool = True
    """`GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`, as the node agent rebuilds the ledger."""
    checks: dict[str, str] = field(default_factory=dict)
    """AdmissionCheck name -> controller, as of the last pass."""
    judged: dict[tuple[str, str], str] = field(default_factory=dict)
    """Workload -> the resourceVersion last judged; an event pass skips those unchanged."""
    holdings: Holdings = field(default_factory=Holdings)
    """Who holds which cards, kept current across passes (`track`)."""
    waiting: dict[tuple[str, str], tuple[tuple[str, tuple[str, str]], Obj]] = field(
        default_factory=dict
    )
    """The Workloads `to_judge`: key -> (the order Kueue reserved them in, the object)."""
    indexed: dict[tuple[str, str], str] = field(default_factory=dict)
    """Workload -> the resourceVersion `holdings` and `waiting` were brought up to."""
    malformed: set[tuple[str, str]] = field(default_factory=set)
    """Workloads whose holdings cannot be read: while any is left, nothing is promised."""
    ledgers: dict[str, tuple[tuple[str, ...], Devices | None]] = field(default_factory=dict)
    """Node -> (the versions of its Devices and Pods, the ledger judged from them)."""
    writers: Writers | None = None
    """Apply verdicts off the loop (`writes`); None: each verdict waits for its write."""
    inflight: dict[tuple[str, str], Write] = field(default_factory=dict)
    """Verdicts on their way, by Workload."""
    events: EventRecorder | None = None
    """Where a Retry becomes an Event on its Workload (`kubectl describe workload`)."""
    seen: int | None = None
    """The Workload cache's change number the last complete pass was brought up to; an event
    pass then reads only what changed since (`Cache.changed_since`). None: read everything."""
    rejudge: set[tuple[str, str]] = field(default_factory=set)
    """Workloads to read and judge again on the next event pass though the cache shows no change
    (a verdict whose write failed)."""
    renew_aside: bool = False
    """Renew a Lease this replica holds from a thread of its own, off the loop; taking the
    Lease, and renewing one about to lapse, stay on it. `still_leading` is counted from before
    each renewal's read, so a renewal still on its way only shortens what the loop trusts."""
    _renewal: threading.Thread | None = None

    @property
    def cache(self) -> Cache:
        """The Workload cache: its changes wake the loop."""
        return self.caches.workloads

    def ensure_active(self, checks: Iterable[Obj]) -> None:
        for ac in checks:
            if (ac.get("spec") or {}).get("controllerName") != NODE_DEVICES_CONTROLLER:
                continue
            body = active_patch(ac, now_text())
            if body is not None:
                self.kube.apply(body, FIELD_MANAGER, subresource="status")
                log.info("marked AdmissionCheck %s Active", metadata(ac).get("name"))

    def step(self, tick: bool = True) -> bool:
        """One pass: take in the writes that came back; on a tick lead (renewing when due, or
        when the Lease is about to lapse) and keep the check Active; then, leading, judge in turn
        each waiting Workload (on a tick all of them, else those that moved). True once every
        cache has been filled (the pass saw the cluster)."""
        synced = self.caches.synced
        self.settle()
        elector = self.elector
        lapsing = elector.leading and not elector.still_leading()
        due = tick and elector.renewal_due()
        if due and elector.leading and not lapsing and self.renew_aside:
            self._renew_aside()  # two round trips a verdict arriving now need not wait for
        elif (due or lapsing) and not elector.lead():
            return synced
        if tick and elector.leading and self.caches.checks.synced:
            self.ensure_active(self.caches.checks.items())
        if not synced or not elector.still_leading():
            return synced
        checks = controllers(self.caches.checks.items())
        if checks != self.checks:
            self.checks, self.indexed = checks, {}  # which Workloads wait for us may change
            self.seen = None
        # Noted before reading: a change that lands meanwhile is read again next pass.
        mark = self.caches.workloads.changes
        candidates = None if tick else self._take_changes()
        self.seen = None  # until this pass completes: one cut short is followed by a full one
        if candidates is None:
            workloads = self.promises.merged(self.caches.workloads.items())
            present = {key_of(w) for w in workloads}
            self.judged = {k: v for k, v in self.judged.items() if k in present}
            self.rejudge.clear()
            self.track(workloads)
        if tick:
            self.ledgers = {n: v for n, v in self.ledgers.items() if self._devices(n) is not None}
        if self.malformed:
            log.warning(
                "no verdicts: cannot read the cards held by %s",
                ", ".join("/".join(k) for k in sorted(self.malformed)),
            )
            return True
        waiting = (
            self.waiting.values()
            if candidates is None
            else [self.waiting[key] for key in candidates if key in self.waiting]
        )
        for _, wl in sorted(waiting, key=lambda item: item[0]):
            if key_of(wl) in self.inflight:
                continue  # its verdict is on its way; judged again once the cache shows it
            version = str(metadata(wl).get("resourceVersion", ""))
            if not tick and self.judged.get(key_of(wl)) == version:
                continue  # unchanged since its verdict; the next tick looks again
            if not self.elector.still_leading():
                return True  # renew first (next pass) rather than judge on a Lease about to lapse
            self.judged[key_of(wl)] = version
            written = self.decide(wl, self.checks)
            if written is not None:
                # Our own write comes back as an event: that is no reason to judge again.
                self.judged[key_of(wl)] = str(metadata(written).get("resourceVersion", ""))
                # The next verdict of this pass must see the cards this one promised (a write
                # still on its way keeps the version it was judged at: read it all the same).
                self.indexed.pop(key_of(wl), None)
                self.track([written], everyone=False)
        self.seen = mark
        return True

    def _take_changes(self) -> list[tuple[str, str]] | None:
        """An event pass: bring `holdings` and `waiting` up to the Workloads that changed since
        the last complete pass (and those to judge again); their keys, or None when everything
        must be read (no complete pass yet, or further back than the cache keeps count of)."""
        if self.seen is None:
            return None
        changed = self.caches.workloads.changed_since(self.seen)
        if changed is None:
            return None
        keys = list(dict.fromkeys([*changed, *sorted(self.rejudge)]))
        self.rejudge.clear()
        present = []
        for key in keys:
            wl = self.promises.merged_one(key, self.caches.workloads.get(key))
            if wl is None:
                self.judged.pop(key, None)
                self._forget(key)
            else:
                present.append(wl)
        self.track(present, everyone=False)
        return keys

    def _forget(self, key: tuple[str, str]) -> None:
        """A Workload gone from the cache: it holds nothing and waits for nothing."""
        self.holdings.forget(key)
        self.waiting.pop(key, None)
        self.indexed.pop(key, None)
        self.malformed.discard(key)

    def _renew_aside(self) -> None:
        if self._renewal is not None and self._renewal.is_alive():
            return

        def renew() -> None:
            try:
                self.elector.lead()
            except (KubeError, requests.RequestException) as err:
                log.warning("lease renewal failed: %s", err)

        self._renewal = threading.Thread(target=renew, name="lease-renewal", daemon=True)
        self._renewal.start()

    def track(self, workloads: Sequence[Obj], everyone: bool = True) -> None:
        """Bring `holdings` and `waiting` up to `workloads`, reading only those that moved
        since; with `everyone`, the Workloads missing from `workloads` are gone."""
        if everyone:
            present = {key_of(w) for w in workloads}
            for key in [k for k in self.indexed if k not in present]:
                self._forget(key)
            self.malformed &= present
        for wl in workloads:
            key = key_of(wl)
            version = str(metadata(wl).get("resourceVersion", ""))
            if self.indexed.get(key) == version:
                continue
            self.indexed[key] = version
            if to_judge([wl], self.checks):
                self.waiting[key] = ((reserved_at(wl), key), wl)
            else:
                self.waiting.pop(key, None)
            try:
                self.holdings.update(wl, self.table)
            except ValueError as err:
                log.warning("cannot read the cards %s/%s holds: %s", *key, err)
                self.malformed.add(key)
            else:
                self.malformed.discard(key)

    def decide(self, wl: Obj, checks: Mapping[str, str]) -> Obj | None:
        """Judge `wl` and write the verdict; the Workload as written (as it will be, when the
        write is on its way), or None when nothing was written."""
        ns, name = key_of(wl)
        try:
            snapshot = self.snapshot(wl)
            verdict = judge(wl, snapshot, self.table)
        except ValueError as err:
            log.warning("cannot judge %s/%s: %s", ns, name, err)
            return None
        body = verdict_patch(wl, owned_checks(wl, checks), verdict, now_text())
        if body is None:
            return None
        if self.writers is not None:
            reply = self.writers.submit(partial(write_verdict, body=body))
            self.inflight[(ns, name)] = Write(wl, verdict, reply)
            intended = as_written(wl, body)
            if verdict.state == State.READY:
                self.promises.remember(wl, intended)  # promised now; taken back if it fails
            return intended
        try:
            written = write_verdict(self.kube, body)
        except KubeError as err:
            if err.status in (404, 409):
                self._moved_on(ns, name, err.status)
                return None
            raise
        self._wrote(wl, verdict, written)
        return written

    def settle(self) -> None:
        """Take in the writes that came back: log them, and take back what a failed one
        promised (it is judged again from the cache)."""
        for key, write in list(self.inflight.items()):
            if not write.reply.done():
                continue
            del self.inflight[key]
            try:
                written = write.reply.result()
            except (KubeError, requests.RequestException) as err:
                WRITE_FAILURES.inc()
                self.promises.written.pop(key, None)
                self.indexed.pop(key, None)
                self.judged.pop(key, None)
                self.rejudge.add(key)
                if isinstance(err, KubeError) and err.status in (404, 409):
                    self._moved_on(*key, err.status)
                else:
                    log.warning("verdict on %s/%s not written: %s", *key, err)
                continue
            self._wrote(write.workload, write.verdict, written)
            # Our own write comes back as an event: that is no reason to judge again.
            self.judged[key] = str(metadata(written).get("resourceVersion", ""))

    def _wrote(self, wl: Obj, verdict: Verdict, written: Obj) -> None:
        VERDICTS.labels(str(verdict.state)).inc()
        waited = since(reserved_at(wl))
        if waited is not None:
            VERDICT_SECONDS.labels(str(verdict.state)).observe(waited)
        log.info(
            "%s verdict %s/%s: %s %s",
            self.elector.identity,
            *key_of(wl),
            verdict.state,
            verdict.message,
        )
        if verdict.state == State.READY:
            self.promises.remember(wl, written)
        elif verdict.state == State.RETRY and self.events is not None:
            # Written only when the verdict changed, so a Workload waiting on the same card
            # does not repeat it; the recorder folds repeats into one Event's count anyway.
            self.events.event(written, WARNING, RETRY_REASON, verdict.message)

    def _moved_on(self, ns: str, name: str, status: int) -> None:
        # The cache brings the newer object, and that event a new pass.
        log.info("%s/%s moved on (%s); judged again when the cache shows it", ns, name, status)

    def snapshot(self, wl: Obj) -> Snapshot:
        """What the verdict on `wl` needs, from the caches: the flavors, the ledgers of the nodes
        Kueue assigned (or of the flavor's pool when it named none) and those nodes' Pods."""
        caches = self.caches
        flavors = caches.flavor_index.get()
        hosts = assigned_hosts(wl, self.table)
        nodes: dict[str, Obj] = {}
        devices: dict[str, Obj] = {}
        if hosts is not None:
            by_hostname = caches.hostname_index.get()
            for node_name in sorted({n for h in hosts for n in by_hostname.get(h, [])}):
                if (node := caches.nodes.get(("", node_name))) is not None:
                    nodes[node_name] = node
                if (obj := self._devices(node_name)) is not None:
                    devices[node_name] = obj
        else:
            for flavor in sorted(own_flavors(wl, self.table)):
                scope = flavor_scope(flavors.get(flavor), flavor, self.table)
                if scope is None or not scope.akey:
                    continue  # the verdict says why
                for obj in caches.devices.items():
                    labels = metadata(obj).get("labels") or {}
                    if all(labels.get(k) == v for k, v in scope.selector.items()):
                        devices[metadata(obj)["name"]] = obj
            for node_name in sorted(devices):
                if (found := caches.nodes.get(("", node_name))) is not None:
                    nodes[node_name] = found
        hostnames = {
            n: str((metadata(obj).get("labels") or {}).get(HOSTNAME, ""))
            for n, obj in nodes.items()
        }
        on_node = caches.pod_index.get()
        # A Pod whose record the node agent could not land is charged by the agent's ledger and
        # listed beside it: read that record in place of the Pod's annotation, so the ledger
        # rebuilt here and the count of promised Pods both see it, and its cards count once.
        pods = {
            n: with_unrecorded(on_node.get(n, []), _unrecorded(n, devices[n]))
            for n in sorted(devices)
        }
        ledgers = [
            ledger
            for node_name, obj in devices.items()
            if (ledger := self.ledger(node_name, obj, pods[node_name])) is not None
        ]
        everyone = [pod for n in sorted(pods) for pod in pods[n]]
        charged = charged_pods(everyone, hostnames, self.table)
        return Snapshot(flavors, ledgers, hostnames, charged=charged, holdings=self.holdings)

    def ledger(self, node_name: str, obj: Obj, pods: Sequence[Obj]) -> Devices | None:
        """The node's judged ledger (`judged_ledger`), computed again only once its Devices or
        one of its Pods changed; None when its Devices cannot be read."""
        versions = tuple(str(metadata(o).get("resourceVersion", "")) for o in (obj, *pods))
        seen = self.ledgers.get(node_name)
        if seen is not None and seen[0] == versions:
            return seen[1]
        judged: Devices | None = None
        try:
            parsed = Devices.parse(obj)
        except ValueError as err:
            # A node whose ledger cannot be read offers no cards.
            log.warning("Devices %s unreadable: %s", node_name, err)
        else:
            judged = judged_ledger(parsed, _allocations(pods), self.release_terminated)
        self.ledgers[node_name] = (versions, judged)
        return judged

    def _devices(self, node_name: str) -> Obj | None:
        return self.caches.devices.get(("", node_name))


def _unrecorded(node_name: str, obj: Obj) -> tuple[UnrecordedRecord, ...]:
    """The records the node's agent charges from its journal (`Devices.status.unrecorded`)."""
    try:
        return UnrecordedRecord.parse_all(fields.child(obj, "status", ""))
    except ValueError as err:
        # `ledger` finds the same Devices unreadable: the node offers no cards, and its Pods
        # without a record on them stay promised.
        log.warning("Devices %s unreadable: %s", node_name, err)
        return ()


def _allocations(pods: Iterable[Obj]) -> list[PodAllocations]:
    out = []
    for pod in pods:
        try:
            out.append(PodAllocations.from_pod(pod))
        except ValueError as err:
            # Its claims cannot be counted; the published ledger still charges them.
            log.warning("pod %s/%s unreadable: %s", *key_of(pod), err)
    return out


def run(
    driver: Driver,
    period: float,
    heartbeat: Heartbeat | None = None,
    stop: Callable[[], bool] = lambda: False,
    freeze: bool = False,
) -> None:
    """Pass on every change of the Workload cache, and at least every `period` (the tick).

    With `freeze`, what the process holds once every cache is first listed (every Node, Devices
    and bound Pod of the cluster, most of what it will ever hold) is kept out of the garbage
    collector's later full passes (`gc.freeze`): each such pass would otherwise walk all of it,
    tens of milliseconds at a thousand nodes, in whichever verdict's path it fell."""
    next_tick = time.monotonic()
    while not stop():
        # Noted before the pass: a change that lands during it wakes the next one at once.
        seen = driver.cache.changes
        now = time.monotonic()
        tick = now >= next_tick
        if tick:
            next_tick = now + period
        try:
            current = driver.step(tick)
        except (KubeError, requests.RequestException) as err:
            log.warning("pass failed: %s", err)
        else:
            if heartbeat is not None and current:
                heartbeat.beat()
            if freeze and current:
                gc.collect()
                gc.freeze()
                freeze = False
        driver.cache.wait(seen, max(0.0, next_tick - time.monotonic()))
