"""Restarts mid-flight (#35, item 2), on the emulated testbed: a burst of admissions rides out a
restart of Kueue, of Metacontroller, of the verdict driver, and of the API server with etcd.

What is real: etcd, the API server, the controller manager, Kueue, Metacontroller, the chain's
hooks and webhooks as shipped, one verdict driver (a single replica, so no standby covers its
restart), three node agents (`python -m nodeagent serve` over simulated hardware, two of 4 x T4
and one of 2 x L4: two pools) whose device plugins a kubelet emulator each calls. What the test
plays: the job controller and the kubelet, which the emulated cluster lacks. For each admitted
Workload it creates the Pod on the node Kueue assigned and has that node's kubelet emulator admit
it (Allocate: the agent picks the card and writes the Pod's allocation record); the Pod "runs"
for `RUN_S`, then ends (kubelet forgets it, the Pod is deleted), and once the node's ledger no
longer charges it the Workload is deleted (its quota freed), so the next waiting one is admitted.

Each case submits a wave of Workloads asking more cards than the nodes have (whole cards on both
pools, shares of an L4 card beside whole L4 cards), waits for the first admission of the wave,
restarts the component (`Testbed.restart`: stopped, kept down `DOWN_S`, started again with the
same flags, configuration and data dir) and drives the wave to its end. The owner loop keeps
running while the component is down (it tolerates an API server that does not answer).

Checked on every snapshot the owner reads (one list of Workloads, one of Pods, the Devices):
- **no card promised twice**: on every node, the Workloads that hold cards by the verdict
  driver's own rule (`chain.workload_state.holds_cards`: admitted, or the check said Ready) ask
  no more than the node's cards (whole cards, plus shares packed ten to a card);
- **no card held twice**: the Pods' allocation records never charge a card in two modes, an
  exclusive card to two Pods, or a card beyond its 1,600,000 units; and no Allocate is refused
  (a refusal would mean the gates promised a card the node agent could not give).

Checked after each case and at the end: every Workload of the wave was admitted and ran, none
was lost; every node's ledger (`Devices.status`) equals what the Pods' records add up to
(`chain.ledger_rebuild.rebuild_status`); the pools' ClusterQueues, LocalQueues and
ResourceFlavors are the same objects as before (no attachment deleted and made again); and the
admission rule below. Each case's recovery is printed (from the component ready again to the
next admission, and to the wave's end), never asserted as a time.

**Admitted at most once.** A Workload may be admitted once. It may be admitted again only after
Kueue evicted it and its first admission's cards were freed: the owner deletes the evicted
Workload's Pods and gives its quota back (as a job controller does) only once the node's ledger
no longer charges them, so Kueue cannot re-admit before that. Checked two ways: from the owner's
samples (each admission after the first follows such a freeing), and from Kueue's own `Admitted`
Events, which do not depend on sampling: per Workload at most one more than the times the owner
freed it.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

import pytest

from chain.devices import Devices
from chain.families import Family
from chain.ledger import DevicesStatus, Mode
from chain.ledger_rebuild import PodAllocations, rebuild_status
from chain.manufacturers import default_manufacturers
from chain.names import local_queue_name
from chain.queues import NODE_DEVICES_CHECK
from chain.units import RESOURCE_MAX_UNITS
from chain.workload_state import holds_cards, workload_shares
from kubeapi import Kube, KubeError, Obj, wait_for
from testbed.components import http_ok
from testbed.drivers import queues_naming_the_check, running_drivers
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kubelet import AdmissionError, delete_ended
from testbed.nodes import T4_POOL
from testbed.workloads import condition, release_quota
from tests.e2e.test_device_plugin import PluginNode, agent_node
from tests.e2e.test_pools import forget_pool

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
L4_POOL = "gpustack--nvidia-l4-linux-amd64"
GPU = "nvidia.com/gpu"
SHARED = GPU + ".shared"
DRIVER = "admission-driver-a"
RUN_S = 1.5
"""How long an admitted Workload's Pod holds its cards before it ends."""
DOWN_S = 2.0
"""How long a restarted component stays down."""
WAVE_S = 150.0
"""The deadline for one wave to end (every Workload admitted, run and gone)."""
TABLE = default_manufacturers()


