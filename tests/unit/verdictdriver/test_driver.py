"""The verdict driver: its pure decisions, the Lease, and passes against an in-memory API whose
Workload events feed a real watch cache."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.queues import NODE_DEVICES_CHECK, NODE_DEVICES_CONTROLLER
from chain.units import RESOURCE_MAX_UNITS
from chain.verdicts import POOL_READY, POOL_RETRY, PROMISED, Verdict
from chain.workload_state import State
from kubeapi import KubeError
from kubeapi.watch import Cache, Event
from tests.unit.hooks.admission.test_judge import devices, node, rf, workload
from verdictdriver import metrics
from verdictdriver.caches import Caches
from verdictdriver.driver import FIELD_MANAGER, Driver, run
from verdictdriver.entries import RETRY_AFTER_SECONDS, active_patch, check_entry, verdict_patch
from verdictdriver.health import Heartbeat, serve_health
from verdictdriver.lease import LEASE_API, Elector, next_lease, released_lease
from verdictdriver.promises import Promises
from verdictdriver.workloads import owned_checks, to_judge

CHECKS = {NODE_DEVICES_CHECK: NODE_DEVICES_CONTROLLER, "other": "example.com/other"}
Obj = dict[str, Any]


def pending(wl: Obj, *names: str) -> Obj:
    wl["status"]["admissionChecks"] = [
        {"name": n, "state": "Pending", "message": "", "lastTransitionTime": "t0"}
        for n in names or (NODE_DEVICES_CHECK,)
    ]
    wl["metadata"].update({"uid": f"uid-{wl['metadata']['name']}", "resourceVersion": "1"})
    return wl


def test_owned_checks_and_what_to_judge() -> None:
    wl = pending(workload(1, "n1"), NODE_DEVICES_CHECK, "other")
    assert owned_checks(wl, CHECKS) == [NODE_DEVICES_CHECK]
    assert to_judge([wl], CHECKS) == [wl]
    evicted = copy.deepcopy(wl)
    evicted["status"]["conditions"].append({"type": "Evicted", "status": "True"})
    admitted = pending(workload(1, "n1", name="b", admitted=True))
    ready = copy.deepcopy(wl)
    ready["status"]["admissionChecks"][0]["state"] = "Ready"
    foreign = pending(workload(1, "n1", name="c"), "other")
    assert to_judge([evicted, admitted, ready, foreign], CHECKS) == []


def test_entry_keeps_transition_time_and_sets_requeue_on_retry() -> None:
    previous = {"name": "x", "state": "Retry", "message": "old", "lastTransitionTime": "t0"}
    retry = check_entry(previous, "x", Verdict(State.RETRY, "new"), "t1")
    assert retry == {
        "name": "x",
        "state": "Retry",
        "message": "new",
        "lastTransitionTime": "t0",
        "requeueAfterSeconds": RETRY_AFTER_SECONDS,
    }
    ready = check_entry(previous, "x", Verdict(State.READY, "ok"), "t1")
    assert ready["lastTransitionTime"] == "t1" and "requeueAfterSeconds" not in ready


def test_patch_names_only_our_entry_with_resource_version_and_skips_unchanged() -> None:
    wl = pending(workload(1, "n1"), NODE_DEVICES_CHECK, "other")
    body = verdict_patch(wl, [NODE_DEVICES_CHECK], Verdict(State.READY, "ok"), "t1")
    assert body is not None
    assert body["metadata"]["resourceVersion"] == "1"
    assert [e["name"] for e in body["status"]["admissionChecks"]] == [NODE_DEVICES_CHECK]
    wl["status"]["admissionChecks"][0] = body["status"]["admissionChecks"][0]
    assert verdict_patch(wl, [NODE_DEVICES_CHECK], Verdict(State.READY, "ok"), "t2") is None


def test_active_patch() -> None:
    ac = {"metadata": {"name": NODE_DEVICES_CHECK, "generation": 2}, "spec": {}}
    body = active_patch(ac, "t")
    assert body is not None
    cond = body["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        "Active",
        "True",
        "Active",
        2,
    )
    ac["status"] = body["status"]
    assert active_patch(ac, "t") is None


def test_lease_semantics() -> None:
    created = next_lease(None, "a", False, 15, "t0")
    assert created is not None and created["spec"]["holderIdentity"] == "a"
    assert next_lease(created, "b", False, 15, "t1") is None
    renewed = next_lease(created, "a", False, 15, "t1")
    assert renewed is not None and renewed["spec"]["acquireTime"] == "t0"
    taken = next_lease(created, "b", True, 15, "t2")
    assert taken is not None
    assert taken["spec"]["holderIdentity"] == "b" and taken["spec"]["leaseTransitions"] == 1


def test_promises_last_until_the_listing_shows_the_write() -> None:
    before = pending(workload(1, "n1"))
    after = copy.deepcopy(before)
    after["metadata"]["resourceVersion"] = "2"
    promises = Promises()
    promises.remember(before, after)
    assert promises.merged([before]) == [after]  # the listing lags the write
    assert promises.merged([after]) == [after] and not promises.written


class FakeKube:
    """Just enough of the API server: objects by (kind, namespace, name), SSA of our entry, and
    the driver's caches fed with each write's event (held back for the kinds `lagging`)."""

    def __init__(self, *objects: Obj) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.version = 1
        self.caches = Caches()
        self.lagging: set[str] = set()
        self.held: list[tuple[Cache, Event]] = []
        self.reads = 0
        for obj in objects:
            self.put(copy.deepcopy(obj))
        for kind, cache in self.caches.all().items():
            listed = [o for (k, _, _), o in self.objects.items() if k == kind and _cached(o)]
            cache.replace([copy.deepcopy(o) for o in listed], str(self.version))

    @property
    def cache(self) -> Cache:
        return self.caches.workloads

    def put(self, obj: Obj) -> Obj:
        self.version += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.version)
        self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])] = obj
        cache = self.caches.all().get(obj["kind"])
        if cache is not None and _cached(obj):
            self.held.append((cache, Event("MODIFIED", copy.deepcopy(obj))))
            self.flush()
        return copy.deepcopy(obj)

    def flush(self, *kinds: str) -> None:
        """The watches catch up, but those of the kinds still `lagging` (unless named)."""
        kept = []
        for cache, event in self.held:
            if event.object["kind"] in self.lagging and event.object["kind"] not in kinds:
                kept.append((cache, event))
            else:
                cache.apply(event)
        self.held = kept

    def get(self, api: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        self.reads += 1
        found = self.objects.get((kind, namespace or "", name))
        return copy.deepcopy(found) if found else None

    def list(
        self,
        api: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        self.reads += 1
        out = [copy.deepcopy(o) for (k, _, _), o in sorted(self.objects.items()) if k == kind]
        if field_selector and kind == "Pod":
            node_name = field_selector.removeprefix("spec.nodeName=")
            out = [o for o in out if o["spec"]["nodeName"] == node_name]
        if label_selector and kind == "Node":
            hosts = label_selector.split("(")[1].rstrip(")").split(",")
            out = [o for o in out if o["metadata"]["labels"]["kubernetes.io/hostname"] in hosts]
        return out

    def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if (obj["kind"], meta.get("namespace", ""), meta["name"]) in self.objects:
            raise KubeError(409, "exists")
        return self.put(copy.deepcopy(obj))

    def replace(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        stored = self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])]
        if stored["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise KubeError(409, "conflict")
        return self.put(copy.deepcopy(obj))

    def apply(self, obj: Obj, manager: str = "", subresource: str | None = None) -> Obj:
        assert manager == FIELD_MANAGER and subresource == "status"
        meta = obj["metadata"]
        stored = self.objects[(obj["kind"], meta.get("namespace", ""), meta["name"])]
        if meta.get("resourceVersion") not in (None, stored["metadata"]["resourceVersion"]):
            raise KubeError(409, "conflict")
        status = stored.setdefault("status", {})
        if obj["kind"] == "AdmissionCheck":
            status["conditions"] = obj["status"]["conditions"]
        else:
            entries = {e["name"]: e for e in status["admissionChecks"]}
            entries.update({e["name"]: e for e in obj["status"]["admissionChecks"]})
            status["admissionChecks"] = list(entries.values())
        return self.put(stored)


def _cached(obj: Obj) -> bool:
    """What the driver's watches see: everything but unbound Pods."""
    return obj["kind"] != "Pod" or bool(obj["spec"].get("nodeName"))


