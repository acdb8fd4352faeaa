"""Time to capacity and time to free: how soon a new node's cards are quota, a view and an
admission, and how soon a finished Pod's card reads free.

    python -m benchmarks.capacity [--sizes 10 100 1000] [--joins 20] [--frees 20] [--storm 100]

One testbed (no kubelet, no containerd) with the shipped manifests installed as the e2e tests
install them, the API server writing an audit log, and the verdict driver running as shipped
(its command line under the shipped ServiceAccount, its pool-cards keeper at the shipped
settings; it replaces the testbed's faster stand-alone keeper). Metacontroller, Kueue and
nfd-master are real. No node agent runs: the benchmark plays each node's kubelet (the Node,
8 `nvidia.com/gpu` allocatable), nfd-worker (the CPU NodeFeature) and agent: one report is the
agent's NodeFeature, its `Devices` (labels mirrored from the Node as the agent mirrors them,
`nodeagent.report.devices_labels`) and its ledger, every card free; and like the agent it
writes the `Devices` labels again whenever the Node's mirrored labels change.

For each pool size in `--sizes` the pool first grows to that many 8-card T4 nodes, each held by
one Workload of 8 cards (so the queue's quota is full). Then `--joins` nodes join one at a time:
each is registered and labelled by NFD and the chain as a CPU node first, a Workload of 8 cards
pinned to it waits (Kueue found no quota), and from the moment its agent reports, the watches
stamp (a) when the pool's ResourceFlavor and ClusterQueue quota count its cards, (b) when the
InstanceType's view does, (c) when the waiting Workload is admitted (QuotaReserved, the
AdmissionCheck's verdict, Admitted). Then `--frees` times a node's ledger shows one card held
(a Pod running) and then free again (the Pod ended): from that ledger write to the view
counting the card free.

Last, a join storm: `--storm` new nodes registered, labelled and reported all at once into the
largest pool; the time until the flavor, the quota and the view count all of them, and the
writes the chain made meanwhile (Metacontroller for the hooks, the verdict driver for the
keepers), from the audit log, per node and by kind, against the fewest a join needs
(`benchmarks.capacity_events.minimum_per_node`). Every ResourceFlavor created or deleted during
the run is listed, with the nodes whose summaries still named it just before its deletion was
asked (ordered by the store's revision, not by when the watches delivered the events; Kueue's
finalizer makes the DELETED event itself come later).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from benchmarks.admission import devices, free_ledger
from benchmarks.capacity_events import (
    Series,
    Spread,
    Versions,
    Write,
    chain_writes,
    fed_flavors,
    feeders_at,
    flavor_cards,
    minimum_per_node,
    objects_written,
    per_node,
    queue_cards,
    revision,
    view_cards,
    writes_by_kind,
)
from chain.apis import CHAIN_API, KUEUE_API, NODE_FLAVORS
from chain.labels import MANAGED, TRUE
from chain.ledger import Mode
from chain.names import device_flavor_name, local_queue_name
from kubeapi import Kube, Obj, wait_for
from kubeapi.watch import Cache, Event, Watcher, key_of, start_all, stop_all
from nodeagent.report import devices_labels, owner_reference
from testbed import build
from testbed.components import http_ok
from testbed.drivers import POOL_CARDS_KEEPER
from testbed.harness import Testbed, free_port
from testbed.install import install
from testbed.nodes import (
    T4_KEY,
    T4_POOL,
    device_manager_feature,
    nfd_worker_feature,
    node_object,
    register_node,
)
from testbed.workloads import condition, gpu_workload, now

WORKER = "worker.gpustack.ai/v1alpha1"
NAMESPACE = "capacity"
CARDS = 8
CPU_COUNT = "general.feature.gpustack.ai/amd-25-1.count"
"""The Node decorator's CPU count label for the CPU nfd-worker reports here (16 CPUs)."""
T4_FLAVOR = device_flavor_name("amd-25-1", "nvidia-tesla-t4", "linux", "amd64", CARDS)
CREDITS = "credits.gpustack.ai/nvidia"
AGENT_MANAGER = "gpustack-device-manager"
DRIVER = "capacity-driver"
DRIVER_ACCOUNT = ("gpustack-system", "gpustack-admission-driver")
THREADS = 8
WAIT_S = 120.0
"""The longest one join or free is waited for before it counts as not reached."""