@dataclass
class Life:
    """One Workload as its owner (the test, playing the job controller) has seen it."""

    name: str
    node: str
    uid: str = ""
    admissions: list[float] = field(default_factory=list)
    """Monotonic times the owner first saw it admitted, once per admission."""
    admitted_now: bool = False
    freed: int = 0
    """Evictions whose Pods the owner deleted and whose cards the ledger freed, before it gave
    the quota back."""
    evicted_now: bool = False
    pod_started: float | None = None
    ending: bool = False
    deleted: bool = False
    gone: bool = False


@dataclass
class Owner:
    """The job controller and the kubelet the emulated cluster lacks, for one namespace."""

    kube: Kube
    namespace: str
    nodes: dict[str, PluginNode]
    lives: dict[str, Life] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """Every broken invariant seen, with when and where; the test fails on the first."""
    last_admission: float = 0.0

    def submit(self, name: str, node: str, queue: str, limits: dict[str, str]) -> None:
        obj = _workload(name, self.namespace, queue, limits, node)

        def created() -> Obj | None:
            try:
                return self.kube.create(obj)
            except KubeError as refused:  # the webhook's catalog may not know the pool yet
                if refused.status == 503 or "not known yet" in refused.message:
                    return None
                raise

        made = wait_for(created, 60, f"the Workload {name} to be taken")
        self.lives[name] = Life(name, node, str(made["metadata"]["uid"]))

    # -- one pass --------------------------------------------------------------------------

    def pump(self) -> bool:
        """Read the cluster once, check the invariants on what was read, and move every
        Workload one step along its life. True once every Workload submitted is gone."""
        kube = self.kube
        workloads = {w["metadata"]["name"]: w for w in kube.list(KUEUE, "Workload", self.namespace)}
        pods = {p["metadata"]["name"]: p for p in kube.list("v1", "Pod", self.namespace)}
        devices = {d["metadata"]["name"]: d for d in kube.list(WORKER, "Devices")}
        self.audit(workloads, pods)
        now = time.monotonic()
        for life in self.lives.values():
            if life.gone:
                continue
            wl = workloads.get(life.name)
            if wl is None:
                if life.deleted:
                    life.gone = True
                else:
                    self.problems.append(f"Workload {life.name} is gone, never deleted: lost")
                continue
            self.step(life, wl, pods, devices, now)
        return all(life.gone for life in self.lives.values())

    def step(
        self, life: Life, wl: Obj, pods: dict[str, Obj], devices: dict[str, Obj], now: float
    ) -> None:
        admitted = condition(wl, "Admitted") == "True"
        if admitted and not life.admitted_now:
            if life.admissions and life.freed < len(life.admissions):
                self.problems.append(
                    f"Workload {life.name} admitted again without its first admission's cards "
                    f"freed (admissions {len(life.admissions)}, freed {life.freed})"
                )
            life.admissions.append(now)
            self.last_admission = now
            hosts = {s.node for s in workload_shares(wl, TABLE) if s.node}
            if hosts != {life.node}:
                self.problems.append(f"Workload {life.name} placed on {hosts}, not {life.node}")
        life.admitted_now = admitted
        pod = pods.get(life.name)
        evicted = condition(wl, "Evicted") == "True"
        if evicted and condition(wl, "QuotaReserved") == "True":
            # Kueue evicted it: end its Pod, and give the quota back only once the node's
            # ledger no longer charges the Pod (then a new admission gets free cards).
            life.evicted_now = True
            if pod is not None:
                self.end_pod(life, pod)
            elif self.ledger_settled(life.node, pods, devices):
                release_quota(self.kube, self.namespace, life.name)
                life.freed += 1
                life.pod_started, life.ending = None, False
            return
        life.evicted_now = False
        if life.deleted:
            return
        if admitted and life.pod_started is None:
            self.start_pod(life, wl)
        elif life.pod_started is not None and not life.ending and now - life.pod_started >= RUN_S:
            if pod is not None:
                self.end_pod(life, pod)
        elif life.ending and pod is None and self.ledger_settled(life.node, pods, devices):
            self.kube.delete(KUEUE, "Workload", life.name, self.namespace)
            life.deleted = True

    def start_pod(self, life: Life, wl: Obj) -> None:
        """What the job controller and the scheduler do: the Workload's Pod, on its node; then
        what the kubelet does: admit it through the node agent's device plugin."""
        [podset] = wl["spec"]["podSets"]
        spec = dict(podset["template"]["spec"])
        spec["nodeName"] = life.node
        pod = self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": life.name, "namespace": self.namespace},
                "spec": spec,
            }
        )
        life.pod_started = time.monotonic()
        try:
            self.nodes[life.node].kubelet.admit(pod)
        except AdmissionError as refused:
            self.problems.append(
                f"Allocate refused {life.name} on {life.node}: {refused}; "
                f"{self.node_now(life.node)}"
            )

    def node_now(self, node: str) -> str:
        """The node's ledger and its Pods' records, read now (a refusal's context)."""
        devices = self.kube.get(WORKER, "Devices", node)
        pods = _on_node(self.kube.list("v1", "Pod", self.namespace), node)
        held = {
            p["metadata"]["name"]: [
                (c.row.id, c.row.mode.name)
                for r in PodAllocations.from_pod(p).records.values()
                for c in r.claims()
            ]
            for p in pods
        }
        ledger = ledger_differs(node, devices, pods) or "the ledger equals the records"
        return f"Pods' records {held}; {ledger}"

    def end_pod(self, life: Life, pod: Obj) -> None:
        self.nodes[life.node].kubelet.forget(pod)
        delete_ended(self.kube, pod)
        life.ending = True

    def ledger_settled(self, node: str, pods: dict[str, Obj], devices: dict[str, Obj]) -> bool:
        return not ledger_differs(node, devices.get(node), _on_node(pods.values(), node))

    # -- invariants ------------------------------------------------------------------------

    def audit(self, workloads: dict[str, Obj], pods: dict[str, Obj]) -> None:
        """No card promised twice (Workloads) nor held twice (Pods' records), on this read."""
        for node, plugin in self.nodes.items():
            self.problems += promised_twice(node, plugin_cards(plugin), workloads.values())
            self.problems += records_overlap(node, _on_node(pods.values(), node))


