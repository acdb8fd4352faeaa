"""Gangs across nodes on the real Kueue with topology-aware scheduling (docs/topology.md, "Gangs
across nodes").

Six emulated T4 nodes of 4 cards in two racks (`cloud.provider.com/topology-rack` = rack-1,
rack-2), the rack profile set as docs/topology.md, "Topology profiles" tells a user
(`kubectl patch settings default`), two verdict drivers. What is real: the API server, Kueue
with TAS and its Job integration, Metacontroller, the chain's hooks and webhooks as shipped, the
drivers. What is simulated: the nodes are registered Node objects (no kubelet), NFD's features
and each node's `Devices` ledger are written by the test (no node agent: the labels are those
the agent mirrors, the ledger rows those it reports), and no job controller runs in the emulated
cluster, so an admitted Job makes no Pods: where its Pods land is read from the Workload's
topology assignment, which is what Kueue's ungater pins each Pod to.

1. A 4-Pod gang (`batch/v1` Job, parallelism 4, 2 cards a Pod) requiring one rack is admitted,
   every Pod's node in one rack.
1b. Asking for RDMA (docs/topology.md, "Asking for RDMA"): two nodes of rack-1 carry
   `feature.gpustack.ai/rdma.capable=true`, written by the test when it registers them, as the
   agent's NodeFeature would have nfd-master write it. A rack gang of 2 Pods x 4 cards whose
   template selects that label is admitted with every Pod on an RDMA node; the same gang of 3
   Pods (12 cards, within the queue's 24) stays pending with Kueue's message and is never placed
   on a node without the label.
2. A gang that fits the cluster's 24 cards but no single rack's 12 stays pending with Kueue's
   message and is never split.
3. A gang whose Pods fit a rack's totals but not its whole cards (two cards of every node held
   half sliced in the ledger) is held by the per-card check (Retry naming a node), then
   admitted once the cards free.
4. A Workload of two PodSets (prefill, decode) each requiring a rack: the per-card verdict names
   the starved role. A bare Workload, as the emulated testbed runs no JobSet or
   LeaderWorkerSet controller.
0. The pool's InstanceType shows, per rack, each node's free whole cards (`kubectl get
   instancetypes -o wide`: the Gangs column).
5. The setting set back to the default re-points the pool's queue to the hostname flavor and
   deletes the rack flavor; the ClusterQueue and the InstanceType stay the same objects.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from chain.apis import CHAIN_API
from chain.labels import HOSTNAME, RDMA_CAPABLE
from chain.names import local_queue_name
from chain.queues import NODE_DEVICES_CHECK
from chain.topology_assignment import hostname_domains
from kubeapi import Kube, Obj, wait_for
from testbed.drivers import running_drivers
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kubectl import kubectl
from testbed.nodes import T4_KEY, T4_POOL, add_t4_node, remove_t4_node
from testbed.workloads import condition, queued_job, tenant_namespace
from tests.e2e.test_admission import _check, _devices, _ledger, _queue_checks
from tests.e2e.test_pools import forget_pool

KUEUE = "kueue.x-k8s.io/v1beta2"
RACK = "cloud.provider.com/topology-rack"
RACK_PROFILE = "fnv64-58d7a1ce21b8b67c"
"""FNV-1a 64 of the rack key, NUL, the hostname key (as tests/unit/chain/test_profiles.py)."""
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
GPU = "nvidia.com/gpu"
WORKER = "worker.gpustack.ai/v1alpha1"
HALF_HELD = (0, 1)


def _gang(name: str, namespace: str, pods: int, cards: int, rdma: bool = False) -> Obj:
    """A Job of `pods` Pods of `cards` whole cards each, all in one rack; with `rdma`, only on
    RDMA-capable nodes (the tenant's node selector, as docs/topology.md, "Asking for RDMA")."""
    job = queued_job(
        name, namespace, local_queue_name(T4_POOL), {GPU: str(cards)}, "busybox", "true"
    )
    job["spec"].update(parallelism=pods, completions=pods)
    job["spec"]["template"]["metadata"]["annotations"] = {REQUIRED: RACK}
    if rdma:
        job["spec"]["template"]["spec"]["nodeSelector"] = {RDMA_CAPABLE: "true"}
    return job


def _workload_of(kube: Kube, namespace: str, job: str) -> Obj | None:
    """The Workload Kueue's Job integration made for `job`."""
    for wl in kube.list(KUEUE, "Workload", namespace):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return wl
    return None


def _placement(wl: Obj, podset: str = "main") -> dict[str, int]:
    """Pods per hostname in the PodSet's topology assignment, decoded as the driver decodes it
    (`chain.topology_assignment`, unit-tested on Kueue's compact form)."""
    for assignment in wl["status"]["admission"]["podSetAssignments"]:
        if assignment["name"] == podset:
            domains = hostname_domains(
                assignment["topologyAssignment"], podset, assignment["count"]
            )
            assert domains is not None, assignment
            return {domain.hostname: domain.pods for domain in domains}
    raise AssertionError(f"no assignment for {podset}: {wl['status']['admission']}")


@pytest.fixture
def racks(testbed: Testbed, chain: Installed) -> Iterator[dict[str, str]]:
    """Six T4 nodes (rack by node name), the first two of rack-1 RDMA-capable, the rack profile
    set, two drivers; all undone after."""
    kube = testbed.kube
    forget_pool(kube, T4_POOL)
    tag = uuid.uuid4().hex[:5]
    rack_of = {f"rk{r}-{tag}-{i}": f"rack-{r}" for r in (1, 2) for i in range(3)}
    rdma = {f"rk1-{tag}-{i}" for i in range(2)}
    wait_for(lambda: kube.get(CHAIN_API, "Settings", "default"), 60, "the Settings singleton")
    levels = json.dumps({"spec": {"topology-levels": [RACK, HOSTNAME]}})
    kubectl(testbed, "patch", "settings", "default", "--type=merge", "-p", levels)
    for name, rack in rack_of.items():
        add_t4_node(kube, name, 4, {RACK: rack, **({RDMA_CAPABLE: "true"} if name in rdma else {})})
    try:
        with running_drivers(testbed):
            yield rack_of
    finally:
        kubectl(testbed, "patch", "settings", "default", "--type=merge", "-p", _UNSET_LEVELS)
        for name in rack_of:
            remove_t4_node(kube, name)
        forget_pool(kube, T4_POOL, tuple(rack_of))


_UNSET_LEVELS = json.dumps({"spec": {"topology-levels": None}})
"""Back to the default profile (a merge patch's null removes the key; idempotent)."""


def _rack_flavor(kube: Kube) -> Obj | None:
    """The T4 pool's rack-profile flavor once it counts all six nodes."""
    for rf in kube.list(KUEUE, "ResourceFlavor"):
        labels = rf["metadata"].get("labels") or {}
        if (
            labels.get("topology.gpustack.ai/profile") == RACK_PROFILE
            and labels.get(f"{T4_KEY}.capacity") == "24"
        ):
            return rf
    return None


def _pending_message(kube: Kube, namespace: str, job: str) -> Obj | None:
    """The Job's Workload once Kueue says, in its QuotaReserved condition, why it waits."""
    wl = _workload_of(kube, namespace, job)
    for found in ((wl or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == "QuotaReserved" and found["status"] == "False":
            return wl if found.get("message") else None
    return None


def _message(wl: Obj, kind: str) -> str:
    return str(next(c.get("message", "") for c in wl["status"]["conditions"] if c["type"] == kind))


def _write_ledgers(kube: Kube, nodes: dict[str, str], held: tuple[int, ...]) -> None:
    for name in nodes:
        kube.apply(_ledger(name, held), subresource="status")


def _verdict(kube: Kube, namespace: str, job: str) -> Obj | None:
    """The Job's Workload once admitted or answered Retry by the per-card check."""
    wl = _workload_of(kube, namespace, job)
    if condition(wl, "Admitted") == "True" or _retry_note(kube, namespace, wl):
        return wl
    return None


def _retry_note(kube: Kube, namespace: str, wl: Obj | None) -> str:
    """The per-card check's Retry message for `wl`, from its Event (`kubectl describe`): Kueue
    resets the check to Pending soon after evicting, the Event stays."""
    name = ((wl or {}).get("metadata") or {}).get("name")
    for event in kube.list("events.k8s.io/v1", "Event", namespace) if name else ():
        if event.get("regarding", {}).get("name") == name and event.get("reason") == (
            "NodeDevicesRetry"
        ):
            return str(event.get("note") or "")
    return ""


def test_gangs_are_placed_in_one_rack_and_judged_card_by_card(
    testbed: Testbed, racks: dict[str, str]
) -> None:
    kube = testbed.kube
    started = time.monotonic()
    flavor = wait_for(lambda: _rack_flavor(kube), 120, "the T4 rack-profile flavor of 24 cards")
    assert flavor["metadata"]["name"].endswith(f"-{RACK_PROFILE}")
    topology = kube.get(KUEUE, "Topology", flavor["spec"]["topologyName"]) or {}
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [RACK, HOSTNAME]
    for name in racks:
        node = kube.get("v1", "Node", name) or {}
        assert node["metadata"]["labels"]["topology.gpustack.ai/profile"] == RACK_PROFILE
    labels = {k: v for k, v in flavor["spec"]["nodeLabels"].items() if not k.endswith(".count")}
    for name in racks:
        kube.apply(_devices(name, labels))
    _write_ledgers(kube, racks, ())
    wait_for(lambda: NODE_DEVICES_CHECK in _queue_checks(kube), 120, "the queue to name the check")
    wait_for(
        lambda: condition(kube.get(KUEUE, "ClusterQueue", T4_POOL), "Active") == "True",
        60,
        "the T4 queue Active",
    )
    print(f"\nsix nodes in two racks, pool ready: {time.monotonic() - started:.1f} s")

    # The view: per rack, each node's free whole cards, and the Gangs column of -o wide.
    def domains() -> list[Obj] | None:
        found = kube.get(WORKER, "InstanceType", T4_POOL) or {}
        return (found.get("status") or {}).get("topologyDomains")

    # The keeper tallies nodes as their ledgers and Nodes arrive, so a first view may count
    # only some of the six: wait for the settled one rather than take the first.
    settled = [
        {"name": rack, "freeWholeCards": [4, 4, 4], "idleNodes": 3} for rack in ("rack-1", "rack-2")
    ]
    wait_for(lambda: domains() == settled, 60, f"the pool's view per rack, {settled}")
    wide = kubectl(testbed, "get", "instancetypes", T4_POOL, "-o", "wide")
    assert "GANGS" in wide and "rack-1:3/3,rack-2:3/3" in wide, wide

    with tenant_namespace(kube, T4_POOL) as ns:
        # 1. 4 Pods x 2 cards, one rack: admitted, every Pod's node in one rack.
        kube.create(_gang("rack-gang", ns, 4, 2))
        admitted = wait_for(
            lambda: _verdict(kube, ns, "rack-gang"), 90, "a verdict on the rack gang"
        )
        assert condition(admitted, "Admitted") == "True", _check(admitted)
        placed = _placement(admitted)
        assert sum(placed.values()) == 4, placed
        assert len({racks[host] for host in placed}) == 1, placed
        kube.delete("batch/v1", "Job", "rack-gang", ns)
        wait_for(
            lambda: _workload_of(kube, ns, "rack-gang") is None, 60, "the gang's Workload gone"
        )

        # 1b. RDMA asked by the template's node selector: Kueue's TAS keeps only the nodes the
        # selector matches, the per-card check judges those. Two RDMA nodes host 2 Pods x 4
        # cards; 3 such Pods are within the queue's quota and still not placeable.
        rdma_started = time.monotonic()
        node_labels = {n: (kube.get("v1", "Node", n) or {})["metadata"]["labels"] for n in racks}
        rdma_nodes = {n for n, labels in node_labels.items() if labels.get(RDMA_CAPABLE) == "true"}
        assert len(rdma_nodes) == 2 and len({racks[n] for n in rdma_nodes}) == 1, rdma_nodes
        kube.create(_gang("rdma-gang", ns, 2, 4, rdma=True))
        admitted = wait_for(
            lambda: _verdict(kube, ns, "rdma-gang"), 90, "a verdict on the RDMA gang"
        )
        assert condition(admitted, "Admitted") == "True", _check(admitted)
        assert _placement(admitted) == dict.fromkeys(rdma_nodes, 1), _placement(admitted)
        kube.delete("batch/v1", "Job", "rdma-gang", ns)
        wait_for(
            lambda: _workload_of(kube, ns, "rdma-gang") is None, 60, "the RDMA gang's Workload gone"
        )
        kube.create(_gang("rdma-three", ns, 3, 4, rdma=True))
        pending = wait_for(
            lambda: _pending_message(kube, ns, "rdma-three"), 60, "3 RDMA Pods pending"
        )
        message = _message(pending, "QuotaReserved")
        print(f"three RDMA Pods: {message}")
        assert "allows to fit only 2 out of 3 pod(s)" in message, message
        assert "nodeSelector: 4" in message, message
        wl = _workload_of(kube, ns, "rdma-three") or pending
        assert condition(wl, "QuotaReserved") != "True"
        assert not (wl["status"].get("admission") or {}), wl["status"]
        kube.delete("batch/v1", "Job", "rdma-three", ns)
        wait_for(
            lambda: _workload_of(kube, ns, "rdma-three") is None, 60, "rdma-three's Workload gone"
        )
        print(f"RDMA step: {time.monotonic() - rdma_started:.1f} s")

        # 2. 4 Pods x 4 cards: 16 cards fit the cluster's 24 and no rack's 12. Pending with
        # Kueue's message, never split (no assignment at all).
        kube.create(_gang("too-big", ns, 4, 4))

        pending = wait_for(
            lambda: _pending_message(kube, ns, "too-big"),
            60,
            "the too-big gang pending with a message",
        )
        time.sleep(3)  # it stays so while nothing changes
        pending = _workload_of(kube, ns, "too-big") or pending
        message = _message(pending, "QuotaReserved")
        print(f"too-big gang: {message}")
        assert condition(pending, "QuotaReserved") != "True"
        assert not (pending["status"].get("admission") or {}), pending["status"]
        assert "topology" in message.lower() or "fit" in message.lower(), message
        kube.delete("batch/v1", "Job", "too-big", ns)
        wait_for(lambda: _workload_of(kube, ns, "too-big") is None, 60, "too-big's Workload gone")

        # 3. Two cards of every node held half sliced: 2 whole cards free a node, Kueue still
        # sees 4. 3 Pods x 3 cards fit a rack's totals (one Pod a node) but no node's cards.
        _write_ledgers(kube, racks, HALF_HELD)
        kube.create(_gang("held", ns, 3, 3))
        held = wait_for(lambda: _verdict(kube, ns, "held"), 90, "a verdict on the held gang")
        assert condition(held, "Admitted") != "True"
        retry = _retry_note(kube, ns, held)
        assert retry.startswith('no card on the node "rk') and "Kueue assigned" in retry, retry
        freed_at = time.monotonic()
        _write_ledgers(kube, racks, ())

        def admitted_held() -> Obj | None:
            wl = _workload_of(kube, ns, "held")
            return wl if condition(wl, "Admitted") == "True" else None

        admitted = wait_for(admitted_held, 150, "the held gang admitted once cards freed")
        print(f"held gang admitted {time.monotonic() - freed_at:.1f} s after the cards freed")
        placed = _placement(admitted)
        assert sorted(placed.values()) == [1, 1, 1] and len({racks[h] for h in placed}) == 1
        kube.delete("batch/v1", "Job", "held", ns)
        wait_for(lambda: _workload_of(kube, ns, "held") is None, 60, "the held Workload gone")

        # 4. Two roles, one starved: decode's 3 Pods x 4 cards fill three nodes of a rack (as
        # Kueue counts), where the ledger holds one card each; prefill's 1 card fits anywhere.
        _write_ledgers(kube, racks, (0,))
        kube.create(_roles_workload("roles", ns))

        def roles_verdict() -> Obj | None:
            wl = kube.get(KUEUE, "Workload", "roles", ns)
            return wl if condition(wl, "Admitted") == "True" or _retry_note(kube, ns, wl) else None

        judged = wait_for(roles_verdict, 90, "a verdict on the two-role Workload")
        assert condition(judged, "Admitted") != "True", _check(judged)
        message = _retry_note(kube, ns, judged)
        print(f"two roles: {message}")
        assert 'for role "decode"' in message and "prefill" not in message, message
        decode_nodes = _placement(judged, "decode")
        assert any(f'node "{host}"' in message for host in decode_nodes), (message, decode_nodes)
        kube.delete(KUEUE, "Workload", "roles", ns)

    # 5. The setting back to the default: the pool's queue is re-pointed to the hostname
    # profile's flavor; the ClusterQueue and the InstanceType are the same objects.
    queue_uid = (kube.get(KUEUE, "ClusterQueue", T4_POOL) or {})["metadata"]["uid"]
    type_uid = (kube.get(WORKER, "InstanceType", T4_POOL) or {})["metadata"]["uid"]
    switched_at = time.monotonic()
    kubectl(testbed, "patch", "settings", "default", "--type=merge", "-p", _UNSET_LEVELS)
    hostname_flavor = flavor["metadata"]["name"].removesuffix(f"-{RACK_PROFILE}")

    def queue_flavors() -> list[str]:
        cq = kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        return [f["name"] for group in groups for f in group["flavors"]]

    wait_for(lambda: queue_flavors() == [hostname_flavor], 60, "the queue on the hostname flavor")
    wait_for(
        lambda: kube.get(KUEUE, "ResourceFlavor", flavor["metadata"]["name"]) is None,
        60,
        "the rack flavor deleted",
    )
    print(f"profile switched back in {time.monotonic() - switched_at:.1f} s")
    assert (kube.get(KUEUE, "ClusterQueue", T4_POOL) or {})["metadata"]["uid"] == queue_uid
    assert (kube.get(WORKER, "InstanceType", T4_POOL) or {})["metadata"]["uid"] == type_uid
    print(f"module body: {time.monotonic() - started:.1f} s")


def _roles_workload(name: str, namespace: str) -> Obj:
    """A bare Workload of two PodSets, each requiring one rack."""

    def podset(role: str, pods: int, cards: int) -> Obj:
        gpus = {GPU: str(cards)}
        container = {
            "name": "c",
            "image": "busybox",
            "resources": {"requests": gpus, "limits": gpus},
        }
        return {
            "name": role,
            "count": pods,
            "topologyRequest": {"required": RACK},
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        }

    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": local_queue_name(T4_POOL),
            "podSets": [podset("prefill", 1, 1), podset("decode", 3, 4)],
        },
    }