def now_utc() -> datetime:
    return datetime.now(UTC)


# --- what the watches saw ---------------------------------------------------------------------


class Stamped(Cache):
    """A cache that also hands every object it takes in to `seen`, stamped with the local clock."""

    def __init__(self, seen: Callable[[str, Obj, float], None]) -> None:
        super().__init__()
        self.seen = seen

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        super().replace(items, resource_version)
        at = time.monotonic()
        for obj in self.items():
            self.seen("ADDED", obj, at)

    def apply(self, event: Event) -> None:
        super().apply(event)
        if event.type != "BOOKMARK":
            self.seen(event.type, event.object, time.monotonic())


@dataclass(frozen=True)
class FlavorChange:
    """A ResourceFlavor the chain created or deleted."""

    at: float
    kind: str
    """ADDED or DELETED."""
    name: str
    revision: int
    """The store's revision of the change; for a deletion, of its request: the first version
    with a `deletionTimestamp` (Kueue's `kueue.x-k8s.io/resource-in-use` finalizer holds a
    flavor until Kueue lets it go, so it leaves the store later than the chain deleted it)."""


@dataclass
class Pool:
    """The T4 pool as the watches saw it, every number stamped when it changed."""

    flavor: Series = field(default_factory=Series)
    """Cards the pool's ResourceFlavor counts (its capacity label)."""
    quota: Series = field(default_factory=Series)
    """Cards the ClusterQueue's nominal quota stands for."""
    view: Series = field(default_factory=Series)
    """Cards the InstanceType's whole-card view counts."""
    free: Series = field(default_factory=Series)
    """Cards the view counts free."""
    admitted: dict[str, float] = field(default_factory=dict)
    reserved: dict[str, float] = field(default_factory=dict)
    """When Kueue first reserved quota for a Workload (before the verdict admits it)."""
    labelled: dict[str, float] = field(default_factory=dict)
    """When a Node first carried the T4 feature label (nfd-master's copy of the agent's
    NodeFeature)."""
    summarised: dict[str, float] = field(default_factory=dict)
    """When a node's NodeFlavors summary first named the T4 flavor (the Node decorator)."""
    waiting: set[str] = field(default_factory=set)
    """Workloads Kueue has tried and found no quota for."""
    flavors: list[FlavorChange] = field(default_factory=list)
    versions: dict[str, list[tuple[int, frozenset[str]]]] = field(default_factory=dict)
    deleting: dict[str, int] = field(default_factory=dict)
    """Per flavor being deleted, the revision its deletion was asked at."""
    """Every NodeFlavors summary's versions as watched (`capacity_events.Versions`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_flavor(self, kind: str, obj: Obj, at: float) -> None:
        name = key_of(obj)[1]
        with self.lock:
            if name == T4_FLAVOR and kind != "DELETED":
                self.flavor.add(at, flavor_cards(obj, T4_KEY))
            elif name == T4_FLAVOR:
                self.flavor.add(at, 0)
            if kind != "DELETED" and obj.get("metadata", {}).get("deletionTimestamp"):
                self.deleting.setdefault(name, revision(obj))
            if kind == "DELETED":
                asked = self.deleting.pop(name, revision(obj))
                self.flavors.append(FlavorChange(at, kind, name, asked))
            elif kind == "ADDED":
                self.flavors.append(FlavorChange(at, kind, name, revision(obj)))

    def on_queue(self, kind: str, obj: Obj, at: float) -> None:
        if key_of(obj)[1] == T4_POOL:
            with self.lock:
                self.quota.add(at, 0 if kind == "DELETED" else queue_cards(obj, CREDITS))

    def on_type(self, kind: str, obj: Obj, at: float) -> None:
        if key_of(obj)[1] == T4_POOL and kind != "DELETED":
            capacity, remaining = view_cards(obj)
            with self.lock:
                self.view.add(at, capacity)
                self.free.add(at, remaining)

    def on_workload(self, kind: str, obj: Obj, at: float) -> None:
        namespace, name = key_of(obj)
        if namespace != NAMESPACE or kind == "DELETED":
            return
        with self.lock:
            if name not in self.admitted and condition(obj, "Admitted") == "True":
                self.admitted[name] = at
            if name not in self.reserved and condition(obj, "QuotaReserved") == "True":
                self.reserved[name] = at
            if condition(obj, "QuotaReserved") == "False":
                self.waiting.add(name)

    def on_node(self, kind: str, obj: Obj, at: float) -> None:
        name = key_of(obj)[1]
        labels = obj.get("metadata", {}).get("labels") or {}
        if kind != "DELETED" and labels.get(T4_KEY) == TRUE:
            with self.lock:
                self.labelled.setdefault(name, at)

    def on_summary(self, kind: str, obj: Obj, at: float) -> None:
        name = key_of(obj)[1]
        names = frozenset() if kind == "DELETED" else frozenset(fed_flavors([obj]))
        with self.lock:
            self.versions.setdefault(name, []).append((revision(obj), names))
            if T4_FLAVOR in names:
                self.summarised.setdefault(name, at)

    def feeders(self, change: FlavorChange) -> list[str]:
        """For a deletion, the nodes whose summaries still named the flavor just before it."""
        if change.kind != "DELETED":
            return []
        with self.lock:
            versions: Versions = {k: list(v) for k, v in self.versions.items()}
        return feeders_at(versions, change.name, change.revision)

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return self.flavor.latest(), self.quota.latest(), self.view.latest()


# --- the simulated nodes ----------------------------------------------------------------------


class Clients:
    """One API client per thread: a `requests.Session` is not meant to be shared."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._local = threading.local()

    def get(self) -> Kube:
        kube: Kube | None = getattr(self._local, "kube", None)
        if kube is None:
            kube = Kube.from_kubeconfig(self.kubeconfig)
            self._local.kube = kube
        return kube


