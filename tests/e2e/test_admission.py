"""The verdict driver on the real control plane: per-card verdicts through Kueue.

Two T4 nodes with 4 cards each; the test writes each node's `Devices` ledger itself (no node
agent): cards 0 and 1 are held half sliced, cards 2 and 3 are free. The queue's credits count 8
cards, the ledger has 2 whole cards per node. Two driver replicas run as the shipped
ServiceAccount; the Lease lets one judge. Workloads pin a node with a nodeSelector so topology
placement is deterministic; as there is no job controller for bare Workloads, the test releases
the quota when Kueue evicts one after a Retry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from chain.names import local_queue_name
from chain.queues import NODE_DEVICES_CHECK
from chain.verdicts import NODE_RETRY, PROMISED
from kubeapi import Kube, Obj, wait_for
from testbed.drivers import running_drivers
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.nodes import add_t4_node, remove_t4_node
from testbed.workloads import condition, gpu_workload, release_quota, tenant_namespace
from tests.e2e.test_pools import T4_POOL, forget_pool
from verdictdriver.lease import LEASE_NAME, LEASE_NAMESPACE

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
RESOURCE_MAX_UNITS = 1_600_000
HELD = (0, 1)  # cards held half sliced on every node
T4_KEY = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"


def _workload(kube: Kube, namespace: str, name: str, gpus: int, node: str) -> None:
    kube.create(gpu_workload(name, namespace, local_queue_name(T4_POOL), gpus, hostname=node))


def _devices(node: str, labels: dict[str, str]) -> Obj:
    cards = [
        {
            "id": f"{node}-gpu-{i}",
            "index": i,
            "topology": {"pciBusId": f"0000:0{i}:00.0"},
            "status": {"unhealthy": False, "logicalSliced": {"count": 128}},
        }
        for i in range(4)
    ]
    return {
        "apiVersion": WORKER,
        "kind": "Devices",
        "metadata": {"name": node, "labels": labels},
        "spec": {
            "groups": [
                {
                    "id": "tesla-t4",
                    "manufacturer": "nvidia",
                    "name": "Tesla T4",
                    "memory": 15360,
                    "accelerators": cards,
                }
            ]
        },
    }


def _ledger(node: str, held: tuple[int, ...]) -> Obj:
    rows = [
        {"id": f"{node}-gpu-{i}", "index": i, "mode": 3, "remaining": RESOURCE_MAX_UNITS // 2}
        if i in held
        else {"id": f"{node}-gpu-{i}", "index": i, "mode": 0, "remaining": RESOURCE_MAX_UNITS}
        for i in range(4)
    ]
    return {
        "apiVersion": WORKER,
        "kind": "Devices",
        "metadata": {"name": node},
        "status": {"groups": [{"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": rows}]},
    }


def _check(wl: Obj | None) -> Obj:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == NODE_DEVICES_CHECK:
            return dict(entry)
    return {}


def _holder(kube: Kube) -> str:
    lease = kube.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, LEASE_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _queue_checks(kube: Kube) -> list[str]:
    cq = kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}
    strategy = (cq.get("spec") or {}).get("admissionChecksStrategy") or {}
    return [c["name"] for c in strategy.get("admissionChecks") or []]


@pytest.fixture
def pool(testbed: Testbed, chain: Installed) -> Iterator[list[str]]:
    """Two T4 nodes x 4 cards, the driver's RBAC, two driver replicas; torn down after."""
    kube = testbed.kube
    forget_pool(kube, T4_POOL)
    tag = uuid.uuid4().hex[:5]
    nodes = [f"t4a-{tag}-{i}" for i in range(2)]
    for name in nodes:
        add_t4_node(kube, name, 4)
    try:
        with running_drivers(testbed):
            yield nodes
    finally:
        for name in nodes:
            remove_t4_node(kube, name)


def _write_ledger(kube: Kube, node: str, held: tuple[int, ...]) -> None:
    kube.apply(_ledger(node, held), subresource="status")


def _get(kube: Kube, ns: str, name: str) -> Obj | None:
    return kube.get(KUEUE, "Workload", name, ns)


def _settled(kube: Kube, ns: str, name: str) -> Obj | None:
    """The Workload once admitted or answered Retry; plays the owner after an eviction."""
    wl = _get(kube, ns, name)
    if condition(wl, "Evicted") == "True" and condition(wl, "QuotaReserved") == "True":
        release_quota(kube, ns, name)
    if condition(wl, "Admitted") == "True" or _check(wl).get("state") == "Retry":
        return wl
    if "Previously: Retry" in str(_check(wl).get("message", "")):
        return wl  # Kueue already reset the Retry after evicting
    return None


def _verdict_waits(kube: Kube, ns: str, names: tuple[str, ...]) -> dict[str, float]:
    """Seconds each Workload waited between QuotaReserved and our first entry (measured, not
    asserted: the figure for the report). Polled every 20 ms, so it reads at most that late."""
    reserved: dict[str, float] = {}
    answered: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while len(answered) < len(names) and time.monotonic() < deadline:
        for name in names:
            if name in answered:
                continue
            wl = _get(kube, ns, name)
            seen = time.monotonic()
            if condition(wl, "QuotaReserved") == "True":
                reserved.setdefault(name, seen)
            entry = _check(wl)
            said = entry.get("state") in ("Ready", "Retry")
            # Kueue may reset a Retry to Pending between two polls; its message keeps the trace.
            if (said or "Previously: Retry" in str(entry.get("message"))) and name in reserved:
                answered[name] = seen
        time.sleep(0.02)
    return {name: answered[name] - reserved[name] for name in answered}


