"""`python -m hooks.admission.driver`: the serialized loop that answers `gpustack-node-devices`.

Kueue owns a Workload's status, so no Metacontroller hook may write it (DESIGN §2). This loop
judges one Workload at a time with the pure verdict (`chain.verdicts.judge`) and applies only
its own `status.admissionChecks` entries by server-side apply: its own field manager, `force`
(Kueue co-owns the entry after every reset), and `resourceVersion` (a stale read fails with 409
instead of overwriting). It keeps the AdmissionCheck Active, and a Lease (`lease`) makes sure
that of all replicas only one judges: two judges could each promise the same free card.

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
and the one the node's Pods' allocation annotations add up to (`chain.ledger_merge`): the node
agent's write lags the annotations, and a card granted a moment ago must not be promised again.
The verdict also counts a promised Pod as taken until its allocation record reaches the Pod
(`charged_pods`) as *our Pod cache* shows it: a record that reached the API but not yet the cache
still counts, as a promise, so a lagging cache can only overstate what is taken. A Ready we
wrote is remembered (`Promises`) until the Workload cache shows it, for the same reason.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import requests

from chain.apis import ADMISSION_CHECK, KUEUE_API
from chain.apis import WORKLOAD as WORKLOAD_KIND
from chain.charged_pods import charged_pods
from chain.charging import flavor_scope
from chain.devices import Devices
from chain.holdings import Holdings
from chain.labels import HOSTNAME
from chain.ledger_merge import busier_ledger
from chain.ledger_rebuild import PodAllocations, rebuild_status
from chain.manufacturers import ManufacturerTable, default_manufacturers
from chain.queues import NODE_DEVICES_CONTROLLER
from chain.settings import StartupEnv
from chain.verdicts import Snapshot, Verdict, judge
from chain.workload_state import State, check_state, needs_verdict, workload_shares
from hooks.admission.caches import Caches
from hooks.admission.health import Heartbeat, serve_health
from hooks.admission.lease import LEASE_NAMESPACE, LEASE_SECONDS, Elector
from hooks.admission.lifecycle import keep_lifecycle_in_background
from hooks.admission.metrics import (
    VERDICT_SECONDS,
    VERDICTS,
    WRITE_FAILURES,
    exposition,
    since,
    watch,
)
from hooks.admission.pool_cards import keep_pool_cards_in_background
from hooks.admission.seed import seed_in_background
from hooks.admission.writes import Write, Writers
from kubeapi import Kube, KubeError, Obj, logs
from kubeapi.events import WARNING, EventRecorder
from kubeapi.watch import Cache, key_of
from webhookcerts.keeper import Keeper, Target, keep_in_background

log = logging.getLogger("admission-driver")

FIELD_MANAGER = "gpustack-admission-driver"
EVENTS_CONTROLLER = "gpustack.ai/admission-driver"
RETRY_REASON = "NodeDevicesRetry"
"""Owns our `admissionChecks` entries and the AdmissionCheck's Active condition."""
RETRY_AFTER_SECONDS = 30
ACTIVE_MESSAGE = "The admission check is active"


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- pure: which Workloads, which entries ----------------------------------------------------


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def controllers(admission_checks: Iterable[Obj]) -> dict[str, str]:
    """AdmissionCheck name -> its `spec.controllerName`."""
    return {
        str(_meta(ac).get("name", "")): str((ac.get("spec") or {}).get("controllerName", ""))
        for ac in admission_checks
    }


def owned_checks(
    workload: Obj, checks: Mapping[str, str], controller: str = NODE_DEVICES_CONTROLLER
) -> list[str]:
    """Names of the Workload's `admissionChecks` entries whose check is ours."""
    entries = (workload.get("status") or {}).get("admissionChecks") or []
    return [
        str(e.get("name"))
        for e in entries
        if isinstance(e, dict) and checks.get(str(e.get("name"))) == controller
    ]


def _reserved_at(workload: Obj) -> str:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "QuotaReserved":
            return str(cond.get("lastTransitionTime", ""))
    return ""


