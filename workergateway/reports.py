"""The conditions the gateway writes on each `FleetPool`'s status (docs/fleet.md, "What the
gateway reports"): what a pass could not vouch for, kept on the pool where `kubectl get fpool -o
yaml` or `kubectl describe fpool` shows it, beside the Event it also writes.

- `MembersReadable`: every member Kueue marks Active was read. False (`MemberUnreadable`) names
  each member left out of this pass's sums and why (its Secret, its API server, its objects).
  The fleet's sums leave such a member out of every pool, and which pools it had cannot be
  known while it cannot be read, so every pool carries it.
- `MembersAgree`: the members that have the pool agree on its identity. False (`PoolConflict`)
  names the field and the members; the pool keeps its last spec meanwhile.
- `NamespacesMirrored`: every member of the pool has the pool's LocalQueue in each namespace the
  manager has it (`workergateway.namespaces`). False (`NamespaceMissing`) names the member and
  the namespaces; Unknown (`LocalQueuesUnreadable`) while a member's LocalQueues cannot be listed.

Pure: a pass hands in what it found; the shell merges the answer into the held list
(`chain.conditions.merge`) and writes it only when it changed.
"""

from __future__ import annotations

from collections.abc import Mapping

from chain.conditions import UNKNOWN, Condition
from workergateway.namespaces import Mirroring

MEMBERS_READABLE = "MembersReadable"
MEMBERS_AGREE = "MembersAgree"
NAMESPACES_MIRRORED = "NamespacesMirrored"
MEMBER_UNREADABLE = "MemberUnreadable"
POOL_CONFLICT = "PoolConflict"
NAMESPACE_MISSING = "NamespaceMissing"
QUEUES_UNREADABLE = "LocalQueuesUnreadable"


def readable(unreadable: Mapping[str, str]) -> Condition:
    if not unreadable:
        return Condition.of(MEMBERS_READABLE, True, "AllRead", "every Active member was read")
    said = "; ".join(message for _, message in sorted(unreadable.items()))
    return Condition.of(
        MEMBERS_READABLE,
        False,
        MEMBER_UNREADABLE,
        f"left out of the fleet's sums until they can be read: {said}",
    )


def agreeing(conflict: str | None) -> Condition:
    if conflict is None:
        return Condition.of(MEMBERS_AGREE, True, "Agreed", "the members agree on the pool")
    return Condition.of(
        MEMBERS_AGREE, False, POOL_CONFLICT, f"{conflict}; the pool keeps its last spec"
    )


def mirrored(mirroring: Mirroring) -> Condition:
    if mirroring.missing:
        return Condition.of(NAMESPACES_MIRRORED, False, NAMESPACE_MISSING, mirroring.message())
    if mirroring.unknown:
        return Condition(NAMESPACES_MIRRORED, UNKNOWN, QUEUES_UNREADABLE, mirroring.message())
    return Condition.of(NAMESPACES_MIRRORED, True, "Mirrored", mirroring.message())


def pool_conditions(
    unreadable: Mapping[str, str], conflict: str | None, mirroring: Mirroring
) -> list[Condition]:
    """The three conditions of one `FleetPool`, in a fixed order."""
    return [readable(unreadable), agreeing(conflict), mirrored(mirroring)]