def promised_twice(node: str, cards: int, workloads: Iterable[Obj]) -> list[str]:
    """What the Workloads that hold cards by the verdict driver's rule (admitted, or the check
    said Ready) ask of `node` beyond its `cards` (whole cards, plus shares packed ten to a card)."""
    exclusive, shared_units = 0, 0
    holders = []
    for wl in workloads:
        if not holds_cards(wl, NODE_DEVICES_CHECK):
            continue
        for share in workload_shares(wl, TABLE):
            if share.node != node:
                continue
            holders.append(wl["metadata"]["name"])
            for demand in share.per_pod:
                if demand.family == Family.EXCLUSIVE:
                    exclusive += share.pods * demand.cards
                elif demand.family == Family.SHARED:
                    shared_units += share.pods * demand.cards * demand.units_per_card
    if exclusive + math.ceil(shared_units / RESOURCE_MAX_UNITS) <= cards:
        return []
    return [
        f"cards promised twice on {node}: {holders} hold {exclusive} whole cards and "
        f"{shared_units} shared units, more than its {cards} cards"
    ]


def plugin_cards(node: PluginNode) -> int:
    return len(node.kubelet.endpoints[GPU].devices)


def _on_node(pods: Iterable[Obj], node: str) -> list[Obj]:
    return [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]


