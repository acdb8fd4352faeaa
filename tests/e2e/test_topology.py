"""Gangs across nodes on the real Kueue with topology-aware scheduling (docs/topology.md, "Gangs
across nodes").

Six emulated T4 nodes of 4 cards in two racks (`cloud.provider.com/topology-rack` = rack-1,
rack-2), the rack profile set as docs/topology.md, "Topology profiles" tells a user
(`kubectl patch settings default`), two verdict drivers. What is real: the API server, Kueue
with TAS and its Job and JobSet integrations, the JobSet controller and its webhooks,
Metacontroller, the chain's hooks and webhooks as shipped, the drivers. What is simulated: the
nodes are registered Node objects (no kubelet), NFD's features and each node's `Devices` ledger
are written by the test (no node agent: the labels are those the agent mirrors, the ledger rows
those it reports), and no Job controller runs in the emulated cluster, so an admitted Job makes
no Pods: where its Pods land is read from the Workload's topology assignment, which is what
Kueue's ungater pins each Pod to.

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
2b. `podset-preferred-topology`: a gang preferring a rack (its PodSet's topology request says
   `preferred`) lands in one rack when one fits; the gang of step 2, which fits no rack whole,
   is admitted across both racks when it prefers instead of requires (Kueue's documented
   behaviour for a preferred level), judged Ready node by node (no false Retry); with two cards
   of every node held, a preferred gang of 4 Pods x 3 cards, whose 12 cards equal the cluster's
   12 free whole cards, is answered Retry naming a node (no false Ready from a total).
3. A gang whose Pods fit a rack's totals but not its whole cards (two cards of every node held
   half sliced in the ledger) is held by the per-card check (Retry naming a node), then
   admitted once the cards free.
4. A JobSet of two replicatedJobs (prefill, decode) each requiring a rack, run by the real
   JobSet controller (its webhook defaults the template, Kueue's suspends it, the controller
   makes its child Jobs suspended): Kueue's JobSet integration makes one Workload of two
   PodSets. With every card free it is admitted, each role in one rack, and the controller
   resumes both child Jobs with Kueue's node labels and topology gate; with one card of every
   node held, the per-card verdict names the starved role (decode) and not the other.
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
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
JOBSET = "jobset.x-k8s.io/v1alpha2"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
"""The scheduling gate Kueue puts on an admitted TAS PodSet's Pods; its ungater lifts it per Pod
once it pins the Pod to its assigned node."""
GPU = "nvidia.com/gpu"
WORKER = "worker.gpustack.ai/v1alpha1"
HALF_HELD = (0, 1)


def _gang(
    name: str, namespace: str, pods: int, cards: int, rdma: bool = False, request: str = REQUIRED
) -> Obj:
    """A Job of `pods` Pods of `cards` whole cards each, all in one rack (`request` PREFERRED:
    in one rack if one fits); with `rdma`, only on RDMA-capable nodes (the tenant's node
    selector, as docs/topology.md, "Asking for RDMA")."""
    job = queued_job(
        name, namespace, local_queue_name(T4_POOL), {GPU: str(cards)}, "busybox", "true"
    )
    job["spec"].update(parallelism=pods, completions=pods)
    job["spec"]["template"]["metadata"]["annotations"] = {request: RACK}
    if rdma:
        job["spec"]["template"]["spec"]["nodeSelector"] = {RDMA_CAPABLE: "true"}
    return job


def _workload_of(kube: Kube, namespace: str, job: str, kind: str = "Job") -> Obj | None:
    """The Workload Kueue's integration for `kind` made for the object `job`."""
    for wl in kube.list(KUEUE, "Workload", namespace):
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == kind and o.get("name") == job for o in owners):
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