def to_judge(workloads: Iterable[Obj], checks: Mapping[str, str]) -> list[Obj]:
    """Workloads waiting for our verdict, in the order Kueue reserved their quota.

    Reserved, not evicted, finished, deactivated or admitted (`needs_verdict`); with an entry
    of ours that is not Ready yet (a Ready stays promised until Kueue admits)."""
    out = []
    for wl in workloads:
        mine = owned_checks(wl, checks)
        try:
            if not mine or not needs_verdict(wl):
                continue
            if all(check_state(wl, name) == State.READY for name in mine):
                continue
        except ValueError as err:
            # One malformed Workload must not stop the verdicts of all the others.
            log.warning("skipping %s/%s: %s", *key_of(wl), err)
            continue
        out.append(wl)
    return sorted(out, key=lambda w: (_reserved_at(w), key_of(w)))


def _entry(workload: Obj, name: str) -> Obj | None:
    for e in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(e, dict) and e.get("name") == name:
            return e
    return None


def check_entry(previous: Obj | None, name: str, verdict: Verdict, now: str) -> Obj:
    """Our entry for `verdict`; the transition time moves only when the state does."""
    state = str(verdict.state)
    kept = previous is not None and previous.get("state") == state
    entry: Obj = {
        "name": name,
        "state": state,
        "message": verdict.message,
        "lastTransitionTime": (previous or {}).get("lastTransitionTime") if kept else now,
    }
    if verdict.state == State.RETRY:
        entry["requeueAfterSeconds"] = RETRY_AFTER_SECONDS
    return entry


def _same(previous: Obj | None, entry: Obj) -> bool:
    return previous is not None and all(
        previous.get(k) == entry.get(k) for k in ("state", "message", "requeueAfterSeconds")
    )


def verdict_patch(workload: Obj, names: Sequence[str], verdict: Verdict, now: str) -> Obj | None:
    """The apply body for our entries, or None when every one already says this."""
    entries = [check_entry(_entry(workload, n), n, verdict, now) for n in names]
    if all(_same(_entry(workload, e["name"]), e) for e in entries):
        return None
    meta = _meta(workload)
    return {
        "apiVersion": KUEUE_API,
        "kind": WORKLOAD_KIND,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            # A stale read fails with 409 rather than answering a Workload that moved on.
            "resourceVersion": meta.get("resourceVersion"),
        },
        "status": {"admissionChecks": entries},
    }


def active_patch(check: Obj, now: str) -> Obj | None:
    """The apply body that marks an AdmissionCheck Active, or None when it already is."""
    meta = _meta(check)
    generation = meta.get("generation")
    for cond in (check.get("status") or {}).get("conditions") or []:
        if (
            isinstance(cond, dict)
            and cond.get("type") == "Active"
            and cond.get("status") == "True"
            and cond.get("reason") == "Active"
            and cond.get("observedGeneration") == generation
        ):
            return None
    condition: Obj = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": ACTIVE_MESSAGE,
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return {
        "apiVersion": KUEUE_API,
        "kind": ADMISSION_CHECK,
        "metadata": {"name": meta["name"]},
        "status": {"conditions": [condition]},
    }


# --- pure: what to read for one Workload ----------------------------------------------------


def own_flavors(workload: Obj, table: ManufacturerTable) -> set[str]:
    return {s.flavor for s in workload_shares(workload, table) if s.flavor}


def assigned_hosts(workload: Obj, table: ManufacturerTable) -> set[str] | None:
    """Hostnames Kueue assigned, or None when some PodSet's assignment names no nodes."""
    shares = [s for s in workload_shares(workload, table) if any(p.cards for p in s.per_pod)]
    if any(not s.node for s in shares):
        return None
    return {s.node for s in shares}


