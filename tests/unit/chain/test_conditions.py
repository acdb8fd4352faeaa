"""The shared condition list: transition times kept while a status stays, the generation
recorded, the shape of `metav1.Condition`; and the reasons of the Instance's and the
InstanceType's conditions."""

from __future__ import annotations

from typing import Any

from chain.conditions import MESSAGE_LIMIT, Condition, find, generation_of, merge
from chain.pool_conditions import PoolState, pool_conditions
from chain.times import micro_timestamp, timestamp
from chain.views import AcceleratorViews, View
from hooks.instance.conditions import instance_conditions
from nodeagent.devices_conditions import devices_conditions

THEN = "2026-11-30T10:00:00Z"
NOW = "2026-12-03T08:00:00Z"


def _held(type_: str, status: str, since: str = THEN) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "observedGeneration": 1,
        "lastTransitionTime": since,
        "reason": "Before",
        "message": "before",
    }


def test_a_condition_that_keeps_its_status_keeps_its_time_and_one_that_flips_takes_now() -> None:
    held = [_held("Ready", "False"), _held("Admitted", "True")]
    wanted = [
        Condition.of("Admitted", True, "Admitted", "in"),
        Condition.of("Ready", True, "Running", "up"),
    ]
    merged = merge(held, wanted, 4, NOW)
    assert merged == [
        {
            "type": "Admitted",
            "status": "True",
            "observedGeneration": 4,
            "lastTransitionTime": THEN,
            "reason": "Admitted",
            "message": "in",
        },
        {
            "type": "Ready",
            "status": "True",
            "observedGeneration": 4,
            "lastTransitionTime": NOW,
            "reason": "Running",
            "message": "up",
        },
    ]


def test_a_new_reason_alone_is_no_transition() -> None:
    merged = merge([_held("Ready", "False")], [Condition.of("Ready", False, "Other", "x")], 2, NOW)
    assert merged[0]["lastTransitionTime"] == THEN
    assert merged[0]["reason"] == "Other"


def test_a_settled_list_is_written_back_unchanged() -> None:
    """What makes a hook's answer converge: the list it wrote, fed back, comes out the same."""
    wanted = [Condition.of("Ready", False, "NoCapacity", "none")]
    first = merge(None, wanted, 3, NOW)
    assert merge(first, wanted, 3, "2027-01-01T00:00:00Z") == first


def test_unreadable_held_entries_are_replaced_and_others_dropped() -> None:
    held: list[Any] = ["junk", {"status": "True"}, _held("Ready", "True"), _held("Gone", "True")]
    merged = merge(held, [Condition.of("Ready", True, "Up", "")], 1, NOW)
    assert [(c["type"], c["lastTransitionTime"]) for c in merged] == [("Ready", THEN)]
    assert (
        merge("not a list", [Condition.of("Ready", True, "Up", "")], 1, NOW)[0][
            "lastTransitionTime"
        ]
        == NOW
    )


def test_a_long_message_is_cut_to_what_the_crd_takes() -> None:
    merged = merge(None, [Condition.of("Ready", False, "Why", "x" * (MESSAGE_LIMIT + 5))], 1, NOW)
    assert len(merged[0]["message"]) == MESSAGE_LIMIT


def test_generation_timestamp_and_find() -> None:
    assert generation_of({"metadata": {"generation": 7}}) == 7
    assert generation_of({"metadata": {}}) == 0
    assert generation_of({"metadata": {"generation": True}}) == 0
    assert timestamp(0) == "1970-01-01T00:00:00Z"
    assert find([_held("Ready", "True")], "Ready") == _held("Ready", "True")
    assert find(None, "Ready") is None


# --- the Instance ---------------------------------------------------------------------------


def _pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "lab"}, "spec": {}, "status": status}


def _gated() -> dict[str, Any]:
    pod = _pod(phase="Pending")
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return pod


def _pool(*conditions: tuple[str, str, str, str]) -> dict[str, Any]:
    held = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    return {"status": {"conditions": held}}


def _reasons(conditions: tuple[Condition, ...]) -> list[tuple[str, str, str]]:
    return [(c.type, c.status, c.reason) for c in conditions]


def test_an_instance_held_back_before_its_pod_says_why_on_every_condition() -> None:
    for why, reason in (
        ({"problem": "cards of a CPU pool"}, "Unservable"),
        ({"stopped": "stopped (spec.stop)"}, "Stopped"),
        ({"deleting": True}, "Deleting"),
        ({}, "PodPending"),
    ):
        found = instance_conditions(None, None, **why)
        assert {(c.status, c.reason) for c in found} == {("False", reason)}, why
        assert [c.type for c in found] == ["Admitted", "Scheduled", "Ready"]


def test_a_gated_pod_reads_its_pools_word() -> None:
    inactive = _pool(("Active", "False", "Stopped", "held"))
    empty = _pool(("Active", "True", "QueueActive", ""), ("Ready", "False", "NoCapacity", "0"))
    full = _pool(("Active", "True", "QueueActive", ""), ("Available", "False", "Full", "all"))
    for pool, reason in (
        (inactive, "PoolInactive"),
        (empty, "NoCapacity"),
        (full, "WaitingForQuota"),
        (None, "WaitingForAdmission"),
    ):
        admitted, scheduled, ready = instance_conditions(_gated(), pool)
        assert (admitted.status, admitted.reason) == ("False", reason)
        assert scheduled.reason == ready.reason == reason
    admitted, _, _ = instance_conditions(_gated(), full)
    assert admitted.message.endswith(": all")
    admitted, _, _ = instance_conditions(_gated(), None)
    assert admitted.message.endswith("for Kueue to admit it (quota, admission checks)")