def _world(*workloads: Obj) -> FakeKube:
    flavor = rf()
    dev = devices("n1", [1_600_000, 1_600_000, 800_000, 800_000])
    dev["metadata"]["labels"] = flavor["spec"]["nodeLabels"] | {}
    dev["metadata"]["labels"].pop("acceleratable.feature.gpustack.ai/nvidia-t4.count")
    dev["kind"] = "Devices"
    dev["spec"]["groups"][0]["accelerators"] = dev["spec"]["groups"][0]["accelerators"][:2]
    dev["status"]["groups"][0]["accelerators"] = dev["status"]["groups"][0]["accelerators"][:2]
    ac = {
        "kind": "AdmissionCheck",
        "metadata": {"name": NODE_DEVICES_CHECK, "generation": 1},
        "spec": {"controllerName": NODE_DEVICES_CONTROLLER},
    }
    return FakeKube(flavor, dev, node("n1"), ac, *workloads)


def _driver(kube: FakeKube, identity: str = "a") -> Driver:
    return Driver(kube, Elector(kube, identity), kube.caches)  # type: ignore[arg-type]


def _state(kube: FakeKube, name: str) -> Obj:
    entry: Obj = kube.objects[("Workload", "team-a", name)]["status"]["admissionChecks"][0]
    return entry


