"""The driver's caches and indexes: verdicts read no API, judge a burst in O(n), and count a
promised Workload as taken until our Pod cache shows its allocation record."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest
import requests

import chain.holdings as holdings
import chain.verdicts as verdicts
import verdictdriver.driver as driver_module
from chain.devices import Devices
from chain.holdings import Holdings
from chain.labels import KUEUE_PODSET, KUEUE_WORKLOAD
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.manufacturers import default_manufacturers
from chain.units import RESOURCE_MAX_UNITS
from chain.verdicts import NODE_RETRY, PROMISED, Snapshot, Verdict, judge
from chain.workload_state import State, workload_shares
from kubeapi.watch import Cache, Event
from tests.unit.hooks.admission.test_judge import GPU, devices, node, rf, workload
from tests.unit.verdictdriver.test_driver import FakeKube, _driver, _state, _world, pending
from verdictdriver.caches import Indexed, nodes_by_hostname, pods_by_node
from verdictdriver.driver import Driver
from verdictdriver.entries import as_written, verdict_patch
from verdictdriver.health import Heartbeat
from verdictdriver.lease import Elector
from verdictdriver.writes import Writers

Obj = dict[str, Any]
TABLE = default_manufacturers()


def _ready(wl: Obj) -> Obj:
    wl["status"]["admissionChecks"] = [
        {"name": "gpustack-node-devices", "state": "Ready", "message": "", "lastTransitionTime": ""}
    ]
    return wl


def test_indexes_by_hostname_and_by_node() -> None:
    renamed = node("n2")
    renamed["metadata"]["labels"]["kubernetes.io/hostname"] = "host-2"
    bare = {"metadata": {"name": "n3"}}
    assert nodes_by_hostname([node("n1"), renamed, bare]) == {"n1": ["n1"], "host-2": ["n2"]}
    pods = [{"metadata": {"name": p}, "spec": {"nodeName": n}} for p, n in (("a", "n1"), ("b", ""))]
    assert pods_by_node(pods) == {"n1": [pods[0]]}


def test_an_index_is_built_again_only_after_its_cache_changed() -> None:
    cache = Cache()
    cache.replace([node("n1")], "1")
    builds: list[int] = []

    def build(nodes: Any) -> dict[str, list[str]]:
        builds.append(len(nodes))
        return nodes_by_hostname(nodes)

    index = Indexed(cache, build)
    assert index.get() == {"n1": ["n1"]} and index.get() == {"n1": ["n1"]}
    cache.apply(Event("ADDED", node("n2")))
    assert index.get() == {"n1": ["n1"], "n2": ["n2"]}
    assert builds == [1, 2]


def test_holdings_index_node_pinned_shares_of_card_holders() -> None:
    held = Holdings.of(
        [
            _ready(workload(1, "n1", name="ready")),
            workload(2, "n1", name="admitted", admitted=True),
            workload(1, "n1", name="waiting"),  # no Ready yet: holds nothing
            _ready(workload(1, None, name="pool-wide")),  # no node named: charged nowhere yet
        ],
        TABLE,
    )
    assert sorted(held.by_host) == ["n1"]
    assert [k for k, _ in held.on({"n1", "n2"}, ("team-a", "ready"))] == [("team-a", "admitted")]
    finished = workload(2, "n1", name="admitted", admitted=True)
    finished["status"]["conditions"].append({"type": "Finished", "status": "True"})
    held.update(finished, TABLE)
    assert [k for k, _ in held.on({"n1"}, ("", ""))] == [("team-a", "ready")]
    held.forget(("team-a", "ready"))
    assert held.by_host == {} and held.hosts_of == {}


def test_holdings_read_a_holders_shares_again_only_when_its_pod_sets_or_admission_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chain.holdings as holdings_module

    reads: list[str] = []

    def counted(wl: Obj, table: Any) -> Any:
        reads.append(wl["metadata"]["name"])
        return workload_shares(wl, table)

    monkeypatch.setattr(holdings_module, "workload_shares", counted)
    held = Holdings()
    held.update(workload(2, "n1", name="admitted", admitted=True), TABLE)
    again = workload(2, "n1", name="admitted", admitted=True)
    again["status"]["conditions"].append({"type": "PodsReady", "status": "True"})
    held.update(again, TABLE)  # a condition more: the same shares
    assert reads == ["admitted"]
    assert [k for k, _ in held.on({"n1"}, ("", ""))] == [("team-a", "admitted")]
    held.update(workload(2, "n2", name="admitted", admitted=True), TABLE)  # moved: read again
    assert reads == ["admitted", "admitted"]
    assert sorted(held.by_host) == ["n2"]
    finished = workload(2, "n2", name="admitted", admitted=True)
    finished["status"]["conditions"].append({"type": "Finished", "status": "True"})
    held.update(finished, TABLE)
    assert held.by_host == {} and held.read == {}
    held.update(workload(2, "n2", name="admitted", admitted=True), TABLE)
    held.forget(("team-a", "admitted"))
    assert held.by_host == {} and held.read == {}


@pytest.mark.parametrize("asked", [1, 2, 3])
def test_a_verdict_with_holdings_equals_one_that_scans_the_workloads(asked: int) -> None:
    others = [_ready(workload(1, "n1", name="a")), workload(1, "n1", name="b", admitted=True)]
    own = workload(asked, "n1", name="own")
    ledgers = [
        Devices.parse(
            devices(
                "n1",
                [RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS],
            )
        )
    ]
    flavor = rf()
    flavor["spec"]["nodeLabels"]["acceleratable.feature.gpustack.ai/nvidia-t4.count"] = "4"
    flavors = {flavor["metadata"]["name"]: flavor}
    scanned = judge(own, Snapshot(flavors, ledgers, {"n1": "n1"}, others), TABLE)
    indexed = Snapshot(flavors, ledgers, {"n1": "n1"}, holdings=Holdings.of(others, TABLE))
    assert judge(own, indexed, TABLE) == scanned
    assert scanned.state == ("Ready" if asked <= 2 else "Retry")


def test_a_burst_is_judged_in_linear_time_without_reading_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 40
    kube = _world(*(pending(workload(1, "n1", name=f"w{i:02d}")) for i in range(n)))
    calls = [0]

    def counted(wl: Obj, table: Any) -> Any:
        calls[0] += 1
        return workload_shares(wl, table)

    monkeypatch.setattr(verdicts, "workload_shares", counted)
    monkeypatch.setattr(holdings, "workload_shares", counted)
    monkeypatch.setattr("verdictdriver.workloads.workload_shares", counted)
    driver = _driver(kube)
    reads = kube.reads
    driver.step()
    states = [_state(kube, f"w{i:02d}")["state"] for i in range(n)]
    assert states.count("Ready") == 2 and states.count("Retry") == n - 2  # n1 has 2 free cards
    assert kube.reads - reads == 1  # the Lease (renewals are writes); no verdict reads the API
    assert calls[0] <= 4 * n  # rescanning every other Workload per verdict would be ~n^2


def _allocated_pod(workload_name: str, cards: int) -> Obj:
    """w1's Pod on n1, its allocation record naming `cards` whole cards (as the device plugin
    writes it once granted)."""
    rows = [
        {"id": f"n1-{i}", "index": i, "mode": 1, "allocated": RESOURCE_MAX_UNITS}
        for i in range(cards)
    ]
    group = {"id": "t4", "manufacturer": "nvidia", "accelerators": rows}
    record = {"main": {"devices": {"groups": [group]}, "deviceIDs": []}}
    gpus = {GPU: str(cards)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload_name}-pod",
            "namespace": "team-a",
            "uid": f"uid-{workload_name}-pod",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {
                KUEUE_WORKLOAD: workload_name,
                ALLOCATED_ANNOTATION: json.dumps(record),
            },
            "labels": {KUEUE_PODSET: "main"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "main", "resources": {"requests": gpus, "limits": gpus}}],
        },
        "status": {"phase": "Running"},
    }


def test_a_promise_counts_until_our_pod_cache_shows_its_allocation() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")))
    driver = _driver(kube)
    driver.step()
    assert _state(kube, "w1")["state"] == "Ready"  # both free cards of n1 promised to w1
    # w1's Pod got its cards: the record is in the API, our Pod cache has not seen it yet, and
    # the node agent has not published the ledger either.
    kube.lagging = {"Pod"}
    kube.put(_allocated_pod("w1", 2))
    assert kube.caches.pods.items() == []
    kube.put(pending(workload(2, "n1", name="w2")))
    driver.step(tick=False)
    retry = _state(kube, "w2")
    assert retry["state"] == "Retry" and retry["message"].endswith(PROMISED)
    # Our cache catches up: the cards are now charged by the Pod's record, w1 no longer as a
    # promise; still taken, counted once.
    kube.flush("Pod")
    driver.step()
    retry = _state(kube, "w2")
    assert retry["message"] == NODE_RETRY.format(node="n1", roles="")


def test_a_ledger_is_judged_again_once_the_devices_change() -> None:
    kube = _world(pending(workload(1, "n1", name="w1")))
    dev = copy.deepcopy(kube.objects[("Devices", "", "n1")])
    for row in dev["status"]["groups"][0]["accelerators"]:
        row.update({"mode": 3, "remaining": RESOURCE_MAX_UNITS // 2})  # both cards half sliced
    kube.put(dev)
    driver = _driver(kube)
    driver.step()
    assert _state(kube, "w1")["state"] == "Retry"
    for row in dev["status"]["groups"][0]["accelerators"]:
        row.update({"mode": 0, "remaining": RESOURCE_MAX_UNITS})  # their Pods ended
    kube.put(dev)
    driver.step()
    assert _state(kube, "w1")["state"] == "Ready"


class Deferred(Executor):
    """Holds each submitted write until the test lets them all run."""

    def __init__(self) -> None:
        self.calls: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        reply: Future[Any] = Future()
        self.calls.append((reply, fn, args))
        return reply

    def run_all(self) -> None:
        for reply, fn, args in self.calls:
            try:
                reply.set_result(fn(*args))
            except Exception as err:  # handed to the driver, as a thread pool would
                reply.set_exception(err)
        self.calls.clear()


def _writing(kube: FakeKube) -> tuple[Driver, Deferred]:
    deferred = Deferred()
    driver = _driver(kube)
    driver.writers = Writers(lambda: kube, deferred)  # type: ignore[arg-type, return-value]
    return driver, deferred


def test_a_verdict_on_its_way_is_promised_at_once() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")), pending(workload(2, "n1", name="w2")))
    driver, writes = _writing(kube)
    driver.step()
    assert len(writes.calls) == 2  # both decided without waiting for a reply
    assert [_state(kube, n)["state"] for n in ("w1", "w2")] == ["Pending", "Pending"]
    driver.step()
    assert len(writes.calls) == 2  # nothing judged again while its verdict is on its way
    writes.run_all()
    driver.step()
    assert not driver.inflight
    assert [_state(kube, n)["state"] for n in ("w1", "w2")] == ["Ready", "Retry"]
    assert _state(kube, "w2")["message"].endswith(PROMISED)


@pytest.mark.parametrize("failure", ["conflict", "connection"])
def test_a_failed_write_takes_its_promise_back(failure: str) -> None:
    kube = _world(pending(workload(2, "n1", name="w1")))
    driver, writes = _writing(kube)
    driver.step()
    assert ("team-a", "w1") in driver.promises.written
    if failure == "conflict":
        moved = kube.objects[("Workload", "team-a", "w1")]
        moved["metadata"]["labels"] = {"touched": "yes"}
        kube.put(moved)  # the write was judged against the older version: 409
    else:
        apply = kube.apply

        def broken(*args: Any, **kwargs: Any) -> Obj:
            kube.apply = apply  # type: ignore[method-assign]
            raise requests.ConnectionError("reset by peer")

        kube.apply = broken  # type: ignore[method-assign]
    writes.run_all()
    driver.settle()
    assert not driver.promises.written and not driver.inflight
    driver.step(tick=False)  # judged again from the cache
    assert len(writes.calls) == 1 and _state(kube, "w1")["state"] == "Pending"
    writes.run_all()
    driver.step(tick=False)
    assert _state(kube, "w1")["state"] == "Ready"
    assert not driver.inflight


def test_as_written_replaces_only_our_entries() -> None:
    wl = pending(workload(1, "n1"), "gpustack-node-devices", "other")
    body = verdict_patch(wl, ["gpustack-node-devices"], Verdict(State.READY, "ok"), "t1")
    assert body is not None
    written = as_written(wl, body)
    entries = {e["name"]: e["state"] for e in written["status"]["admissionChecks"]}
    assert entries == {"gpustack-node-devices": "Ready", "other": "Pending"}
    assert wl["status"]["admissionChecks"][0]["state"] == "Pending"  # the cached copy untouched


def test_the_lease_is_renewed_only_once_a_quarter_of_it_passed() -> None:
    kube = _world()
    clock = [0.0]
    elector = Elector(kube, "a", 8, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert elector.renewal_due()  # not leading yet
    assert elector.lead() and not elector.renewal_due()
    clock[0] = 1.9
    assert not elector.renewal_due() and elector.still_leading()
    clock[0] = 2.0
    assert elector.renewal_due() and elector.still_leading()


def test_health_waits_for_the_first_pass_when_asked() -> None:
    clock = [0.0]
    heartbeat = Heartbeat(30, clock=lambda: clock[0], started=False)
    assert not heartbeat.healthy()
    heartbeat.beat()
    assert heartbeat.healthy()


def test_a_pass_counts_only_once_every_cache_is_listed() -> None:
    kube = _world(pending(workload(1, "n1", name="w1")))
    kube.caches = dataclasses.replace(kube.caches, pods=Cache())  # the Pod watch has not listed
    driver = _driver(kube)
    assert driver.step() is False
    assert _state(kube, "w1")["state"] == "Pending"
    kube.caches.pods.replace([], "1")
    assert driver.step() is True
    assert _state(kube, "w1")["state"] == "Ready"


def test_an_event_pass_reads_only_the_workloads_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 40
    kube = _world(*(pending(workload(1, "n1", name=f"w{i:02d}")) for i in range(n)))
    driver = _driver(kube)
    driver.step()  # the first pass reads everything
    read: list[str] = []
    real = driver_module.to_judge

    def counted(workloads: Any, checks: Any) -> Any:
        workloads = list(workloads)
        read.extend(w["metadata"]["name"] for w in workloads)
        return real(workloads, checks)

    monkeypatch.setattr(driver_module, "to_judge", counted)
    touched = kube.objects[("Workload", "team-a", "w07")]
    touched["metadata"]["labels"] = {"touched": "yes"}
    kube.put(touched)
    driver.step(tick=False)
    assert read == ["w07"]
    read.clear()
    driver.step(tick=True)  # a tick reads everything again (nothing moved: nothing parsed)
    assert read == []


def test_an_event_pass_frees_the_cards_of_a_workload_that_went() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")))
    driver = _driver(kube)
    driver.step()
    assert _state(kube, "w1")["state"] == "Ready"
    second = pending(workload(2, "n1", name="w2"))
    kube.put(second)
    driver.step(tick=False)
    assert _state(kube, "w2")["state"] == "Retry"  # n1's two cards are promised to w1
    gone = kube.objects.pop(("Workload", "team-a", "w1"))
    kube.caches.workloads.apply(Event("DELETED", gone))
    third = pending(workload(2, "n1", name="w3"))
    kube.put(third)
    driver.step(tick=False)
    assert _state(kube, "w3")["state"] == "Ready"
