"""What the time-to-capacity benchmark reads from what it watched: when a pool's flavor, queue and
view first counted some number of cards, the percentiles of the waits, and which writes the
chain made (from the API server's audit log) against the fewest a join needs.

Pure: the shell (`benchmarks.capacity`) feeds it objects stamped with the local monotonic clock
as its watches saw them, and the audit log's lines.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from benchmarks.timing import percentile
from chain.labels import capacity_key
from chain.quantity import parse_quantity
from chain.units import credits_to_accelerators

Obj = dict[str, object]


@dataclass
class Series:
    """One number as a watch saw it change: (monotonic seconds, value), oldest first."""

    points: list[tuple[float, int]] = field(default_factory=list)

    def add(self, at: float, value: int) -> None:
        """Record `value` seen `at`; a repeat of the last value is not a change."""
        if not self.points or self.points[-1][1] != value:
            self.points.append((at, value))

    def latest(self) -> int:
        return self.points[-1][1] if self.points else 0

    def first_at_least(self, since: float, target: int) -> float | None:
        """Seconds from `since` until the value was first seen at `target` or more after it
        (0 when it already was at `since`); None if never."""
        before = [value for at, value in self.points if at <= since]
        if before and before[-1] >= target:
            return 0.0
        for at, value in self.points:
            if at > since and value >= target:
                return at - since
        return None


@dataclass(frozen=True)
class Spread:
    """The percentiles a measure is reported by."""

    count: int
    p50: float
    p99: float
    worst: float

    @classmethod
    def of(cls, samples: Iterable[float]) -> Spread | None:
        values = sorted(samples)
        if not values:
            return None
        return cls(len(values), percentile(values, 0.5), percentile(values, 0.99), values[-1])

    def line(self) -> str:
        return (
            f"p50 {self.p50:.2f} s, p99 {self.p99:.2f} s (worst {self.worst:.2f} s, n={self.count})"
        )


# --- reading the pool's objects ---------------------------------------------------------------


def _labels(obj: Mapping[str, object]) -> Mapping[str, object]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def flavor_cards(flavor: Mapping[str, object], feature_key: str) -> int:
    """The cards a ResourceFlavor stands for: its `<feature key>.capacity` label (0 if none)."""
    raw = _labels(flavor).get(capacity_key(feature_key))
    return int(raw) if isinstance(raw, str) and raw.isdigit() else 0


def queue_cards(queue: Mapping[str, object], resource: str) -> int:
    """Whole cards a ClusterQueue's nominal quota of `resource` (credits) stands for, summed over
    its flavors."""
    spec = queue.get("spec")
    groups = spec.get("resourceGroups") if isinstance(spec, Mapping) else None
    credits = 0
    for group in groups if isinstance(groups, list) else []:
        for flavor in group.get("flavors") or [] if isinstance(group, Mapping) else []:
            for res in flavor.get("resources") or [] if isinstance(flavor, Mapping) else []:
                if isinstance(res, Mapping) and res.get("name") == resource:
                    credits += int(parse_quantity(str(res.get("nominalQuota"))))
    return int(credits_to_accelerators(credits))


def view_cards(instance_type: Mapping[str, object]) -> tuple[int, int]:
    """(capacity, remaining) of an InstanceType's whole-card view (`status.accelerator`); zeros
    before the status hook wrote one."""
    status = instance_type.get("status")
    view = status.get("accelerator") if isinstance(status, Mapping) else None
    if not isinstance(view, Mapping):
        return 0, 0
    return tuple(  # type: ignore[return-value]
        int(parse_quantity(str(view.get(key) or "0"))) for key in ("capacity", "remaining")
    )


def fed_flavors(summaries: Iterable[Mapping[str, object]]) -> set[str]:
    """The flavor names some NodeFlavors summary feeds: a flavor among them that the chain
    deletes was deleted while a node still fed it."""
    names = set()
    for summary in summaries:
        spec = summary.get("spec")
        entries = spec.get("flavors") if isinstance(spec, Mapping) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                names.add(str(entry["name"]))
    return names


def revision(obj: Mapping[str, object]) -> int:
    """An object's resourceVersion as a number: on this testbed's single etcd it is the
    store's revision, one order across every resource (0 if absent or not a number)."""
    meta = obj.get("metadata")
    raw = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return int(raw) if isinstance(raw, str) and raw.isdigit() else 0


Versions = Mapping[str, list[tuple[int, frozenset[str]]]]
"""Per NodeFlavors summary, every version a watch saw: (revision, the flavors it named; none
once deleted)."""