def held_ledger(node: str, cards: int, held: int) -> Obj:
    """The ledger with the first `held` cards held whole (a Pod running on each)."""
    ledger = free_ledger(node, cards)
    for row in ledger["status"]["groups"][0]["accelerators"][:held]:
        row.update(mode=int(Mode.EXCLUSIVE), remaining=0)
    return ledger


class Agents:
    """Every simulated node's agent: its report, and its `Devices` labels kept mirroring the
    Node's (the real agent re-reports when those labels change)."""

    def __init__(self, clients: Clients, nodes: Cache, cards: int) -> None:
        self.clients = clients
        self.nodes = nodes
        self.cards = cards
        self._group: dict[str, Obj] = {}
        self._uid: dict[str, str] = {}
        self._written: dict[str, dict[str, str]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="agent")

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _devices(self, node: str) -> tuple[Obj, dict[str, str]]:
        found = self.nodes.get(("", node)) or {}
        labels = devices_labels(found.get("metadata", {}).get("labels") or {}, [self._group[node]])
        obj = {
            "apiVersion": WORKER,
            "kind": "Devices",
            "metadata": {
                "name": node,
                "labels": labels,
                "ownerReferences": [owner_reference(node, self._uid[node])],
            },
            "spec": {"groups": [self._group[node]]},
        }
        return obj, labels

    def report(self, node: str, uid: str) -> None:
        """The agent's first report: its NodeFeature, its `Devices`, its ledger (all free)."""
        with self._lock:
            self._group[node] = devices(node, {}, self.cards)["spec"]["groups"][0]
            self._uid[node] = uid
            lock = self._locks.setdefault(node, threading.Lock())
        kube = self.clients.get()
        with lock:
            kube.apply(device_manager_feature(node, self.cards), AGENT_MANAGER)
            obj, labels = self._devices(node)
            kube.apply(obj, AGENT_MANAGER)
            self._written[node] = labels
            kube.apply(free_ledger(node, self.cards), AGENT_MANAGER, subresource="status")

    def ledger(self, node: str, held: int) -> None:
        """The ledger with `held` cards taken (a Pod's allocation) or none (its end)."""
        self.clients.get().apply(
            held_ledger(node, self.cards, held), AGENT_MANAGER, subresource="status"
        )

    def node_changed(self, kind: str, obj: Obj, at: float) -> None:
        """A Node watch event: re-report the `Devices` labels if the Node's mirrored ones
        moved (off the watch thread)."""
        node = key_of(obj)[1]
        if kind != "DELETED" and node in self._group:
            self._pool.submit(self._relabel, node)

    def _relabel(self, node: str) -> None:
        with self._locks[node]:
            obj, labels = self._devices(node)
            if labels != self._written.get(node):
                self.clients.get().apply(obj, AGENT_MANAGER)
                self._written[node] = labels