@dataclass
class Promises:
    """Readys this driver wrote, kept until the watch cache shows the Workload past that write.

    The cache lags the write; without this a Workload promised cards a moment ago would look
    Pending and its cards free to the next verdict."""

    written: dict[tuple[str, str], tuple[str, str, Obj]] = field(default_factory=dict)
    """(namespace, name) -> (uid, resourceVersion the write was made against, object written)."""

    def remember(self, before: Obj, after: Obj) -> None:
        meta = _meta(before)
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
        if str(_meta(seen).get("uid", "")) != uid:
            del self.written[key]  # recreated: nothing is promised any more
            return seen
        if str(_meta(seen).get("resourceVersion", "")) != before:
            del self.written[key]  # the cache includes our write (or a later change)
            return seen
        return after


def as_written(workload: Obj, body: Obj) -> Obj:
    """`workload` with the entries of `body` (a `verdict_patch`) in place of its own."""
    written = {e["name"]: e for e in body["status"]["admissionChecks"]}
    status = dict(workload.get("status") or {})
    entries = [
        written.pop(str(e.get("name")), e)
        for e in status.get("admissionChecks") or []
        if isinstance(e, dict)
    ]
    status["admissionChecks"] = [*entries, *written.values()]
    return {**workload, "status": status}


def judged_ledger(devices: Devices, pods: Iterable[PodAllocations], release: bool) -> Devices:
    """The node's Devices with, per card, the busier of its published and its Pods' ledger."""
    rebuilt = rebuild_status(devices.spec, pods, release).status
    return replace(devices, status=busier_ledger(devices.spec, devices.status, rebuilt))


