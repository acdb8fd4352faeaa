"""`python -m hooks.admission.driver`: the serialized loop that answers `gpustack-node-devices`.

Kueue owns a Workload's status, so no Metacontroller hook may write it (DESIGN §2). This loop
judges one Workload at a time with the pure verdict (`chain.feasibility.judge`) and applies only
its own `status.admissionChecks` entries by server-side apply: its own field manager, `force`
(Kueue co-owns the entry after every reset), and `resourceVersion` (a stale read fails with 409
instead of overwriting). It keeps the AdmissionCheck Active, and a Lease makes sure that of all
replicas only one judges: two judges could each promise the same free card.

Reads are scoped (first version, polling every `--period` seconds): all Workloads in one list,
filtered here by condition; only the ResourceFlavors named by assignments; the Devices and the
Pods (field selector `spec.nodeName`) of the nodes Kueue assigned, or of the flavor's pool when
an assignment names no nodes.

The Devices status is taken as the node agent last wrote it; the verdict counts a promised Pod as
taken until its allocation record reaches the Pod (`charged_pods`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import requests

from chain.apis import ADMISSION_CHECK, CORE_V1, KUEUE_API, NODE, RESOURCE_FLAVOR, WORKER_API
from chain.apis import WORKLOAD as WORKLOAD_KIND
from chain.devices import DEVICES_KIND, Devices
from chain.feasibility import (
    NODE_DEVICES_CONTROLLER,
    Snapshot,
    State,
    Verdict,
    charged_pods,
    check_state,
    flavor_scope,
    holds_cards,
    judge,
    needs_verdict,
    workload_shares,
)
from chain.labels import HOSTNAME
from chain.manufacturers import ManufacturerTable, default_manufacturers
from hooks.admission.health import Heartbeat, serve_health
from kubeapi import Kube, KubeError, Obj

log = logging.getLogger("admission-driver")

FIELD_MANAGER = "gpustack-admission-driver"
"""Owns our `admissionChecks` entries and the AdmissionCheck's Active condition."""
RETRY_AFTER_SECONDS = 30
LEASE_API = "coordination.k8s.io/v1"
LEASE_NAME = "gpustack-admission-driver"
LEASE_NAMESPACE = "gpustack-system"
LEASE_SECONDS = 15
ACTIVE_MESSAGE = "The admission check is active"


def now_text() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time() -> str:
    """A Lease `MicroTime`."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- pure: which Workloads, which entries ----------------------------------------------------


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def key_of(obj: Obj) -> tuple[str, str]:
    meta = _meta(obj)
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


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
    """Readys this driver wrote, kept until a listing shows the Workload past that write.

    A listing can lag the write; without this a Workload promised cards a moment ago would look
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
        """`listed` with each remembered Ready in place of a listing older than the write."""
        by_key = {key_of(w): w for w in listed}
        for key, (uid, before, after) in list(self.written.items()):
            seen = by_key.get(key)
            if seen is None or str(_meta(seen).get("uid", "")) != uid:
                del self.written[key]  # gone or recreated: nothing is promised any more
            elif str(_meta(seen).get("resourceVersion", "")) != before:
                del self.written[key]  # the listing includes our write (or a later change)
            else:
                by_key[key] = after
        return list(by_key.values())


# --- pure: the Lease --------------------------------------------------------------------------


def next_lease(
    lease: Obj | None, identity: str, expired: bool, seconds: int, now: str
) -> Obj | None:
    """The Lease to write to lead (create when `lease` is None), or None to follow.

    Standard semantics: a holder keeps it by renewing; another may take it only once it is
    vacant or its record has not changed for its whole duration (`expired`, judged on the local
    clock, so clock skew between replicas does not matter)."""
    spec = dict((lease or {}).get("spec") or {})
    holder = str(spec.get("holderIdentity") or "")
    if lease is not None and holder and holder != identity and not expired:
        return None
    if holder != identity:
        spec["acquireTime"] = now
        if lease is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update({"holderIdentity": identity, "leaseDurationSeconds": seconds, "renewTime": now})
    if lease is None:
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE},
            "spec": spec,
        }
    return {**lease, "spec": spec}


