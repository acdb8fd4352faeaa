"""Which namespaces a member lacks for a pool (docs/fleet.md, "Namespaces").

MultiKueue creates a Workload on a member in the Workload's own namespace, in the LocalQueue of
the same name (`cloneForCreate` copies its metadata and spec), so a member where that namespace
or that queue is missing can never run it, and nothing on the manager says why. On the manager
the entrance hook gives every fleet ClusterQueue a LocalQueue `gpustack-fnv64-<fnv64a(pool)>` in
each tenant namespace; on a member its own entrance hook does the same for its pool of that
name, in the namespaces the platform team has mirrored there. So comparing the two lists of
LocalQueues by (namespace, name) finds exactly the namespaces a dispatched Workload would miss:
a namespace not mirrored, or one the member's settings exclude from its entrance hook.

Pure: the gateway lists the LocalQueues (the manager's, and each read member's) and hands them
in; a member whose LocalQueues could not be listed is said to be unknown, never missing nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chain.names import local_queue_name

Obj = dict[str, Any]
Queues = frozenset[tuple[str, str]]
"""(namespace, name) of a cluster's LocalQueues."""

SHOWN = 10
"""Namespaces named per member in a message; the rest are counted."""


def queues_of(local_queues: Iterable[Obj]) -> Queues:
    """(namespace, name) of each LocalQueue listed (one without both is skipped: the API server
    never lists one, and a fake may)."""
    found = set()
    for obj in local_queues:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if isinstance(namespace, str) and isinstance(name, str):
            found.add((namespace, name))
    return frozenset(found)


def fleet_namespaces(
    pool: str, manager_queues: Iterable[Obj], ignored: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    """The manager's namespaces that hold the pool's LocalQueue leading to its ClusterQueue: where
    a tenant can submit to the pool, so where the members need the same queue. `ignored` are the
    manager's own (the fleet namespace, which holds member credentials and is no tenant's: the
    entrance hook gives it queues as it does every namespace it does not reserve)."""
    name = local_queue_name(pool)
    found = set()
    for obj in manager_queues:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        if meta.get("name") == name and spec.get("clusterQueue") == pool:
            namespace = meta.get("namespace")
            if isinstance(namespace, str) and namespace not in ignored:
                found.add(namespace)
    return tuple(sorted(found))


@dataclass(frozen=True)
class Mirroring:
    """For one pool: what each of its members lacks, and whom the gateway could not tell."""

    pool: str
    missing: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Member -> the namespaces (sorted) without the pool's LocalQueue there."""
    unknown: Mapping[str, str] = field(default_factory=dict)
    """Member -> why its LocalQueues could not be listed."""

    @property
    def complete(self) -> bool:
        return not self.missing and not self.unknown

    def message(self) -> str:
        """What a person reads on the FleetPool's condition and Event."""
        if self.complete:
            return "every member has the pool's LocalQueue in every namespace the manager has it"
        queue = local_queue_name(self.pool)
        parts = []
        for member, namespaces in sorted(self.missing.items()):
            shown = ", ".join(namespaces[:SHOWN])
            more = f" and {len(namespaces) - SHOWN} more" if len(namespaces) > SHOWN else ""
            parts.append(f"member {member} lacks namespace {shown}{more}")
        said = (
            f"{'; '.join(parts)} (or the LocalQueue {queue} in it): MultiKueue cannot run "
            "those namespaces' Workloads of this pool there; mirror the namespaces on the member"
            if parts
            else ""
        )
        unknown = "; ".join(
            f"member {member}: its LocalQueues could not be listed: {why}"
            for member, why in sorted(self.unknown.items())
        )
        return "; ".join(text for text in (said, unknown) if text)


def mirroring(
    pool: str,
    members: Sequence[str],
    manager_queues: Iterable[Obj],
    member_queues: Mapping[str, Queues | str],
    ignored: frozenset[str] = frozenset(),
) -> Mirroring:
    """What the pool's `members` lack of the manager's namespaces for it; `member_queues` holds a
    member's LocalQueues, or why they could not be listed (a member absent from it, one that
    was not read, is not judged)."""
    wanted = fleet_namespaces(pool, manager_queues, ignored)
    name = local_queue_name(pool)
    missing: dict[str, tuple[str, ...]] = {}
    unknown: dict[str, str] = {}
    for member in members:
        queues = member_queues.get(member)
        if queues is None:
            continue
        if isinstance(queues, str):
            unknown[member] = queues
            continue
        lacking = tuple(ns for ns in wanted if (ns, name) not in queues)
        if lacking:
            missing[member] = lacking
    return Mirroring(pool, missing, unknown)