def _admitted(kube: Kube, ns: str, name: str) -> bool:
    wl = _get(kube, ns, name)
    if condition(wl, "Evicted") == "True" and condition(wl, "QuotaReserved") == "True":
        release_quota(kube, ns, name)
    return condition(wl, "Admitted") == "True"


def test_driver_judges_card_by_card(testbed: Testbed, pool: list[str]) -> None:
    kube = testbed.kube
    node_a = pool[0]
    flavor = wait_for(
        lambda: next(
            (
                rf
                for rf in kube.list(KUEUE, "ResourceFlavor")
                if rf["spec"].get("nodeLabels", {}).get(f"{T4_KEY}.count") == "4"
            ),
            None,
        ),
        120,
        "the 4-card T4 ResourceFlavor",
    )
    # The verdict finds a flavor's Devices by the flavor's node labels (less the counts), as
    # the node agent labels them.
    labels = {k: v for k, v in flavor["spec"]["nodeLabels"].items() if not k.endswith(".count")}
    for node in pool:
        kube.apply(_devices(node, labels))
        _write_ledger(kube, node, HELD)

    # The driver marks the check Active; the queue hook then names it on the pool's queue.
    wait_for(
        lambda: (
            condition(kube.get(KUEUE, "AdmissionCheck", NODE_DEVICES_CHECK), "Active") == "True"
        ),
        60,
        "the AdmissionCheck Active",
    )
    wait_for(lambda: NODE_DEVICES_CHECK in _queue_checks(kube), 120, "the queue to name the check")
    wait_for(
        lambda: condition(kube.get(KUEUE, "ClusterQueue", T4_POOL), "Active") == "True",
        60,
        "the T4 queue Active",
    )
    leader = wait_for(lambda: _holder(kube), 30, "a lease holder")
    assert leader in ("driver-a", "driver-b")

    with tenant_namespace(kube, T4_POOL) as ns:
        # (a) 3 cards fit the credits (8 cards) but node A has only 2 free whole cards.
        _workload(kube, ns, "three", 3, node_a)
        three = wait_for(lambda: _settled(kube, ns, "three"), 90, "a verdict on 'three'")
        assert condition(three, "Admitted") != "True"
        assert _check(three)["message"] in (
            NODE_RETRY.format(node=node_a, roles=""),
            "Reset to Pending after eviction. Previously: Retry",
        ), _check(three)

        # The Retry is an Event on the Workload, what `kubectl describe workload` shows.
        def retry_event() -> Obj | None:
            return next(
                (
                    e
                    for e in kube.list("events.k8s.io/v1", "Event", ns)
                    if e.get("regarding", {}).get("name") == "three"
                    and e.get("reason") == "NodeDevicesRetry"
                ),
                None,
            )

        event = wait_for(retry_event, 30, "a Retry Event on 'three'")
        assert event["type"] == "Warning" and node_a in event["note"], event
        kube.delete(KUEUE, "Workload", "three", ns)
        wait_for(lambda: _get(kube, ns, "three") is None, 30, "'three' gone")

        # (b) two Workloads of 2 cards on node A's 2 free cards: one Ready, the other held.
        _workload(kube, ns, "first", 2, node_a)
        _workload(kube, ns, "second", 2, node_a)
        waits = _verdict_waits(kube, ns, ("first", "second"))
        print(f"\nQuotaReserved -> verdict: {waits}")
        verdicts = {
            name: wait_for(lambda n=name: _settled(kube, ns, n), 90, f"a verdict on {name!r}")
            for name in ("first", "second")
        }
        admitted = [n for n, wl in verdicts.items() if condition(wl, "Admitted") == "True"]
        assert len(admitted) == 1, {n: _check(w) for n, w in verdicts.items()}
        held = next(n for n in verdicts if n not in admitted)
        message = str(_check(verdicts[held])["message"])
        assert PROMISED in message or "Previously: Retry" in message, message
        time.sleep(3)  # the held one stays held while nothing frees
        assert condition(_get(kube, ns, held), "Admitted") != "True"

        # Leader election: the other replica takes over once the leader is gone; stopped with
        # SIGTERM, the leader handed the Lease over on its way out.
        testbed.stop(f"admission-{leader}")
        assert f"{leader} released the lease" in testbed.log_tail(f"admission-{leader}", 200)
        other = "driver-b" if leader == "driver-a" else "driver-a"
        wait_for(lambda: _holder(kube) == other, 30, f"{other} to take the lease")
        assert (
            "verdict"
            not in testbed.log_tail(f"admission-{other}", 10_000).split("holds the lease")[0]
        )

        # (c) node A's sliced cards free (their Pods ended): the held Workload is admitted once
        # Kueue requeues it (requeueAfterSeconds 30) and the new leader says Ready.
        _write_ledger(kube, node_a, ())
        wait_for(lambda: _admitted(kube, ns, held), 150, f"{held!r} admitted after a card freed")
        assert condition(_get(kube, ns, admitted[0]), "Admitted") == "True"