def records_overlap(node: str, pods: list[Obj]) -> list[str]:
    """What the Pods' allocation records on `node` charge twice, card by card."""
    modes: dict[str, set[Mode]] = {}
    exclusive: dict[str, list[str]] = {}
    units: dict[str, int] = {}
    for pod in pods:
        held = PodAllocations.from_pod(pod)
        if held.terminal:
            continue
        for record in held.records.values():
            for claim in record.claims():
                row = claim.row
                if row.mode in (Mode.NONE, Mode.VISIBILITY):
                    continue
                modes.setdefault(row.id, set()).add(row.mode)
                units[row.id] = units.get(row.id, 0) + row.allocated
                if row.mode == Mode.EXCLUSIVE:
                    exclusive.setdefault(row.id, []).append(held.name)
    problems = []
    for card, seen in modes.items():
        if len(seen) > 1:
            problems.append(f"card {card} on {node} recorded in modes {sorted(seen)}")
        if len(exclusive.get(card, [])) > 1:
            problems.append(f"card {card} on {node} held whole by {exclusive[card]}")
        if units[card] > RESOURCE_MAX_UNITS:
            problems.append(f"card {card} on {node} charged {units[card]} units")
    return problems


def ledger_differs(node: str, devices: Obj | None, pods: list[Obj]) -> str:
    """How the node's published ledger differs from what its Pods' records add up to; ""
    when they agree."""
    if devices is None:
        return f"no Devices for {node}"
    parsed = Devices.parse(devices)
    rebuilt = rebuild_status(parsed.spec, [PodAllocations.from_pod(p) for p in pods]).status

    def rows(status: DevicesStatus) -> dict[tuple[str, str], tuple[int, int, int]]:
        return {
            (group.id, row.id): (int(row.mode), row.remaining, row.allocated_slices)
            for group, row in status.rows()
        }

    published, expected = rows(parsed.status), rows(rebuilt)
    if published == expected:
        return ""
    return f"ledger of {node} {published} != its records {expected}"


def _workload(name: str, namespace: str, queue: str, limits: dict[str, str], node: str) -> Obj:
    """A bare Workload of one Pod asking `limits` on LocalQueue `queue`, pinned to `node`."""
    container = {
        "name": "c",
        "image": "busybox",
        "resources": {"requests": limits, "limits": limits},
    }
    pod: Obj = {
        "restartPolicy": "Never",
        "containers": [container],
        "nodeSelector": {"kubernetes.io/hostname": node},
    }
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}],
        },
    }


# -- the cluster -------------------------------------------------------------------------------


@dataclass
class Burst:
    testbed: Testbed
    owner: Owner
    t4: tuple[str, str]
    l4: str
    driver_port: int


@pytest.fixture
def burst(testbed: Testbed, chain: Installed) -> Iterator[Burst]:
    """Three agent nodes (2 x t4x4, 1 x l4x2) under kubelet emulators, one verdict driver, a
    tenant namespace with both pools' LocalQueues; all undone after."""
    kube = testbed.kube
    forget_pool(kube, T4_POOL)
    forget_pool(kube, L4_POOL)
    with contextlib.ExitStack() as stack:
        # Registered first so they run last, once the nodes are gone (LIFO): a pool's derived
        # type deleted while its nodes live comes back.
        pooled: dict[str, tuple[str, ...]] = {}
        for pool in (T4_POOL, L4_POOL):
            stack.callback(lambda p=pool: forget_pool(kube, p, pooled.get(p, ())))
        t4a = stack.enter_context(agent_node(testbed, "t4x4", nfd=True))
        t4b = stack.enter_context(agent_node(testbed, "t4x4", nfd=True))
        l4 = stack.enter_context(agent_node(testbed, "l4x2", nfd=True))
        nodes = {n.name: n for n in (t4a, t4b, l4)}
        for node, cards in ((t4a, 4), (t4b, 4), (l4, 2)):
            offer_cards(testbed, node, cards)
        ports = stack.enter_context(running_drivers(testbed, replicas=("a",)))
        # Registered so that `Testbed.restart` waits for the driver to answer again.
        url = f"http://127.0.0.1:{ports['a']}/healthz"
        testbed.wait_ready(DRIVER, partial(http_ok, url), 30)
        for pool in (T4_POOL, L4_POOL):
            wait_for(
                lambda p=pool: (
                    condition(kube.get(KUEUE, "ClusterQueue", p), "Active") == "True"
                    and p in queues_naming_the_check(kube)
                ),
                120,
                f"the ClusterQueue {pool} Active and naming the per-card check",
            )
        namespace = f"restarts-{uuid.uuid4().hex[:5]}"
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        stack.callback(kube.delete, "v1", "Namespace", namespace)
        # Run first (LIFO): a test that failed mid-wave leaves Pods that no kubelet will end,
        # and they would hold the namespace, its Workloads, the pools' queues and so the next
        # module's pools (stop 44: two modules' setup timed out on the T4 InstanceType).
        stack.callback(_end_every_pod, kube, namespace)
        for pool in (T4_POOL, L4_POOL):
            wait_for(
                lambda p=pool: kube.get(KUEUE, "LocalQueue", local_queue_name(p), namespace),
                60,
                f"the LocalQueue of {pool} in {namespace}",
            )
        pooled.update({T4_POOL: (t4a.name, t4b.name), L4_POOL: (l4.name,)})
        owner = Owner(kube, namespace, nodes)
        yield Burst(testbed, owner, (t4a.name, t4b.name), l4.name, ports["a"])