# --- I/O ------------------------------------------------------------------------------------


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
                log.info("marked AdmissionCheck %s Active", _meta(ac).get("name"))

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
            version = str(_meta(wl).get("resourceVersion", ""))
            if not tick and self.judged.get(key_of(wl)) == version:
                continue  # unchanged since its verdict; the next tick looks again
            if not self.elector.still_leading():
                return True  # renew first (next pass) rather than judge on a Lease about to lapse
            self.judged[key_of(wl)] = version
            written = self.decide(wl, self.checks)
            if written is not None:
                # Our own write comes back as an event: that is no reason to judge again.
                self.judged[key_of(wl)] = str(_meta(written).get("resourceVersion", ""))
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
            version = str(_meta(wl).get("resourceVersion", ""))
            if self.indexed.get(key) == version:
                continue
            self.indexed[key] = version
            if to_judge([wl], self.checks):
                self.waiting[key] = ((_reserved_at(wl), key), wl)
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
            reply = self.writers.submit(
                lambda kube: kube.apply(body, FIELD_MANAGER, subresource="status")
            )
            self.inflight[(ns, name)] = Write(wl, verdict, reply)
            intended = as_written(wl, body)
            if verdict.state == State.READY:
                self.promises.remember(wl, intended)  # promised now; taken back if it fails
            return intended
        try:
            written = self.kube.apply(body, FIELD_MANAGER, subresource="status")
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
            self.judged[key] = str(_meta(written).get("resourceVersion", ""))

    def _wrote(self, wl: Obj, verdict: Verdict, written: Obj) -> None:
        VERDICTS.labels(str(verdict.state)).inc()
        waited = since(_reserved_at(wl))
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
                    labels = _meta(obj).get("labels") or {}
                    if all(labels.get(k) == v for k, v in scope.selector.items()):
                        devices[_meta(obj)["name"]] = obj
            for node_name in sorted(devices):
                if (found := caches.nodes.get(("", node_name))) is not None:
                    nodes[node_name] = found
        hostnames = {
            n: str((_meta(obj).get("labels") or {}).get(HOSTNAME, "")) for n, obj in nodes.items()
        }
        on_node = caches.pod_index.get()
        pods = {n: on_node.get(n, []) for n in sorted(devices)}
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
        versions = tuple(str(_meta(o).get("resourceVersion", "")) for o in (obj, *pods))
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hooks.admission.driver")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument("--identity", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument(
        "--period", type=float, default=1.0, help="resync period: seconds between ticks"
    )
    parser.add_argument("--lease-seconds", type=int, default=LEASE_SECONDS)
    parser.add_argument("--lease-namespace", default=LEASE_NAMESPACE)
    parser.add_argument("--health-port", type=int, default=8080, help="/healthz; -1: none")
    parser.add_argument(
        "--writers", type=int, default=4, help="verdict writes in flight at once; 0: one by one"
    )
    parser.add_argument(
        "--webhook-service",
        action="append",
        default=[],
        help="a webhook Service the serving certificate must name (repeat); none: the "
        "certificate is someone else's (e.g. cert-manager's) and nothing below is kept",
    )
    parser.add_argument("--webhook-secret", default="gpustack-webhook-tls")
    parser.add_argument(
        "--no-lifecycle",
        action="store_true",
        help="do not run the lifecycle keeper (hooks/admission/lifecycle.py) in this process",
    )
    parser.add_argument(
        "--no-pool-cards",
        action="store_true",
        help="do not run the pool-cards keeper (hooks/admission/pool_cards.py) in this process",
    )
    parser.add_argument(
        "--webhook-namespace",
        default=os.environ.get("POD_NAMESPACE", LEASE_NAMESPACE),
        help="where the webhook Services and the Secret live (default: $POD_NAMESPACE)",
    )
    parser.add_argument(
        "--mutating-webhook",
        action="append",
        default=[],
        help="a MutatingWebhookConfiguration whose caBundle must trust the Secret (repeat)",
    )
    parser.add_argument(
        "--validating-webhook",
        action="append",
        default=[],
        help="a ValidatingWebhookConfiguration whose caBundle must trust the Secret (repeat)",
    )
    args = parser.parse_args(argv)
    logs.setup()
    kube = Kube.from_environment(args.kubeconfig)
    # The elector's own client: its renewals run on a thread of their own (`renew_aside`), and
    # a `requests.Session` is not meant to be shared between threads.
    lease_kube = Kube.from_environment(args.kubeconfig)
    elector = Elector(lease_kube, args.identity, args.lease_seconds, args.lease_namespace)
    # Unhealthy once passes have failed or hung for a whole Lease duration and then some.
    # Unhealthy too until every cache has been listed: a verdict needs them all.
    heartbeat = Heartbeat(max(30.0, 2 * args.lease_seconds + 10 * args.period), started=False)
    if args.health_port >= 0:
        serve_health(heartbeat, args.health_port, metrics=exposition)
    seed_in_background(kube, os.environ)
    if args.webhook_service:
        target = Target(
            namespace=args.webhook_namespace,
            secret=args.webhook_secret,
            services=args.webhook_service,
            mutating=args.mutating_webhook,
            validating=args.validating_webhook,
        )
        keep_in_background(Keeper(kube, target))
    if not args.no_lifecycle:
        keep_lifecycle_in_background(kube)
    caches = Caches()
    caches.start(kube)
    if not args.no_pool_cards:
        keep_pool_cards_in_background(kube, caches.devices, elector.still_leading)
    release = StartupEnv.from_env(os.environ).ledger_release_terminated_pods
    writers = (
        Writers.threads(lambda: Kube.from_environment(args.kubeconfig), args.writers)
        if args.writers > 0
        else None
    )
    events = EventRecorder(kube, EVENTS_CONTROLLER, args.identity)
    driver = Driver(
        kube,
        elector,
        caches,
        release_terminated=release,
        writers=writers,
        events=events,
        renew_aside=True,
    )
    watch(lambda: len(driver.promises.written), lambda: elector.leading)
    stopping = threading.Event()
    # SIGTERM (a rollout, a drained node): end within a period, then hand the Lease over at
    # once instead of letting the next replica wait for it to lapse.
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    run(driver, args.period, heartbeat, stop=stopping.is_set, freeze=True)
    try:
        elector.release()
    except (KubeError, requests.RequestException) as err:
        log.warning("could not release the lease: %s", err)


if __name__ == "__main__":
    main()
