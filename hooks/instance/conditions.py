"""An Instance's conditions (docs/instances.md, "Conditions"), from what its hook reads: the
Instance, its Pod, and its InstanceType (whose own conditions say why a queue holds a Pod).

- `Admitted`: no admission gate of Kueue holds its Pod: Kueue's Pod webhook gives every queued
  Pod the scheduling gate `kueue.x-k8s.io/admission` and takes it away when it admits the Pod's
  Workload (a cluster whose Kueue does not manage Pods never gates it).
- `Scheduled`: its Pod is bound to a node.
- `Ready`: its Pod runs and is ready (the Pod's own `Ready` condition).

Each is False with the reason of the first step that holds it back, so `Ready`'s reason is the
one a user acts on (`Stopped`, `Unservable`, `NoCapacity`, `WaitingForQuota`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chain import pool_conditions
from chain.conditions import Condition, find

ADMITTED = "Admitted"
SCHEDULED = "Scheduled"
READY = "Ready"

KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
"""The scheduling gate Kueue's Pod webhook sets until the Pod's Workload is admitted."""

# Reasons a user reads on `kubectl describe instance`.
UNSERVABLE = "Unservable"
STOPPED = "Stopped"
DELETING = "Deleting"
POD_PENDING = "PodPending"
POOL_INACTIVE = "PoolInactive"
NO_CAPACITY = "NoCapacity"
WAITING_FOR_QUOTA = "WaitingForQuota"
WAITING_FOR_ADMISSION = "WaitingForAdmission"
UNSCHEDULABLE = "Unschedulable"
WAITING_FOR_NODE = "WaitingForNode"
CONTAINERS_NOT_READY = "ContainersNotReady"
COMPLETED = "Completed"
POD_FAILED = "PodFailed"


def _pod_condition(pod: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return find((pod.get("status") or {}).get("conditions"), type_) or {}


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(isinstance(g, Mapping) and g.get("name") == KUEUE_ADMISSION_GATE for g in gates)


def _held(instance_type: Mapping[str, Any] | None) -> tuple[str, str]:
    """Why the queue holds the Pod, as far as its InstanceType's conditions tell."""
    held = ((instance_type or {}).get("status") or {}).get("conditions")
    active = find(held, pool_conditions.ACTIVE) or {}
    ready = find(held, pool_conditions.READY) or {}
    available = find(held, pool_conditions.AVAILABLE) or {}
    if ready.get("reason") == pool_conditions.NO_CAPACITY:
        return NO_CAPACITY, f"no card or core of its pool can host it: {ready.get('message', '')}"
    if active.get("status") == "False":
        return POOL_INACTIVE, f"its pool's queue admits nothing now: {active.get('message', '')}"
    if available.get("status") == "False":
        message = "its Pod waits in its pool's queue until the quota fits it: "
        return WAITING_FOR_QUOTA, message + str(available.get("message", ""))
    # The pool has room for some request: this one is larger, or the per-card check is pending.
    message = "its Pod waits in its pool's queue for Kueue to admit it (quota, admission checks)"
    return WAITING_FOR_ADMISSION, message


def instance_conditions(
    pod: Mapping[str, Any] | None,
    instance_type: Mapping[str, Any] | None,
    *,
    problem: str = "",
    stopped: str = "",
    deleting: bool = False,
) -> tuple[Condition, Condition, Condition]:
    """(Admitted, Scheduled, Ready). `problem`: why no Pod can be made for the request;
    `stopped`: why it is stopped; `deleting`: the Instance is being deleted."""
    reason, message = "", ""
    if problem:
        reason, message = UNSERVABLE, problem
    elif stopped:
        reason, message = STOPPED, stopped
    elif deleting:
        reason, message = DELETING, "the Instance is being deleted"
    elif pod is None:
        reason, message = POD_PENDING, "its Pod is being created"
    if reason or pod is None:
        return (
            Condition.of(ADMITTED, False, reason, message),
            Condition.of(SCHEDULED, False, reason, message),
            Condition.of(READY, False, reason, message),
        )
    if _gated(pod):
        admitted = Condition.of(ADMITTED, False, *_held(instance_type))
    else:
        message = "no admission gate of Kueue holds its Pod"
        admitted = Condition.of(ADMITTED, True, ADMITTED, message)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if node:
        scheduled = Condition.of(SCHEDULED, True, SCHEDULED, f"its Pod is bound to {node}")
    elif not admitted.holds:
        scheduled = Condition.of(SCHEDULED, False, admitted.reason, admitted.message)
    else:
        placed = _pod_condition(pod, "PodScheduled")
        if placed.get("status") == "False" and placed.get("reason") == UNSCHEDULABLE:
            message = f"no node can take its Pod: {placed.get('message', '')}"
            scheduled = Condition.of(SCHEDULED, False, UNSCHEDULABLE, message)
        else:
            message = "its Pod waits for the scheduler"
            scheduled = Condition.of(SCHEDULED, False, WAITING_FOR_NODE, message)
    return admitted, scheduled, _ready(pod, scheduled)


def _ready(pod: Mapping[str, Any], scheduled: Condition) -> Condition:
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return Condition.of(READY, False, COMPLETED, "its Pod's containers ran to completion")
    if phase == "Failed":
        why = status.get("message") or status.get("reason") or "a container failed"
        return Condition.of(READY, False, POD_FAILED, f"its Pod failed: {why}")
    if not scheduled.holds:
        return Condition.of(READY, False, scheduled.reason, scheduled.message)
    ready = _pod_condition(pod, "Ready")
    if ready.get("status") == "True":
        return Condition.of(READY, True, "Running", "its Pod runs and is ready")
    why = ready.get("message") or "its Pod's containers are not ready yet"
    return Condition.of(READY, False, CONTAINERS_NOT_READY, str(why))