def _end_every_pod(kube: Kube, namespace: str) -> None:
    """What the kubelets would do for the namespace's Pods left running: end and remove them."""
    for pod in kube.list("v1", "Pod", namespace):
        delete_ended(kube, pod)


def offer_cards(testbed: Testbed, node: PluginNode, cards: int) -> None:
    """Wait for the agent's plugins and its ledger, then write what a kubelet reports once they
    listed their tokens (the emulator writes no Node status): Kueue's topology placement fits
    each Workload against the node's allocatable."""
    kube = testbed.kube
    whole = node.kubelet.wait_devices(GPU, lambda d: len(d) == cards, timeout=90)
    shares = node.kubelet.wait_devices(SHARED, lambda d: len(d) > 0, timeout=90)
    offered = {GPU: str(len(whole)), SHARED: str(len(shares))}
    kube.merge_patch(
        "v1",
        "Node",
        node.name,
        {"status": {"capacity": offered, "allocatable": offered}},
        subresource="status",
    )

    def ledger_ready() -> bool:
        found = kube.get(WORKER, "Devices", node.name)
        return found is not None and not ledger_differs(node.name, found, [])

    wait_for(ledger_ready, 90, f"the ledger of {node.name}, every card free")


# -- the cases ---------------------------------------------------------------------------------


def _wave(burst: Burst, tag: str) -> None:
    """More than fits: per T4 node 5 cards asked of 4, on the L4 node 3 whole cards and a share
    asked of 2 cards."""
    owner = burst.owner
    t4_queue, l4_queue = local_queue_name(T4_POOL), local_queue_name(L4_POOL)
    for node in burst.t4:
        for i, cards in enumerate((2, 1, 2)):
            owner.submit(f"{tag}-{node}-{i}", node, t4_queue, {GPU: str(cards)})
    asks = ({GPU: "1"}, {SHARED: "1"}, {GPU: "1"}, {GPU: "1"})
    for i, limits in enumerate(asks):
        owner.submit(f"{tag}-{burst.l4}-{i}", burst.l4, l4_queue, limits)


def _drive(owner: Owner, until: Callable[[], bool], deadline: float, what: str) -> None:
    """Pump the owner until `until()`, failing on the first broken invariant or at the deadline
    with what did not converge."""

    def probe() -> bool:
        owner.pump()
        if owner.problems:
            raise AssertionError("\n".join(owner.problems))
        return until()

    try:
        wait_for(probe, deadline, what, interval=0.2)
    except TimeoutError as err:
        stuck = {
            life.name: (len(life.admissions), life.pod_started is not None, life.deleted)
            for life in owner.lives.values()
            if not life.gone
        }
        raise TimeoutError(f"{err}; not done (admissions, pod started, deleted): {stuck}") from None


