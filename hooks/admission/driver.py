"""`python -m hooks.admission.driver`: the serialized loop that answers `gpustack-node-devices`.

Kueue owns a Workload's status, so no Metacontroller hook may write it (DESIGN §2). This loop
judges one Workload at a time with the pure verdict (`chain.feasibility.judge`) and applies only
its own `status.admissionChecks` entries by server-side apply: its own field manager, `force`
(Kueue co-owns the entry after every reset), and `resourceVersion` (a stale read fails with 409
instead of overwriting). It keeps the AdmissionCheck Active, and a Lease (`lease`) makes sure
that of all replicas only one judges: two judges could each promise the same free card.

Workloads come from a watch (`kubeapi.watch`): a pass runs as soon as the cache changes and at
least every `--period` seconds (the resync tick, which also renews the Lease and lists the
AdmissionChecks). An event pass judges only the Workloads whose object moved since they were last
judged; a tick judges every waiting one again, so a card freed on a node (Devices and Pods are
not watched) turns a Retry into Ready within a period. Followers keep their cache warm and judge
nothing. Per verdict the reads are scoped: only the ResourceFlavors named by assignments; the
Devices and the Pods (field selector `spec.nodeName`) of the nodes Kueue assigned, or of the
flavor's pool when an assignment names no nodes.

The ledger a verdict judges with is, card by card, the busier of the published `Devices.status`
and the one the node's Pods' allocation annotations add up to (`chain.ledger_merge`): the node
agent's write lags the annotations, and a card granted a moment ago must not be promised again.
The verdict also counts a promised Pod as taken until its allocation record reaches the Pod
(`charged_pods`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

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
from chain.ledger_merge import busier_ledger
from chain.ledger_rebuild import PodAllocations, rebuild_status
from chain.manufacturers import ManufacturerTable, default_manufacturers
from chain.settings import StartupEnv
from hooks.admission.health import Heartbeat, serve_health
from hooks.admission.lease import LEASE_NAMESPACE, LEASE_SECONDS, Elector
from kubeapi import Kube, KubeError, Obj
from kubeapi.watch import Cache, Watcher, key_of

log = logging.getLogger("admission-driver")

FIELD_MANAGER = "gpustack-admission-driver"
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
        by_key = {key_of(w): w for w in listed}
        for key, (uid, before, after) in list(self.written.items()):
            seen = by_key.get(key)
            if seen is None or str(_meta(seen).get("uid", "")) != uid:
                del self.written[key]  # gone or recreated: nothing is promised any more
            elif str(_meta(seen).get("resourceVersion", "")) != before:
                del self.written[key]  # the cache includes our write (or a later change)
            else:
                by_key[key] = after
        return list(by_key.values())


def judged_ledger(devices: Devices, pods: Iterable[PodAllocations], release: bool) -> Devices:
    """The node's Devices with, per card, the busier of its published and its Pods' ledger."""
    rebuilt = rebuild_status(devices.spec, pods, release).status
    return replace(devices, status=busier_ledger(devices.spec, devices.status, rebuilt))


# --- I/O ------------------------------------------------------------------------------------


@dataclass
class Driver:
    kube: Kube
    elector: Elector
    cache: Cache
    """The Workloads, kept current by a `Watcher`."""
    table: ManufacturerTable = field(default_factory=default_manufacturers)
    promises: Promises = field(default_factory=Promises)
    release_terminated: bool = True
    """`GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`, as the node agent rebuilds the ledger."""
    checks: dict[str, str] = field(default_factory=dict)
    """AdmissionCheck name -> controller, as of the last tick."""
    judged: dict[tuple[str, str], str] = field(default_factory=dict)
    """Workload -> the resourceVersion last judged; an event pass skips those unchanged."""

    def ensure_active(self, checks: Iterable[Obj]) -> None:
        for ac in checks:
            if (ac.get("spec") or {}).get("controllerName") != NODE_DEVICES_CONTROLLER:
                continue
            body = active_patch(ac, now_text())
            if body is not None:
                self.kube.apply(body, FIELD_MANAGER, subresource="status")
                log.info("marked AdmissionCheck %s Active", _meta(ac).get("name"))

    def step(self, tick: bool = True) -> bool:
        """One pass: on a tick (or a Lease about to lapse) lead and keep the check Active; then,
        leading, judge in turn each waiting Workload of the cache (on a tick all of them, else
        those that moved). True once the cache has been filled (the pass saw the cluster)."""
        if tick or (self.elector.leading and not self.elector.still_leading()):
            if not self.elector.lead():
                return self.cache.synced
            acs = self.kube.list(KUEUE_API, ADMISSION_CHECK)
            self.ensure_active(acs)
            self.checks = controllers(acs)
        if not self.cache.synced or not self.elector.still_leading():
            return self.cache.synced
        workloads = self.promises.merged(self.cache.items())
        present = {key_of(w) for w in workloads}
        self.judged = {k: v for k, v in self.judged.items() if k in present}
        for wl in to_judge(workloads, self.checks):
            version = str(_meta(wl).get("resourceVersion", ""))
            if not tick and self.judged.get(key_of(wl)) == version:
                continue  # unchanged since its verdict; the next tick looks again
            if not self.elector.still_leading():
                break  # renew first (next pass) rather than judge on a Lease about to lapse
            self.judged[key_of(wl)] = version
            written = self.decide(wl, workloads, self.checks)
            if written is not None:
                # Our own write comes back as an event: that is no reason to judge again.
                self.judged[key_of(wl)] = str(_meta(written).get("resourceVersion", ""))
                # The next verdict of this pass must see the cards this one promised.
                workloads = [written if key_of(w) == key_of(written) else w for w in workloads]
        return True

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
                # The cache brings the newer object, and that event a new pass.
                log.info(
                    "%s/%s moved on (%s); judged again when the cache shows it",
                    ns,
                    name,
                    err.status,
                )
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
        pods = {
            n: self.kube.list(CORE_V1, "Pod", field_selector=f"spec.nodeName={n}")
            for n in sorted(devices)
        }
        ledgers = []
        for node_name, obj in devices.items():
            try:
                parsed = Devices.parse(obj)
            except ValueError as err:
                # A node whose ledger cannot be read offers no cards.
                log.warning("Devices %s unreadable: %s", node_name, err)
                continue
            ledgers.append(
                judged_ledger(parsed, _allocations(pods[node_name]), self.release_terminated)
            )
        everyone = [pod for n in sorted(pods) for pod in pods[n]]
        return Snapshot(
            flavors, ledgers, hostnames, workloads, charged_pods(everyone, hostnames, table)
        )

    def _get(self, kind: str, name: str) -> Obj | None:
        return self.kube.get(KUEUE_API, kind, name)


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
) -> None:
    """Pass on every change of the Workload cache, and at least every `period` (the tick)."""
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kube = Kube.from_environment(args.kubeconfig)
    elector = Elector(kube, args.identity, args.lease_seconds, args.lease_namespace)
    # Unhealthy once passes have failed or hung (or the first list never came) for a whole
    # Lease duration and then some.
    heartbeat = Heartbeat(max(30.0, 2 * args.lease_seconds + 10 * args.period))
    if args.health_port >= 0:
        serve_health(heartbeat, args.health_port)
    workloads = Watcher(kube, KUEUE_API, WORKLOAD_KIND).start()
    release = StartupEnv.from_env(os.environ).ledger_release_terminated_pods
    run(Driver(kube, elector, workloads.cache, release_terminated=release), args.period, heartbeat)


if __name__ == "__main__":
    main()