def test_two_workloads_never_share_a_card() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")), pending(workload(2, "n1", name="w2")))
    _driver(kube).step()
    states = {
        name: kube.objects[("Workload", "team-a", name)]["status"]["admissionChecks"][0]
        for name in ("w1", "w2")
    }
    assert sorted(s["state"] for s in states.values()) == ["Ready", "Retry"]
    retry = next(s for s in states.values() if s["state"] == "Retry")
    assert retry["message"].endswith(PROMISED) and retry["requeueAfterSeconds"] == 30
    ac = kube.objects[("AdmissionCheck", "", NODE_DEVICES_CHECK)]
    assert ac["status"]["conditions"][0]["status"] == "True"


def test_only_the_lease_holder_judges() -> None:
    kube = _world(pending(workload(1, "n1", name="w1")))
    follower = _driver(kube, "b")
    leader = _driver(kube, "a")
    leader.step()
    kube.objects[("Workload", "team-a", "w1")]["status"]["admissionChecks"][0]["state"] = "Pending"
    before = copy.deepcopy(kube.objects[("Workload", "team-a", "w1")])
    follower.step()
    assert kube.objects[("Workload", "team-a", "w1")] == before
    lease = kube.get(LEASE_API, "Lease", "gpustack-admission-driver", "gpustack-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"


def test_a_held_lease_is_renewed_off_the_loop_and_taken_on_it() -> None:
    kube = _world()
    clock = [0.0]
    elector = Elector(kube, "a", 4, clock=lambda: clock[0])  # type: ignore[arg-type]
    driver = Driver(kube, elector, kube.caches, renew_aside=True)  # type: ignore[arg-type]
    threads: list[str] = []
    lead = elector.lead

    def watched_lead() -> bool:
        threads.append(threading.current_thread().name)
        return lead()

    elector.lead = watched_lead  # type: ignore[method-assign]
    driver.step()  # taking the Lease: on the loop
    clock[0] = 1.5  # a quarter of the Lease has passed, half has not: renewal due, still leading
    driver.step()
    assert driver._renewal is not None
    driver._renewal.join(5)
    clock[0] = 2.4  # the renewal counted from 1.5: none due yet, still leading
    driver.step()
    assert threads == ["MainThread", "lease-renewal"]
    assert elector.still_leading()


def _two_replicas(kube: Any, clock: list[float]) -> tuple[Elector, Elector]:
    """Replicas a and b on one hand-moved clock; a leads."""
    a = Elector(kube, "a", 4, clock=lambda: clock[0])
    b = Elector(kube, "b", 4, clock=lambda: clock[0])
    assert a.lead() and not b.lead()
    return a, b


def test_follower_takes_over_an_expired_lease() -> None:
    clock = [0.0]
    a, b = _two_replicas(_world(), clock)
    clock[0] = 3.0
    assert not b.lead()
    clock[0] = 8.0  # a stopped renewing 8 s ago (b saw the record unchanged since t=0)
    assert b.lead() and not a.lead()


def test_a_released_lease_is_taken_at_the_next_pass_not_a_duration_later() -> None:
    kube = _world()
    clock = [0.0]
    a, b = _two_replicas(kube, clock)
    clock[0] = 0.5
    assert a.release() and not a.leading
    lease = kube.get(LEASE_API, "Lease", "gpustack-admission-driver", "gpustack-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""
    assert b.lead()  # vacant: no need to wait for it to lapse
    assert not a.release()  # b holds it now: a leaves it alone
    assert released_lease(None, "a", "t") is None


def test_pool_wide_assignment_reads_the_flavor_pool() -> None:
    # Without a node assignment only the flavor's pool is read (2 whole cards free on n1).
    kube = _world(pending(workload(2, name="w1")), pending(workload(3, name="w2")))
    _driver(kube).step()
    states = [
        kube.objects[("Workload", "team-a", n)]["status"]["admissionChecks"][0]
        for n in ("w1", "w2")
    ]
    assert [s["state"] for s in states] == ["Ready", "Retry"]
    assert states[0]["message"] == POOL_READY
    assert states[1]["message"] == POOL_RETRY.format(roles="")


def test_a_ready_stays_promised_until_the_cache_shows_it() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")))
    driver = _driver(kube)
    kube.lagging = {"Workload"}  # the watch has not delivered our Ready yet
    driver.step()
    assert _state(kube, "w1")["state"] == "Ready"
    assert kube.cache.get(("team-a", "w1"))["status"]["admissionChecks"][0]["state"] == "Pending"
    w2 = kube.put(pending(workload(2, "n1", name="w2")))
    kube.cache.apply(Event("ADDED", w2))  # w2 arrives, w1's write is still in flight
    driver.step(tick=False)
    retry = _state(kube, "w2")
    assert retry["state"] == "Retry" and retry["message"].endswith(PROMISED)
    kube.flush("Workload")
    driver.step(tick=False)
    assert not driver.promises.written  # the cache shows the write: nothing left to remember


def test_an_event_pass_judges_what_moved_and_a_tick_judges_again() -> None:
    kube = _world(pending(workload(2, "n1", name="w1")), pending(workload(1, "n1", name="w2")))
    driver = _driver(kube)
    driver.step()
    assert [_state(kube, n)["state"] for n in ("w1", "w2")] == ["Ready", "Retry"]
    # w1 finishes; the freed cards are not watched, so an event pass leaves w2 alone ...
    finished = kube.objects[("Workload", "team-a", "w1")]
    finished["status"]["conditions"].append({"type": "Finished", "status": "True"})
    kube.put(finished)
    reads = kube.reads
    driver.step(tick=False)
    assert _state(kube, "w2")["state"] == "Retry" and kube.reads == reads
    # ... and the next tick judges it again.
    driver.step(tick=True)
    assert _state(kube, "w2")["state"] == "Ready"


def _pod(name: str, claims: dict[int, int] | None) -> Obj:
    annotations = {}
    if claims is not None:
        rows = [{"id": f"n1-{i}", "index": i, "mode": 1, "allocated": u} for i, u in claims.items()]
        group = {"id": "t4", "manufacturer": "nvidia", "accelerators": rows}
        record = {"c": {"devices": {"groups": [group]}, "deviceIDs": []}}
        annotations[ALLOCATED_ANNOTATION] = json.dumps(record)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-b",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations,
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("claims", "state"),
    [
        (
            {0: RESOURCE_MAX_UNITS},
            "Retry",
        ),  # granted by the device plugin, not in the published ledger yet
        (None, "Ready"),  # no device plugin on the node: the published ledger stands
    ],
)
def test_the_verdict_counts_cards_granted_in_pod_annotations(
    claims: dict[int, int] | None, state: str
) -> None:
    kube = _world(pending(workload(2, "n1", name="w1")))
    kube.put(_pod("p", claims))
    _driver(kube).step()
    assert _state(kube, "w1")["state"] == state


def test_run_judges_a_new_workload_without_waiting_for_the_tick() -> None:
    kube = _world()
    driver = _driver(kube)
    stopping = threading.Event()
    loop = threading.Thread(target=run, args=(driver, 60.0), kwargs={"stop": stopping.is_set})
    loop.start()
    try:
        time.sleep(0.2)  # the first tick has passed; the next is a minute away
        began = time.monotonic()
        kube.put(pending(workload(1, "n1", name="w1")))
        while _state_or_none(kube, "w1") != "Ready":
            assert time.monotonic() - began < 5, "no pass on the cache change"
            time.sleep(0.01)
    finally:
        stopping.set()
        kube.put(pending(workload(1, "n1", name="wake")))  # wake the loop to see the stop
        loop.join(5)
    assert not loop.is_alive()


def _state_or_none(kube: FakeKube, name: str) -> str | None:
    found = kube.objects.get(("Workload", "team-a", name))
    return None if found is None else str(found["status"]["admissionChecks"][0]["state"])


def test_a_malformed_workload_is_skipped() -> None:
    bad = pending(workload(1, "n1", name="bad"))
    bad["status"]["conditions"] = "not a list"
    good = pending(workload(1, "n1", name="good"))
    assert to_judge([bad, good], CHECKS) == [good]


def test_healthz_follows_the_heartbeat() -> None:
    clock = [0.0]
    heartbeat = Heartbeat(30, clock=lambda: clock[0])
    server = serve_health(heartbeat, 0, "127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.status == 200
        clock[0] = 31.0
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5)
        assert err.value.code == 503
        heartbeat.beat()
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.status == 200
    finally:
        server.shutdown()
        server.server_close()


def test_verdicts_promises_and_the_lease_are_measured() -> None:
    def sample(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    ready, retry = (sample("gpustack_verdicts_total", state=s) for s in ("Ready", "Retry"))
    waited = sample("gpustack_verdict_seconds_count", state="Ready")
    writes = sample("gpustack_verdict_write_seconds_count")
    first, second = pending(workload(2, "n1", name="w1")), pending(workload(2, "n1", name="w2"))
    for wl in (first, second):  # reserved a minute ago, as Kueue stamps it
        wl["status"]["conditions"] = [
            {
                "type": "QuotaReserved",
                "status": "True",
                "lastTransitionTime": "2026-12-02T06:00:00Z",
            }
        ]
    kube = _world(first, second)
    driver = _driver(kube)
    metrics.watch(lambda: len(driver.promises.written), lambda: driver.elector.leading)
    driver.step()
    assert sample("gpustack_verdicts_total", state="Ready") == ready + 1
    assert sample("gpustack_verdicts_total", state="Retry") == retry + 1
    assert sample("gpustack_verdict_seconds_count", state="Ready") == waited + 1
    assert sample("gpustack_verdict_write_seconds_count") == writes + 2  # each write timed
    assert sample("gpustack_promises") == 1  # the Ready, until the cache shows it
    assert sample("gpustack_lease_leading") == 1
    server = serve_health(Heartbeat(30), 0, "127.0.0.1", metrics=metrics.exposition)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert 'gpustack_verdicts_total{state="Ready"}' in reply.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def test_time_since_quota_reservation() -> None:
    now = datetime(2026, 12, 2, 6, 0, 10, tzinfo=UTC)
    assert metrics.since("2026-12-02T06:00:00Z", now) == 10.0
    assert metrics.since("", now) is None
    assert metrics.since("yesterday", now) is None