def test_an_admitted_pod_goes_through_scheduling_to_ready() -> None:
    waiting = instance_conditions(_pod(phase="Pending"), None)
    assert _reasons(waiting) == [
        ("Admitted", "True", "Admitted"),
        ("Scheduled", "False", "WaitingForNode"),
        ("Ready", "False", "WaitingForNode"),
    ]
    refused = _pod(
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes",
            }
        ],
    )
    _, scheduled, ready = instance_conditions(refused, None)
    assert (scheduled.reason, ready.reason) == ("Unschedulable", "Unschedulable")
    assert scheduled.message.endswith("0/3 nodes")
    bound = _pod(phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    bound["spec"]["nodeName"] = "node-a"
    assert _reasons(instance_conditions(bound, None))[1:] == [
        ("Scheduled", "True", "Scheduled"),
        ("Ready", "True", "Running"),
    ]
    bound["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "message": "probe"}],
    }
    assert instance_conditions(bound, None)[2].reason == "ContainersNotReady"
    bound["status"] = {"phase": "Succeeded"}
    assert instance_conditions(bound, None)[2].reason == "Completed"
    bound["status"] = {"phase": "Failed", "message": "OOMKilled"}
    ready = instance_conditions(bound, None)[2]
    assert (ready.reason, ready.message) == ("PodFailed", "its Pod failed: OOMKilled")


# --- the InstanceType -----------------------------------------------------------------------


def _state(**kw: Any) -> PoolState:
    base: dict[str, Any] = {
        "phase": "Active",
        "message": "Can admit new workloads",
        "acceleratable": True,
        "views": AcceleratorViews(exclusive=View(1, 1, 2)),
        "cpu": View(),
    }
    return PoolState(**{**base, **kw})


def test_pool_reasons() -> None:
    assert _reasons(pool_conditions(_state())) == [
        ("Active", "True", "QueueActive"),
        ("Available", "True", "CapacityFree"),
        ("Ready", "True", "Ready"),
    ]
    full = _state(views=AcceleratorViews(exclusive=View(0, 0, 2)))
    assert _reasons(pool_conditions(full))[1:] == [
        ("Available", "False", "Full"),
        ("Ready", "True", "Ready"),
    ]
    empty = _state(views=AcceleratorViews())
    assert _reasons(pool_conditions(empty))[1:] == [
        ("Available", "False", "NoCapacity"),
        ("Ready", "False", "NoCapacity"),
    ]
    cpu = _state(acceleratable=False, views=AcceleratorViews(), cpu=View(4, 8, 16))
    assert pool_conditions(cpu)[1].message == "a new Instance fits now (CPU 4/8)"
    for kw, reason in (
        ({"phase": "Pending", "message": "waiting"}, "QueuePending"),
        ({"phase": "Inactive", "queue_reason": "Stopped"}, "Stopped"),
        ({"phase": "Inactive", "queue_reason": "not a reason!"}, "QueueInactive"),
        ({"phase": "Inactive", "draining": True}, "Draining"),
        ({"phase": "Inactive", "terminating": True}, "Terminating"),
    ):
        active, available, ready = pool_conditions(_state(**kw))
        assert (active.status, active.reason, ready.reason) == ("False", reason, reason), kw
        assert (available.status, available.reason) == ("False", "Inactive")


# --- Devices --------------------------------------------------------------------------------


def test_a_failed_detection_is_its_manufacturers_and_the_nodes() -> None:
    found = devices_conditions({"nvidia": (0, "NVML: driver not loaded")}, (), None)
    assert _reasons(found) == [
        ("nvidia.gpustack.ai/Detected", "False", "DetectionFailed"),
        ("SlicingAvailable", "True", "SlicingAvailable"),
        ("Ready", "False", "DetectionFailed"),
    ]
    assert "NVML: driver not loaded" in found[0].message
    assert found[2].message == "the detection of nvidia failed (see their Detected)"
    assert devices_conditions({"amd": (2, None)}, (), None)[0].message == (
        "the last detection measured 2 cards"
    )


def test_each_agent_counts_the_others_detected_in_the_nodes_ready() -> None:
    """Two agents on one node: the AMD agent's Ready reads the NVIDIA agent's failure, and
    its own Detected replaces what the list held for amd."""
    held = [
        _held("nvidia.gpustack.ai/Detected", "False"),
        _held("amd.gpustack.ai/Detected", "False"),
    ]
    *_, ready = devices_conditions({"amd": (1, None)}, (), held)
    assert (ready.status, ready.message) == (
        "False",
        "the detection of nvidia failed (see their Detected)",
    )
    held[0]["status"] = "True"
    assert devices_conditions({"amd": (1, None)}, (), held)[-1].holds


def test_a_pool_that_counts_nothing_says_so_rather_than_kueues_stopped() -> None:
    """The queue hook holds the queue of a pool without flavors; Kueue calls that Stopped."""
    empty = _state(phase="Inactive", queue_reason="Stopped", views=AcceleratorViews())
    active, available, ready = pool_conditions(empty)
    assert (active.reason, available.reason, ready.reason) == ("NoCapacity",) * 3
    assert active.message.startswith("Can admit new workloads: the pool has no cards counted")


def test_micro_timestamp_keeps_six_digits_and_carries_a_rounded_second() -> None:
    assert micro_timestamp(0) == "1970-01-01T00:00:00.000000Z"
    assert micro_timestamp(1.25) == "1970-01-01T00:00:01.250000Z"
    assert micro_timestamp(59.9999996) == "1970-01-01T00:01:00.000000Z"