def in_parallel(action: Callable[[str], object], names: list[str]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(action, names):
            pass


def register(kube: Kube, name: str, cards: int) -> str:
    """The kubelet's Node (16 CPUs, `cards` GPUs allocatable) and nfd-worker's NodeFeature; the
    Node's uid."""
    node = node_object(name, cpu="16", capacity={"nvidia.com/gpu": str(cards)})
    uid = str(register_node(kube, node)["metadata"]["uid"])
    kube.apply(nfd_worker_feature(name))
    return uid


def held_workload(name: str, cards: int, hostname: str | None = None) -> Obj:
    return gpu_workload(name, NAMESPACE, local_queue_name(T4_POOL), cards, hostname)


# --- the runs ---------------------------------------------------------------------------------


@dataclass
class Join:
    """One node's waits, in seconds from its agent's report (None: not reached)."""

    flavor: float | None
    quota: float | None
    view: float | None
    admitted: float | None
    labelled: float | None = None
    """The Node carried the card labels (nfd-master)."""
    summarised: float | None = None
    """The node's NodeFlavors summary named the pool's flavor (the Node decorator)."""
    reserved: float | None = None
    """Kueue reserved quota for the waiting Workload (before the verdict)."""

    @property
    def complete(self) -> bool:
        return None not in (self.flavor, self.quota, self.view, self.admitted)

    @property
    def capacity(self) -> float | None:
        """(a): the flavor and the quota both count the cards."""
        if self.flavor is None or self.quota is None:
            return None
        return max(self.flavor, self.quota)


@dataclass
class Stage:
    """What one pool size measured."""

    nodes: int
    joins: list[Join] = field(default_factory=list)
    frees: list[float | None] = field(default_factory=list)


class Bench:
    def __init__(self, bed: Testbed, cards: int) -> None:
        self.bed = bed
        self.cards = cards
        self.clients = Clients(bed.kubeconfig)
        self.pool = Pool()
        self.summaries = Stamped(self.pool.on_summary)
        self.nodes_cache = Stamped(self._node_seen)
        self.agents = Agents(self.clients, self.nodes_cache, cards)
        self.names: list[str] = []
        self.held = 0
        kube = bed.kube
        self.watchers = start_all(
            [
                Watcher(kube, "v1", "Node", cache=self.nodes_cache),
                Watcher(kube, CHAIN_API, NODE_FLAVORS, cache=self.summaries),
                Watcher(kube, KUEUE_API, "ResourceFlavor", cache=Stamped(self.pool.on_flavor)),
                Watcher(kube, KUEUE_API, "ClusterQueue", cache=Stamped(self.pool.on_queue)),
                Watcher(kube, WORKER, "InstanceType", cache=Stamped(self.pool.on_type)),
                Watcher(kube, KUEUE_API, "Workload", cache=Stamped(self.pool.on_workload)),
            ]
        )
        wait_for(lambda: all(w.cache.synced for w in self.watchers), 60, "the watches")

    def _node_seen(self, kind: str, obj: Obj, at: float) -> None:
        self.pool.on_node(kind, obj, at)
        self.agents.node_changed(kind, obj, at)

    def stop(self) -> None:
        stop_all(self.watchers)
        self.agents.stop()

    @property
    def total(self) -> int:
        return len(self.names) * self.cards

    def settled(self, cards: int) -> bool:
        return self.pool.counts() == (cards, cards, cards)

    def wait_settled(self, timeout: float) -> None:
        wait_for(
            lambda: self.settled(self.total),
            timeout,
            f"the flavor, quota and view to count {self.total} cards (now {self.pool.counts()})",
            interval=0.1,
        )

    def grow(self, size: int) -> None:
        """Bring the pool to `size` nodes at once (not measured), each held by a Workload."""
        new = [f"t4-{i:04d}" for i in range(len(self.names), size)]
        if not new:
            return

        def add(name: str) -> None:
            kube = self.clients.get()
            uid = register(kube, name, self.cards)
            self.agents.report(name, uid)

        began = time.monotonic()
        in_parallel(add, new)
        self.names += new
        if self.held == 0:
            wait_for(
                lambda: self.bed.kube.get(
                    KUEUE_API, "LocalQueue", local_queue_name(T4_POOL), NAMESPACE
                ),
                300,
                "the pool's LocalQueue",
            )
        fillers = [f"held-{i:04d}" for i in range(self.held, self.held + len(new))]
        in_parallel(lambda n: self.clients.get().create(held_workload(n, self.cards)), fillers)
        self.held += len(fillers)
        self.wait_settled(max(300.0, 1.2 * size))
        wait_for(
            lambda: all(n in self.pool.admitted for n in fillers),
            max(300.0, 1.2 * size),
            f"{len(fillers)} Workloads holding the new nodes admitted",
            interval=0.5,
        )
        print(f"pool grown to {size} nodes in {time.monotonic() - began:.0f}s", flush=True)

    def join(self) -> Join:
        """One node joins: a CPU node first, a Workload waits for its cards, then its agent
        reports; the waits from that report."""
        kube = self.clients.get()
        name = f"t4-{len(self.names):04d}"
        uid = register(kube, name, self.cards)

        def labelled() -> bool:
            labels = (self.nodes_cache.get(("", name)) or {}).get("metadata", {}).get(
                "labels"
            ) or {}
            return labels.get(MANAGED) == TRUE and labels.get(CPU_COUNT) == "16"

        wait_for(labelled, 60, f"{name} managed as a CPU node", interval=0.05)
        waiting = f"wait-{name}"
        kube.create(held_workload(waiting, self.cards, hostname=name))
        wait_for(lambda: waiting in self.pool.waiting, 60, f"{waiting} to wait", interval=0.05)
        self.wait_settled(60)
        target = self.total + self.cards
        since = time.monotonic()
        self.agents.report(name, uid)
        self.names.append(name)
        self.held += 1

        def after(at: float | None) -> float | None:
            return None if at is None else at - since

        def measured() -> Join:
            with self.pool.lock:
                return Join(
                    self.pool.flavor.first_at_least(since, target),
                    self.pool.quota.first_at_least(since, target),
                    self.pool.view.first_at_least(since, target),
                    after(self.pool.admitted.get(waiting)),
                    after(self.pool.labelled.get(name)),
                    after(self.pool.summarised.get(name)),
                    after(self.pool.reserved.get(waiting)),
                )

        with contextlib.suppress(TimeoutError):
            wait_for(
                lambda: measured().complete,
                WAIT_S,
                f"{name} to be capacity",
                interval=0.05,
            )
        return measured()

    def free(self, node: str) -> float | None:
        """A card of `node` held, then freed: seconds from the freeing ledger write to the
        view counting it free."""
        before = self.pool.free.latest()
        self.agents.ledger(node, 1)
        wait_for(
            lambda: self.pool.free.latest() == before - 1, 60, "the view to count the card held"
        )
        since = time.monotonic()
        self.agents.ledger(node, 0)
        with contextlib.suppress(TimeoutError):
            wait_for(
                lambda: self.pool.free.first_at_least(since, before) is not None,
                WAIT_S,
                "the view to count the card free",
                interval=0.05,
            )
        with self.pool.lock:
            return self.pool.free.first_at_least(since, before)

    def stage(self, size: int, joins: int, frees: int) -> Stage:
        self.grow(size)
        print(f"load average before the joins: {load()}", flush=True)
        stage = Stage(len(self.names))
        for _ in range(joins):
            stage.joins.append(self.join())
            time.sleep(0.2)
        for index in range(frees):
            stage.frees.append(self.free(self.names[index % len(self.names)]))
            time.sleep(0.2)
        report_stage(stage)
        return stage

    def storm(self, count: int, settle: float) -> None:
        """`count` nodes registered, labelled and reported at once; the time until all are
        capacity and the chain's writes meanwhile."""
        if count <= 0:
            return
        quiet = now_utc()
        time.sleep(settle)  # a quiet spell: what the chain writes anyway shows as background
        target = self.total + count * self.cards
        new = [f"storm-{i:04d}" for i in range(count)]
        flavors_before = len(self.pool.flavors)

        def add(name: str) -> None:
            kube = self.clients.get()
            self.agents.report(name, register(kube, name, self.cards))

        began, since = now_utc(), time.monotonic()
        in_parallel(add, new)
        sent = time.monotonic() - since
        self.names += new
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: self.settled(target), 600, "the storm to be capacity", interval=0.2)
        time.sleep(settle)  # the last passes and rechecks after the counts settled
        ended = now_utc()
        with self.pool.lock:
            reached = {
                "flavor": self.pool.flavor.first_at_least(since, target),
                "quota": self.pool.quota.first_at_least(since, target),
                "view": self.pool.view.first_at_least(since, target),
            }
        print(
            f"join storm: {count} nodes into a pool of {len(self.names) - count}, their writes"
            f" sent in {sent:.1f}s; all counted by "
            + ", ".join(f"the {k} after {_s(v)}" for k, v in reached.items())
            + " from the first report; from the last: "
            + ", ".join(f"{k} {_s(None if v is None else v - sent)}" for k, v in reached.items())
            + f" (load average {load()})",
            flush=True,
        )
        writes = read_writes(self.bed.audit_log, began, ended)
        background = read_writes(self.bed.audit_log, quiet, began)
        report_writes(writes, count, (began - quiet).total_seconds(), len(background))
        report_flavors(self.pool, self.pool.flavors[flavors_before:], "during the storm")


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}s"