def _verdict(kube: Kube, namespace: str, job: str, kind: str = "Job") -> Obj | None:
    """The Workload of `job` (a `kind`) once admitted or answered Retry by the per-card check."""
    wl = _workload_of(kube, namespace, job, kind)
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

        # 2b. Preferred, not required: one rack when one fits, both racks when none does; the
        # per-card check judges every node of either placement for its own share.
        preferred_started = time.monotonic()
        kube.create(_gang("prefers", ns, 4, 2, request=PREFERRED))
        admitted = wait_for(lambda: _verdict(kube, ns, "prefers"), 90, "a verdict on 'prefers'")
        assert condition(admitted, "Admitted") == "True", _check(admitted)
        asked = admitted["spec"]["podSets"][0]["topologyRequest"]
        assert asked.get("preferred") == RACK and "required" not in asked, asked
        placed = _placement(admitted)
        assert sum(placed.values()) == 4 and len({racks[h] for h in placed}) == 1, placed
        _delete_job(kube, ns, "prefers")

        # 4 Pods x 4 cards fit no rack's 12: admitted across the racks, every node's share
        # (one Pod, four cards) on that node's four free cards, so Ready (no false Retry).
        kube.create(_gang("spills", ns, 4, 4, request=PREFERRED))
        admitted = wait_for(lambda: _verdict(kube, ns, "spills"), 90, "a verdict on 'spills'")
        assert condition(admitted, "Admitted") == "True", _check(admitted)
        placed = _placement(admitted)
        print(f"preferred gang of 16 cards placed: {placed}")
        assert sorted(placed.values()) == [1, 1, 1, 1], placed
        assert {racks[h] for h in placed} == {"rack-1", "rack-2"}, placed
        _delete_job(kube, ns, "spills")

        # Two cards of every node held: 12 whole cards free in all, exactly the 12 that 4 Pods
        # x 3 cards ask, and no node with 3. Kueue sees 4 a node and spreads the gang; the
        # check answers Retry naming a node of it (no false Ready from the total).
        _write_ledgers(kube, racks, HALF_HELD)
        kube.create(_gang("spills-held", ns, 4, 3, request=PREFERRED))
        held = wait_for(lambda: _verdict(kube, ns, "spills-held"), 90, "a verdict on 'spills-held'")
        assert condition(held, "Admitted") != "True", _check(held)
        retry = _retry_note(kube, ns, held)
        print(f"preferred gang, cards held: {retry}")
        named = retry.split('"')[1] if retry.startswith('no card on the node "') else ""
        assert named in racks and "Kueue assigned" in retry, retry
        _delete_job(kube, ns, "spills-held")
        _write_ledgers(kube, racks, ())
        print(f"preferred step: {time.monotonic() - preferred_started:.1f} s")

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

        # 4. Two roles. Every card free: the JobSet is admitted, each role placed in one rack,
        # and the JobSet controller resumes each role's child Job with what Kueue injected
        # (the flavor's node labels, the topology scheduling gate its ungater lifts per Pod).
        roles_started = time.monotonic()
        kube.create(_roles_jobset("roles-fit", ns))
        admitted = wait_for(
            lambda: _verdict(kube, ns, "roles-fit", "JobSet"), 90, "a verdict on 'roles-fit'"
        )
        assert condition(admitted, "Admitted") == "True", _check(admitted)
        for role, pods in (("prefill", [1]), ("decode", [1, 1, 1])):
            placed = _placement(admitted, role)
            assert sorted(placed.values()) == pods and len({racks[h] for h in placed}) == 1, (
                role,
                placed,
            )
        resumed = wait_for(
            lambda: _child_jobs(kube, ns, "roles-fit", suspended=False), 60, "child Jobs resumed"
        )
        for job in resumed:
            pod = job["spec"]["template"]["spec"]
            assert TOPOLOGY_GATE in [g["name"] for g in pod.get("schedulingGates") or []], pod
            assert flavor["spec"]["nodeLabels"].items() <= (pod.get("nodeSelector") or {}).items()
        kube.delete(JOBSET, "JobSet", "roles-fit", ns)
        wait_for(
            lambda: _workload_of(kube, ns, "roles-fit", "JobSet") is None,
            60,
            "the roles-fit Workload gone",
        )

        # One role starved: decode's 3 Pods x 4 cards fill three nodes of a rack (as Kueue
        # counts), where the ledger holds one card each; prefill's 1 card fits anywhere.
        _write_ledgers(kube, racks, (0,))
        kube.create(_roles_jobset("roles", ns))
        created = kube.get(JOBSET, "JobSet", "roles", ns) or {}
        assert created["spec"].get("suspend") is True, created["spec"]  # Kueue's webhook
        for role in created["spec"]["replicatedJobs"]:  # JobSet's own defaulting webhook
            assert role["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"

        judged = wait_for(
            lambda: _verdict(kube, ns, "roles", "JobSet"), 90, "a verdict on the two-role JobSet"
        )
        assert condition(judged, "Admitted") != "True", _check(judged)
        podsets = {ps["name"]: ps for ps in judged["spec"]["podSets"]}
        assert {name: ps["count"] for name, ps in podsets.items()} == {"prefill": 1, "decode": 3}
        assert all(ps["topologyRequest"]["required"] == RACK for ps in podsets.values()), podsets
        message = _retry_note(kube, ns, judged)
        print(f"two roles: {message}")
        assert 'for role "decode"' in message and "prefill" not in message, message
        decode_nodes = _placement(judged, "decode")
        assert any(f'node "{host}"' in message for host in decode_nodes), (message, decode_nodes)
        # The JobSet controller made each role's child Job, suspended while Kueue holds it.
        children = wait_for(
            lambda: _child_jobs(kube, ns, "roles", suspended=True), 60, "the suspended child Jobs"
        )
        assert sorted(job["metadata"]["name"] for job in children) == [
            "roles-decode-0",
            "roles-prefill-0",
        ]
        kube.delete(JOBSET, "JobSet", "roles", ns)
        wait_for(
            lambda: _workload_of(kube, ns, "roles", "JobSet") is None, 60, "the roles Workload gone"
        )
        print(f"two-role JobSet step: {time.monotonic() - roles_started:.1f} s")

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


def _delete_job(kube: Kube, namespace: str, job: str) -> None:
    kube.delete("batch/v1", "Job", job, namespace)
    wait_for(lambda: _workload_of(kube, namespace, job) is None, 60, f"{job}'s Workload gone")


def _roles_jobset(name: str, namespace: str) -> Obj:
    """A JobSet of two roles, each requiring one rack: prefill, 1 Pod of 1 card; decode, 3 Pods
    of 4 cards. The queue label on the JobSet (Kueue's JobSet integration reads it there) and on
    each Pod template (the chain's Pod webhook sees the Pods by it); the templates leave
    `restartPolicy` to JobSet's webhook."""
    queue = {"kueue.x-k8s.io/queue-name": local_queue_name(T4_POOL)}

    def role(role_name: str, pods: int, cards: int) -> Obj:
        gpus = {GPU: str(cards)}
        container = {
            "name": "c",
            "image": "busybox",
            "command": ["true"],
            "resources": {"requests": gpus, "limits": gpus},
        }
        pod = {
            "metadata": {"labels": queue, "annotations": {REQUIRED: RACK}},
            "spec": {"automountServiceAccountToken": False, "containers": [container]},
        }
        job = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": pod}
        return {"name": role_name, "replicas": 1, "template": {"spec": job}}

    return {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": queue},
        "spec": {"replicatedJobs": [role("prefill", 1, 1), role("decode", 3, 4)]},
    }


def _child_jobs(kube: Kube, namespace: str, jobset: str, suspended: bool) -> list[Obj] | None:
    """The JobSet's two child Jobs (one a role) once both exist and are `suspended` or not."""
    found = [
        job
        for job in kube.list("batch/v1", "Job", namespace)
        if any(
            o.get("kind") == "JobSet" and o.get("name") == jobset
            for o in job["metadata"].get("ownerReferences") or []
        )
    ]
    done = len(found) == 2 and all(bool(j["spec"].get("suspend")) == suspended for j in found)
    return found if done else None