def feeders_at(versions: Versions, flavor: str, at_revision: int) -> list[str]:
    """The summaries whose newest version before `at_revision` named `flavor`: who still fed
    it at that point of the store's history. Read by revision, not by arrival: the summaries'
    watch and the flavors' watch are separate streams, so a deletion can arrive before the
    summary changes that preceded it."""
    feeders = []
    for name, seen in versions.items():
        before = [(rev, names) for rev, names in seen if rev < at_revision]
        if before and flavor in max(before)[1]:
            feeders.append(name)
    return sorted(feeders)


# --- the chain's writes -----------------------------------------------------------------------

METACONTROLLER = "metacontroller"
"""The hooks' answers: every object a hook owns is written by Metacontroller."""
DRIVER = "verdict driver"
"""The pool-cards keeper, the lifecycle keeper and the verdicts: the chain's credentialed
controller."""
DRIVER_USER = "system:serviceaccount:gpustack-system:gpustack-admission-driver"

WriteKey = tuple[str, str, str, str]
"""(who, verb, resource, subresource)."""


@dataclass(frozen=True)
class Write:
    """One write the API server served, as its audit log has it."""

    who: str
    verb: str
    resource: str
    subresource: str
    name: str
    code: int
    at: datetime

    @property
    def key(self) -> WriteKey:
        return self.who, self.verb, self.resource, self.subresource


def chain_actor(event: Mapping[str, object]) -> str | None:
    """Which part of the chain made an audited request, or None for anyone else (the
    benchmark's simulated kubelets and agents, nfd-master, Kueue, the control plane)."""
    agent = str(event.get("userAgent") or "")
    if agent.split("/", 1)[0] == METACONTROLLER:
        return METACONTROLLER
    user = event.get("user")
    if isinstance(user, Mapping) and user.get("username") == DRIVER_USER:
        return DRIVER
    return None


def _time(raw: object) -> datetime:
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def chain_writes(lines: Iterable[str], since: datetime, until: datetime) -> list[Write]:
    """The chain's writes among audit log lines whose request arrived in [since, until]
    (timezone-aware datetimes); other lines, and lines that are not events, are skipped."""
    found = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or event.get("stage") != "ResponseComplete":
            continue
        who = chain_actor(event)
        if who is None:
            continue
        at = _time(event.get("requestReceivedTimestamp"))
        if not since <= at <= until:
            continue
        ref = event.get("objectRef") or {}
        status = event.get("responseStatus") or {}
        found.append(
            Write(
                who,
                str(event.get("verb")),
                str(ref.get("resource") or ""),
                str(ref.get("subresource") or ""),
                str(ref.get("name") or ""),
                int(status.get("code") or 0),
                at,
            )
        )
    return found


PER_NODE_MINIMUM: Mapping[tuple[str, str], int] = {("nodes", ""): 1, ("nodeflavors", ""): 1}
"""What one joining node needs written by the chain whatever else joins with it: its labels
(`gpustack.ai/managed`, the CPU key and count, the topology profile: one update once NFD's and
the agent's labels are all there) and its NodeFlavors summary (one create)."""
PER_POOL_MINIMUM: Mapping[tuple[str, str], int] = {
    ("resourceflavors", ""): 2,
    ("clusterqueues", ""): 2,
    ("poolcards", ""): 1,
    ("instancetypes", "status"): 2,
}
"""What a change of a pool's nodes needs written once, however many nodes it brings, for the
card pool and (with `instance-type-mixed-on-node`, the default) the CPU pool the same nodes
feed: the flavor's capacity label, the queue's quota, the card pool's PoolCards, each
InstanceType's status."""


def minimum_per_node(nodes: int) -> float:
    """The fewest chain writes per node when `nodes` join in one go."""
    return sum(PER_NODE_MINIMUM.values()) + sum(PER_POOL_MINIMUM.values()) / max(1, nodes)


def writes_by_kind(writes: Iterable[Write]) -> Counter[WriteKey]:
    return Counter(write.key for write in writes)


def per_node(counts: Mapping[WriteKey, int], nodes: int) -> list[tuple[WriteKey, float]]:
    """Writes per node by kind, the most first."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(key, n / max(1, nodes)) for key, n in ranked]


def objects_written(writes: Iterable[Write], resource: str, subresource: str = "") -> Counter[str]:
    """How many times each object of a resource was written."""
    return Counter(
        w.name for w in writes if w.resource == resource and w.subresource == subresource
    )