def _attachments(kube: Kube, namespace: str) -> dict[str, str]:
    """The uids of the pools' ClusterQueues, LocalQueues and ResourceFlavors."""
    found = {}
    for pool in (T4_POOL, L4_POOL):
        cq = kube.get(KUEUE, "ClusterQueue", pool) or {}
        found[f"ClusterQueue {pool}"] = str(cq.get("metadata", {}).get("uid"))
        lq = kube.get(KUEUE, "LocalQueue", local_queue_name(pool), namespace) or {}
        found[f"LocalQueue {pool}"] = str(lq.get("metadata", {}).get("uid"))
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                rf = kube.get(KUEUE, "ResourceFlavor", flavor["name"]) or {}
                found[f"ResourceFlavor {flavor['name']}"] = str(rf.get("metadata", {}).get("uid"))
    return found


CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kueue", ("kueue",)),
    ("metacontroller", ("metacontroller",)),
    ("verdict driver", (DRIVER,)),
    ("API server and etcd", ("etcd", "kube-apiserver")),
)


def test_admissions_ride_out_restarts(testbed: Testbed, burst: Burst) -> None:
    owner, kube = burst.owner, testbed.kube
    before = _attachments(kube, owner.namespace)
    figures = []
    for number, (case, names) in enumerate(CASES):
        submitted = time.monotonic()
        _wave(burst, f"w{number}")
        _drive(
            owner,
            lambda s=submitted: owner.last_admission > s,
            WAVE_S,
            f"the first admission of the wave before restarting {case}",
        )
        back = testbed.restart(names, down_s=DOWN_S)
        _drive(owner, lambda b=back: owner.last_admission > b, WAVE_S, f"an admission after {case}")
        first = owner.last_admission - back
        _drive(
            owner,
            lambda: all(lf.gone for lf in owner.lives.values()),
            WAVE_S,
            f"the wave of {case} to end",
        )
        converged = time.monotonic() - back
        _converged(owner, case)
        assert _attachments(kube, owner.namespace) == before, (
            f"an attachment was made again after {case}"
        )
        figures.append((case, first, converged))
    print("\nrestart              next admission   wave's end   (seconds after it was ready again)")
    for case, first, converged in figures:
        print(f"{case:<20} {first:>14.1f} {converged:>12.1f}")
    _admitted_at_most_once(kube, owner)


def _converged(owner: Owner, case: str) -> None:
    """After a wave: every Workload was admitted and ran, and every ledger equals its records."""
    for life in owner.lives.values():
        assert life.admissions, f"{life.name} was never admitted ({case})"
    kube = owner.kube

    def settled() -> str:
        pods = kube.list("v1", "Pod", owner.namespace)
        devices = {d["metadata"]["name"]: d for d in kube.list(WORKER, "Devices")}
        return "; ".join(
            differs
            for node in owner.nodes
            if (differs := ledger_differs(node, devices.get(node), _on_node(pods, node)))
        )

    last = ""

    def agree() -> bool:
        nonlocal last
        last = settled()
        return not last

    try:
        wait_for(agree, 60, f"every ledger to equal its records after {case}")
    except TimeoutError as err:
        raise AssertionError(f"{err}: {last}") from None


def _admitted_at_most_once(kube: Kube, owner: Owner) -> None:
    """Kueue's `Admitted` Events per Workload: at most one more than the times it was freed."""
    counted: dict[str, int] = {}
    for event in kube.list("events.k8s.io/v1", "Event", owner.namespace):
        if event.get("reason") != "Admitted":
            continue
        uid = str((event.get("regarding") or {}).get("uid"))
        times = (event.get("series") or {}).get("count") or event.get("deprecatedCount") or 1
        counted[uid] = counted.get(uid, 0) + int(times)
    twice = {
        life.name: (counted.get(life.uid, 0), life.freed)
        for life in owner.lives.values()
        if counted.get(life.uid, 0) > 1 + life.freed
    }
    assert not twice, f"admitted more often than freed (Admitted events, freed): {twice}"
    assert any(counted.get(life.uid) for life in owner.lives.values()), (
        "Kueue wrote no Admitted Event"
    )