def read_writes(log: Path, since: datetime, until: datetime) -> list[Write]:
    with log.open() as lines:
        return chain_writes(lines, since, until)


# --- report -----------------------------------------------------------------------------------


def _spread(samples: Iterable[float | None], label: str) -> str:
    values = list(samples)
    reached = [v for v in values if v is not None]
    spread = Spread.of(reached)
    missed = len(values) - len(reached)
    tail = f"; {missed} not reached in {WAIT_S:.0f}s" if missed else ""
    return f"  {label}: {spread.line() if spread else '-'}{tail}"


def report_stage(stage: Stage) -> None:
    joins = stage.joins
    print(
        f"pool of {stage.nodes} nodes, {len(joins)} joins one at a time (load average now"
        f" {load()}):",
        flush=True,
    )
    print(_spread((j.labelled for j in joins), "    the Node labelled by nfd-master"))
    print(_spread((j.summarised for j in joins), "    its NodeFlavors summary names the flavor"))
    print(_spread((j.flavor for j in joins), "    the flavor"))
    print(_spread((j.quota for j in joins), "    the quota"))
    print(_spread((j.capacity for j in joins), "(a) flavor and quota count the cards"))
    print(_spread((j.view for j in joins), "(b) the InstanceType view counts them"))
    print(_spread((j.reserved for j in joins), "    Kueue reserved quota for the waiting Workload"))
    print(_spread((j.admitted for j in joins), "(c) the waiting Workload admitted"))
    print(_spread(stage.frees, "free -> the view counts the card free"))
    print(
        "  each join, seconds from the report:"
        " labelled, summary, flavor, quota, view, reserved, admitted"
    )
    for join in joins:
        steps = (join.labelled, join.summarised, join.flavor, join.quota, join.view)
        print("   " + " ".join(_s(v) for v in (*steps, join.reserved, join.admitted)))
    sys.stdout.flush()


