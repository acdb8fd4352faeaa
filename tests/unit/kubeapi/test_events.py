"""The Event recorder: one Event per repeated occurrence within the series window, a spam
filter per object, and never an exception out to the caller."""

from __future__ import annotations

from typing import Any

import pytest

from kubeapi import KubeError
from kubeapi.events import BURST, REFILL_S, SERIES_WINDOW_S, WARNING, EventRecorder

Obj = dict[str, Any]
WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "job-a", "namespace": "team-a", "uid": "uid-a"},
}


class FakeKube:
    def __init__(self, fail: bool = False) -> None:
        self.created: list[Obj] = []
        self.patched: list[tuple[str, Obj, str | None]] = []
        self.fail = fail

    def create(self, obj: Obj) -> Obj:
        if self.fail:
            raise KubeError(403, "events is forbidden")
        self.created.append(obj)
        return obj

    def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Obj, namespace: str | None = None
    ) -> Obj:
        self.patched.append((name, patch, namespace))
        return {}


def _recorder(kube: FakeKube, clock: list[float]) -> EventRecorder:
    return EventRecorder(kube, "gpustack.ai/test", "replica-1", clock=lambda: clock[0])  # type: ignore[arg-type]


def test_an_event_names_its_object_and_a_repeat_counts_on_it() -> None:
    kube, clock = FakeKube(), [0.0]
    recorder = _recorder(kube, clock)
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "no card free on node-a")
    assert recorder.drain(5)
    [event] = kube.created
    assert event["metadata"]["namespace"] == "team-a"
    assert event["regarding"] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "name": "job-a",
        "uid": "uid-a",
        "namespace": "team-a",
    }
    assert (event["type"], event["reason"], event["note"]) == (
        WARNING,
        "NodeDevicesRetry",
        "no card free on node-a",
    )
    assert event["reportingController"] == "gpustack.ai/test"
    clock[0] = 10.0
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "no card free on node-a")
    assert recorder.drain(5)
    [(name, patch, namespace)] = kube.patched
    assert (name, namespace) == (event["metadata"]["name"], "team-a")
    assert patch["series"]["count"] == 2
    clock[0] = 10.0 + SERIES_WINDOW_S
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "no card free on node-a")
    assert recorder.drain(5)
    assert len(kube.created) == 2  # past the window: a new Event


def test_the_spam_filter_lets_a_burst_through_then_one_per_refill() -> None:
    kube, clock = FakeKube(), [0.0]
    recorder = _recorder(kube, clock)
    for n in range(BURST + 5):
        recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", f"message {n}")
    assert recorder.drain(5)
    assert len(kube.created) == BURST
    clock[0] = REFILL_S
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "later")
    assert recorder.drain(5)
    assert len(kube.created) == BURST + 1


def test_a_failed_write_is_dropped_and_the_recorder_goes_on() -> None:
    kube, clock = FakeKube(fail=True), [0.0]
    recorder = _recorder(kube, clock)
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "x")
    assert recorder.drain(5)
    kube.fail = False
    recorder.event(WORKLOAD, WARNING, "NodeDevicesRetry", "y")
    assert recorder.drain(5)
    assert [e["note"] for e in kube.created] == ["y"]


def test_full_spam_filter_buckets_are_forgotten_so_the_map_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kubeapi.events as events

    monkeypatch.setattr(events, "BUCKETS_KEPT", 3)
    kube, clock = FakeKube(), [0.0]
    recorder = _recorder(kube, clock)
    for n in range(5):
        recorder.event(
            {**WORKLOAD, "metadata": {"name": f"w{n}", "uid": f"u{n}"}}, WARNING, "R", "x"
        )
    assert recorder.drain(5)
    clock[0] = REFILL_S  # every bucket has refilled
    recorder.event({**WORKLOAD, "metadata": {"name": "w9", "uid": "u9"}}, WARNING, "R", "x")
    assert recorder.drain(5)
    assert set(recorder._buckets) == {"u9"}