# --- I/O ------------------------------------------------------------------------------------


@dataclass
class Elector:
    kube: Kube
    identity: str
    seconds: int = LEASE_SECONDS
    namespace: str = LEASE_NAMESPACE
    clock: Callable[[], float] = time.monotonic
    _observed: tuple[str, str] | None = None
    _observed_at: float = 0.0
    leading: bool = False
    _renewed_at: float = 0.0

    def still_leading(self) -> bool:
        """Within a pass: True while the last renewal is recent enough that no other replica
        can have taken the Lease (it waits a whole duration after the last change it saw)."""
        return self.leading and self.clock() - self._renewed_at < self.seconds / 2

    def lead(self) -> bool:
        """Take or renew the Lease; True while this replica may judge."""
        # Counted from before the read: the write can only have landed later than this.
        started = self.clock()
        lease = self.kube.get(LEASE_API, "Lease", LEASE_NAME, self.namespace)
        expired = False
        if lease is not None:
            spec = lease.get("spec") or {}
            record = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
            if record != self._observed:
                self._observed, self._observed_at = record, self.clock()
            duration = int(spec.get("leaseDurationSeconds") or self.seconds)
            expired = self.clock() - self._observed_at > duration
        wanted = next_lease(lease, self.identity, expired, self.seconds, micro_time())
        if wanted is not None:
            wanted["metadata"]["namespace"] = self.namespace
            try:
                written = self.kube.replace(wanted) if lease else self.kube.create(wanted)
            except KubeError as err:
                if err.status != 409:
                    raise
                wanted = None  # another replica wrote first
            else:
                spec = written["spec"]
                self._observed = (self.identity, str(spec.get("renewTime")))
                self._observed_at = self.clock()
        leading = wanted is not None
        if leading:
            self._renewed_at = started
        if leading != self.leading:
            log.info("%s %s the lease", self.identity, "holds" if leading else "does not hold")
        self.leading = leading
        return leading


