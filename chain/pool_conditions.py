"""An InstanceType's conditions (docs/queues.md, "Conditions of the InstanceType"), from what its
status hook reads.

- `Active`: its pool's ClusterQueue admits (Kueue's own `Active` condition on it, with Kueue's
  reason; `NoCapacity` when the pool counts nothing, whose queue the queue hook holds).
- `Available`: a new Instance fits now: some view's `onceMaxRequest` is above zero.
- `Ready`: the pool is usable: Active, and it has counted capacity (cards, or cores for a CPU
  pool); a full pool is still Ready (it is only not Available).
"""

from __future__ import annotations

from dataclasses import dataclass

from chain.conditions import Condition
from chain.views import AcceleratorViews, View

ACTIVE = "Active"
AVAILABLE = "Available"
READY = "Ready"

# Reasons a user reads on `kubectl describe instancetype`.
QUEUE_ACTIVE = "QueueActive"
QUEUE_PENDING = "QueuePending"
QUEUE_INACTIVE = "QueueInactive"
TERMINATING = "Terminating"
DRAINING = "Draining"
CAPACITY_FREE = "CapacityFree"
NO_CAPACITY = "NoCapacity"
FULL = "Full"
INACTIVE = "Inactive"


@dataclass(frozen=True)
class PoolState:
    """What the status hook knows of the pool when it writes the status."""

    phase: str
    """`Pending`, `Active` or `Inactive` (`status.phase`)."""
    message: str
    """`status.phaseMessage`."""
    acceleratable: bool
    views: AcceleratorViews
    cpu: View
    terminating: bool = False
    draining: bool = False
    queue_reason: str = ""
    """The reason of Kueue's `Active` condition on the ClusterQueue, when it has one."""


def _active(state: PoolState, empty: str) -> Condition:
    """`empty`: why the pool counts nothing, "" when it counts some capacity."""
    if state.terminating:
        return Condition.of(ACTIVE, False, TERMINATING, "the InstanceType is being deleted")
    if state.draining:
        message = "its ClusterQueue is HoldAndDrain: it admits nothing and evicts what it holds"
        return Condition.of(ACTIVE, False, DRAINING, message)
    if state.phase == "Pending":
        return Condition.of(ACTIVE, False, QUEUE_PENDING, state.message)
    if state.phase == "Active":
        return Condition.of(ACTIVE, True, QUEUE_ACTIVE, state.message or "its ClusterQueue admits")
    said = state.message or "its ClusterQueue is not active"
    if empty:
        # The queue hook holds the queue of a pool without flavors: say what it lacks.
        return Condition.of(ACTIVE, False, NO_CAPACITY, f"{said}: {empty}")
    reason = state.queue_reason if _is_reason(state.queue_reason) else QUEUE_INACTIVE
    return Condition.of(ACTIVE, False, reason, said)


def _is_reason(word: str) -> bool:
    """A word `metav1.Condition` takes as a reason (Kueue's are; anything else is replaced)."""
    return bool(word) and word[0].isalpha() and all(c.isalnum() or c in "_,:" for c in word)


def _views(state: PoolState) -> tuple[View, ...]:
    """The views that say what the pool holds: the CPU's for a CPU pool, else the four card
    views."""
    if not state.acceleratable:
        return (state.cpu,)
    views = state.views
    return (views.exclusive, views.shared, views.sliced, views.partitioned.view)


def _shown(state: PoolState) -> str:
    """The views as the printer columns show them (`onceMaxRequest/remaining`)."""
    if not state.acceleratable:
        return f"CPU {state.cpu.summary()}"
    return f"Accelerator(EX/SH/SL/PT) {state.views.summary()}"


def pool_conditions(state: PoolState) -> tuple[Condition, Condition, Condition]:
    """(Active, Available, Ready) for the InstanceType's status."""
    counted = any(view.capacity > 0 for view in _views(state))
    what = "cards" if state.acceleratable else "CPU cores"
    empty = f"the pool has no {what} counted: no node of it reported any, or every node of it left"
    active = _active(state, "" if counted else empty)
    if not active.holds and active.reason != NO_CAPACITY:
        available = Condition.of(AVAILABLE, False, INACTIVE, f"not Active: {active.message}")
    elif not counted:
        available = Condition.of(AVAILABLE, False, NO_CAPACITY, empty)
    elif any(view.once_max_request > 0 for view in _views(state)):
        message = f"a new Instance fits now ({_shown(state)})"
        available = Condition.of(AVAILABLE, True, CAPACITY_FREE, message)
    else:
        message = f"every {what[:-1]} is taken; new Instances wait ({_shown(state)})"
        available = Condition.of(AVAILABLE, False, FULL, message)
    if not active.holds:
        ready = Condition.of(READY, False, active.reason, active.message)
    elif not counted:
        ready = Condition.of(READY, False, NO_CAPACITY, empty)
    else:
        ready = Condition.of(READY, True, "Ready", "the pool is active and has counted capacity")
    return active, available, ready