def load() -> str:
    """The machine's load average over 1, 5 and 15 minutes (`uptime`'s), which other work on
    this machine raises."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def report_writes(writes: list[Write], nodes: int, quiet_s: float, background: int) -> None:
    total = len(writes)
    print(
        f"the chain's writes during the storm: {total}, {total / nodes:.2f} per node (the fewest"
        f" it needs: {minimum_per_node(nodes):.2f} per node); {background} in the"
        f" {quiet_s:.0f}s before it"
    )
    for (who, verb, resource, sub), n in per_node(writes_by_kind(writes), nodes):
        print(f"  {n:6.2f}  {who}: {verb} {resource}{'/' + sub if sub else ''}")
    for resource, sub in (("resourceflavors", ""), ("clusterqueues", ""), ("poolcards", "")):
        counted = objects_written(writes, resource, sub)
        if counted:
            print(f"  {resource} written: " + ", ".join(f"{k} x{v}" for k, v in counted.items()))
    conflicts = sum(1 for w in writes if w.code == 409)
    if conflicts:
        print(f"  of which answered 409 Conflict: {conflicts}")
    print("", flush=True)


def report_flavors(pool: Pool, changes: list[FlavorChange], when: str) -> None:
    """Every flavor created and deleted; a deletion whose flavor some node's summary still
    named just before it (by the store's revision) is marked with those nodes."""
    feeders = {id(c): pool.feeders(c) for c in changes}
    deleted = [c for c in changes if c.kind == "DELETED"]
    fed = [c for c in deleted if feeders[id(c)]]
    print(
        f"ResourceFlavors {when}: {len(changes) - len(deleted)} created, {len(deleted)} deleted"
        f" ({len(fed)} while a node still fed them)"
    )
    for change in changes:
        nodes = feeders[id(change)]
        note = f" (still fed by {', '.join(nodes[:5])}{' ...' if len(nodes) > 5 else ''})"
        print(f"  {change.at:.2f} {change.kind} {change.name}{note if nodes else ''}")
    sys.stdout.flush()


def start_driver(bed: Testbed) -> None:
    """The verdict driver by its command line under the shipped ServiceAccount, its keepers at
    their shipped settings; the testbed's own faster pool-cards keeper stops first."""
    bed.stop(POOL_CARDS_KEEPER)
    kubeconfig = bed.service_account_kubeconfig(*DRIVER_ACCOUNT)
    port = free_port()
    argv = [sys.executable, "-m", "verdictdriver", "--kubeconfig", str(kubeconfig)]
    bed.run(DRIVER, [*argv, "--health-port", str(port)])
    url = f"http://127.0.0.1:{port}/healthz"
    wait_for(partial(http_ok, url), 120, "the driver's caches to be listed")


@contextlib.contextmanager
def testbed(keep: bool = False) -> Iterator[Testbed]:
    build.ensure()
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-bench-capacity-")), audit=True)
    bed.up()
    if keep:
        print(f"testbed folder (kept): {bed.root}", flush=True)
    try:
        install(bed)
        yield bed
    finally:
        bed.down(keep_root=keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", help="pool sizes (10 100 1000)")
    parser.add_argument("--joins", type=int, help="nodes joining one at a time per size (20)")
    parser.add_argument("--frees", type=int, help="cards freed per size (20)")
    parser.add_argument("--storm", type=int, help="nodes joining at once at the end (100)")
    parser.add_argument("--cards", type=int, default=CARDS, help="T4 cards per node")
    parser.add_argument("--settle", type=float, default=10.0, help="quiet seconds around the storm")
    parser.add_argument("--quick", action="store_true", help="sizes 10 100, 10 joins, storm 20")
    parser.add_argument(
        "--keep", action="store_true", help="keep the testbed's folder (its logs, the audit log)"
    )
    args = parser.parse_args()
    sizes = args.sizes or ([10, 100] if args.quick else [10, 100, 1000])
    joins = args.joins if args.joins is not None else (10 if args.quick else 20)
    frees = args.frees if args.frees is not None else joins
    storm = args.storm if args.storm is not None else (20 if args.quick else 100)

    began = time.monotonic()
    with testbed(keep=args.keep) as bed:
        bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        start_driver(bed)
        bench = Bench(bed, args.cards)
        try:
            print(f"testbed ready in {time.monotonic() - began:.0f}s", flush=True)
            for size in sizes:
                bench.stage(size, joins, frees)
            report_flavors(bench.pool, bench.pool.flavors, "over the whole run")
            bench.storm(storm, args.settle)
        finally:
            bench.stop()
        print(
            f"done in {time.monotonic() - began:.0f}s ({now()}), load average {load()}", flush=True
        )


if __name__ == "__main__":
    main()