@dataclass
class Driver:
    kube: Kube
    elector: Elector
    table: ManufacturerTable = field(default_factory=default_manufacturers)
    promises: Promises = field(default_factory=Promises)

    def ensure_active(self, checks: Iterable[Obj]) -> None:
        for ac in checks:
            if (ac.get("spec") or {}).get("controllerName") != NODE_DEVICES_CONTROLLER:
                continue
            body = active_patch(ac, now_text())
            if body is not None:
                self.kube.apply(body, FIELD_MANAGER, subresource="status")
                log.info("marked AdmissionCheck %s Active", _meta(ac).get("name"))

    def step(self) -> None:
        """One pass: lead, keep the check Active, judge each waiting Workload in turn."""
        if not self.elector.lead():
            return
        acs = self.kube.list(KUEUE_API, ADMISSION_CHECK)
        self.ensure_active(acs)
        checks = controllers(acs)
        workloads = self.promises.merged(self.kube.list(KUEUE_API, WORKLOAD_KIND))
        for wl in to_judge(workloads, checks):
            if not self.elector.still_leading():
                return  # renew first (next pass) rather than judge on a Lease about to lapse
            written = self.decide(wl, workloads, checks)
            if written is not None:
                # The next verdict of this pass must see the cards this one promised.
                workloads = [written if key_of(w) == key_of(written) else w for w in workloads]

    def decide(self, wl: Obj, workloads: Sequence[Obj], checks: Mapping[str, str]) -> Obj | None:
        ns, name = key_of(wl)
        try:
            snapshot = self.snapshot(wl, workloads)
            verdict = judge(wl, snapshot, self.table)
        except ValueError as err:
            log.warning("cannot judge %s/%s: %s", ns, name, err)
            return None
        body = verdict_patch(wl, owned_checks(wl, checks), verdict, now_text())
        if body is None:
            return None
        try:
            written = self.kube.apply(body, FIELD_MANAGER, subresource="status")
        except KubeError as err:
            if err.status in (404, 409):
                log.info("%s/%s moved on (%s); judged again next pass", ns, name, err.status)
                return None
            raise
        log.info(
            "%s verdict %s/%s: %s %s",
            self.elector.identity,
            ns,
            name,
            verdict.state,
            verdict.message,
        )
        if verdict.state == State.READY:
            self.promises.remember(wl, written)
        return written

    def snapshot(self, wl: Obj, workloads: Sequence[Obj]) -> Snapshot:
        table = self.table
        holders = [w for w in workloads if key_of(w) != key_of(wl) and holds_cards(w)]
        names = own_flavors(wl, table).union(*(own_flavors(w, table) for w in holders))
        flavors = {n: rf for n in sorted(names) if (rf := self._get(RESOURCE_FLAVOR, n))}
        hosts = assigned_hosts(wl, table)
        nodes: dict[str, Obj] = {}
        devices: dict[str, Obj] = {}
        if hosts is not None:
            if hosts:
                selector = f"{HOSTNAME} in ({','.join(sorted(hosts))})"
                for node in self.kube.list(CORE_V1, NODE, label_selector=selector):
                    nodes[_meta(node)["name"]] = node
            for node_name in sorted(nodes):
                if (obj := self.kube.get(WORKER_API, DEVICES_KIND, node_name)) is not None:
                    devices[node_name] = obj
        else:
            for flavor in sorted(own_flavors(wl, table)):
                scope = flavor_scope(flavors.get(flavor), flavor, table)
                if scope is None or not scope.akey:
                    continue  # the verdict says why
                selector = ",".join(f"{k}={v}" for k, v in sorted(scope.selector.items()))
                for obj in self.kube.list(WORKER_API, DEVICES_KIND, label_selector=selector):
                    devices[_meta(obj)["name"]] = obj
            for node_name in sorted(devices):
                if (found := self.kube.get(CORE_V1, NODE, node_name)) is not None:
                    nodes[node_name] = found
        hostnames = {
            n: str((_meta(obj).get("labels") or {}).get(HOSTNAME, "")) for n, obj in nodes.items()
        }
        pods = [
            pod
            for n in sorted(devices)
            for pod in self.kube.list(CORE_V1, "Pod", field_selector=f"spec.nodeName={n}")
        ]
        parsed = []
        for obj in devices.values():
            try:
                parsed.append(Devices.parse(obj))
            except ValueError as err:
                # A node whose ledger cannot be read offers no cards.
                log.warning("Devices %s unreadable: %s", _meta(obj).get("name"), err)
        return Snapshot(flavors, parsed, hostnames, workloads, charged_pods(pods, hostnames, table))

    def _get(self, kind: str, name: str) -> Obj | None:
        return self.kube.get(KUEUE_API, kind, name)


def run(
    driver: Driver,
    period: float,
    heartbeat: Heartbeat | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    while not stop():
        started = time.monotonic()
        try:
            driver.step()
        except (KubeError, requests.RequestException) as err:
            log.warning("pass failed: %s", err)
        else:
            if heartbeat is not None:
                heartbeat.beat()
        time.sleep(max(0.0, period - (time.monotonic() - started)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hooks.admission.driver")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument("--identity", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--period", type=float, default=1.0, help="seconds between passes")
    parser.add_argument("--lease-seconds", type=int, default=LEASE_SECONDS)
    parser.add_argument("--lease-namespace", default=LEASE_NAMESPACE)
    parser.add_argument("--health-port", type=int, default=8080, help="/healthz; -1: none")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kube = Kube.from_environment(args.kubeconfig)
    elector = Elector(kube, args.identity, args.lease_seconds, args.lease_namespace)
    # Unhealthy once passes have failed or hung for a whole Lease duration and then some.
    heartbeat = Heartbeat(max(30.0, 2 * args.lease_seconds + 10 * args.period))
    if args.health_port >= 0:
        serve_health(heartbeat, args.health_port)
    run(Driver(kube, elector), args.period, heartbeat)


if __name__ == "__main__":
    main()
