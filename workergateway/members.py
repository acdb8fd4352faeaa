"""What the gateway reads of each member, as small typed views (docs/fleet.md, "What the gateway
reads").

A member is one of the manager's `MultiKueueCluster` objects (`kueue.x-k8s.io/v1beta2`): its
name is the member's name everywhere (the MultiKueueConfig lists it by that name), and its
`Active` condition, which Kueue's MultiKueue controller writes (`True`, reason `Active`, once it
has connected with the kubeconfig the object names; `False` with the reason when it cannot), is
the one word on whether the member counts. Of the member itself the gateway reads its
InstanceTypes (spec and status) and, for each, the ClusterQueue of the same name (its nominal
quota only: the credits of a pool are not in the InstanceType's status, docs/fleet.md, "Quota").

Every reader here raises `MemberError` naming the member and the field, never skips what it
cannot read: a member whose status is malformed would otherwise vanish from the fleet's sums
with nobody told why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from chain import fields
from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_ACTIVE, KUEUE_API, WORKER_API
from chain.pools import PoolIdentity
from chain.quantity import parse_quantity
from chain.views import AcceleratorViews, View

MULTIKUEUE_CLUSTER = "MultiKueueCluster"
PHASES = ("Pending", "Active", "Inactive")
"""An InstanceType's `status.phase` (its ClusterQueue as Kueue reports it)."""
ACTIVE_PHASE = "Active"

T = TypeVar("T")


class MemberError(ValueError):
    """Something of a member the gateway cannot read: the member, the field, what is wrong."""

    def __init__(self, member: str, field: str, message: str) -> None:
        super().__init__(f"member {member}: {field}: {message}")
        self.member = member
        self.field = field
        self.message = message


def _fail(member: str, prefix: str, err: ValueError) -> MemberError:
    """A chain reader's `path: message` as a MemberError whose field starts with `prefix`
    (which object of the member it was)."""
    path, _, message = str(err).partition(": ")
    return MemberError(member, f"{prefix}.{path}" if path else prefix, message)


@dataclass(frozen=True)
class MemberState:
    """One `MultiKueueCluster` as the gateway reads it."""

    name: str
    active: bool
    reason: str
    """The `Active` condition's reason (`Active`, `BadKubeConfig`, `ClientConnectionFailed`,
    ...), or `NoActiveCondition` while Kueue has not reported on the member."""
    message: str


NO_ACTIVE_CONDITION = "NoActiveCondition"


def read_cluster(obj: Mapping[str, object]) -> MemberState:
    """The member a `MultiKueueCluster` stands for. Only `Active=True` counts: `False` and
    `Unknown` both mean MultiKueue does not dispatch there now, so its capacity is not the
    fleet's."""
    name = "?"
    try:
        meta = fields.child(obj, "metadata", "", required=True)
        name = fields.string(meta, "name", "metadata", required=True)
        if obj.get("kind") != MULTIKUEUE_CLUSTER or obj.get("apiVersion") != KUEUE_API:
            raise ValueError(f"kind: expected a {KUEUE_API} {MULTIKUEUE_CLUSTER}")
        status = fields.child(obj, "status", "")
        for condition, at in fields.items(status, "conditions", "status"):
            if fields.string(condition, "type", at) != KUEUE_ACTIVE:
                continue
            holds = fields.string(condition, "status", at, required=True) == "True"
            return MemberState(
                name,
                holds,
                fields.string(condition, "reason", at),
                fields.string(condition, "message", at),
            )
    except ValueError as err:
        raise _fail(name, f"multikueueclusters/{name}", err) from None
    return MemberState(name, False, NO_ACTIVE_CONDITION, "Kueue has not reported on the member")


@dataclass(frozen=True)
class Bound:
    """A quantity of the unit's spec: its value to compare, its text to write back as given."""

    value: Fraction
    text: str


@dataclass(frozen=True)
class UnitSpec:
    """The parts of an InstanceType's spec that are not its identity; a bound is None when the
    member's type does not name it."""

    display_name: str = ""
    description: str = ""
    cpu: Bound | None = None
    ram: Bound | None = None
    local_storage: Bound | None = None


@dataclass(frozen=True)
class MemberPool:
    """One InstanceType of a member, with the quota of its ClusterQueue."""

    member: str
    name: str
    identity: PoolIdentity
    unit: UnitSpec
    phase: str
    """`Pending` also for a type whose status the member's hook has not written yet."""
    views: AcceleratorViews
    cpu: View
    quota: tuple[tuple[str, Fraction], ...]
    """(resource, nominal quota) of the member's ClusterQueue of the same name, summed over its
    flavors, in the order the queue names them; empty while the member has no such queue."""

    @property
    def counted(self) -> bool:
        """Whether the pool adds to the fleet: only while its queue admits (docs/fleet.md,
        "Which pools count")."""
        return self.phase == ACTIVE_PHASE


def _bound(obj: fields.Obj, key: str, path: str) -> Bound | None:
    text = fields.string(obj, key, path)
    if not text:
        return None
    try:
        return Bound(parse_quantity(text), text)
    except ValueError as err:
        raise ValueError(f"{fields.at(path, key)}: {err}") from None


def _unit_spec(spec: fields.Obj) -> UnitSpec:
    units = fields.child(spec, "unitResources", "spec")
    return UnitSpec(
        fields.string(spec, "displayName", "spec"),
        fields.string(spec, "description", "spec"),
        _bound(units, "cpu", "spec.unitResources"),
        _bound(units, "ram", "spec.unitResources"),
        _bound(spec, "localStorage", "spec"),
    )


def _queue_quota(queue: fields.Obj) -> tuple[tuple[str, Fraction], ...]:
    """Nominal quota per resource over every flavor of every group, as Kueue counts a queue's
    quota."""
    totals: dict[str, Fraction] = {}
    spec = fields.child(queue, "spec", "", required=True)
    for group, at in fields.items(spec, "resourceGroups", "spec"):
        for flavor, where in fields.items(group, "flavors", at):
            for resource, place in fields.items(flavor, "resources", where):
                name = fields.string(resource, "name", place, required=True)
                key = "nominalQuota"
                raw = resource.get(key)
                if isinstance(raw, bool) or not isinstance(raw, str | int):
                    raise ValueError(f"{fields.at(place, key)}: expected a quantity, got {raw!r}")
                try:
                    amount = parse_quantity(str(raw))
                except ValueError as err:
                    raise ValueError(f"{fields.at(place, key)}: {err}") from None
                totals[name] = totals.get(name, Fraction(0)) + amount
    return tuple(totals.items())


def _status(obj: fields.Obj) -> tuple[str, AcceleratorViews, View]:
    """(phase, views, cpu) of a member's InstanceType. No status at all is a type the member's
    status hook has not reached yet: Pending, counting nothing. A status that is there must be
    whole (the hook always writes every field), so a missing view is an error, not a zero."""
    raw = obj.get("status")
    if raw is None:
        return "Pending", AcceleratorViews(), View()
    status = fields.as_object(raw, "status")
    phase = fields.string(status, "phase", "status", required=True)
    if phase not in PHASES:
        raise ValueError(f"status.phase: expected one of {', '.join(PHASES)}, got {phase!r}")
    views = AcceleratorViews.parse(status, "status")
    cpu = View.parse(fields.child(status, "cpu", "status", required=True), "status.cpu")
    return phase, views, cpu


def _by_name(
    member: str,
    plural: str,
    kind: tuple[str, str],
    objs: Iterable[fields.Obj],
    read: Callable[[fields.Obj], T],
) -> dict[str, T]:
    """`read` of each object of one kind (apiVersion, kind), by name; an error names the member,
    the object (`<plural>/<name>`, or its place in the list before its name is known) and the
    field."""
    found: dict[str, T] = {}
    for number, obj in enumerate(objs):
        prefix = f"{plural}[{number}]"
        try:
            meta = fields.child(obj, "metadata", "", required=True)
            name = fields.string(meta, "name", "metadata", required=True)
            prefix = f"{plural}/{name}"
            if (obj.get("apiVersion"), obj.get("kind")) != kind:
                raise ValueError(f"kind: expected a {kind[0]} {kind[1]}")
            if name in found:
                raise ValueError("metadata.name: listed twice")
            found[name] = read(obj)
        except ValueError as err:
            raise _fail(member, prefix, err) from None
    return found


def _type_parts(obj: fields.Obj) -> tuple[PoolIdentity, UnitSpec, str, AcceleratorViews, View]:
    spec = fields.child(obj, "spec", "")
    return (PoolIdentity.of_spec(spec, "spec"), _unit_spec(spec), *_status(obj))


def read_pools(
    member: str, instance_types: Iterable[fields.Obj], queues: Iterable[fields.Obj]
) -> tuple[MemberPool, ...]:
    """A member's pools, by name, from its InstanceTypes and ClusterQueues (the queues of other
    names are not read: only a pool's own queue holds its quota)."""
    quotas = _by_name(member, "clusterqueues", (KUEUE_API, CLUSTER_QUEUE), queues, _queue_quota)
    types = _by_name(
        member, "instancetypes", (WORKER_API, INSTANCE_TYPE), instance_types, _type_parts
    )
    return tuple(
        MemberPool(member, name, *types[name], quotas.get(name, ())) for name in sorted(types)
    )


def read_member(
    cluster: fields.Obj, instance_types: Iterable[fields.Obj], queues: Iterable[fields.Obj]
) -> tuple[MemberState, tuple[MemberPool, ...]]:
    """A member and, while it is Active, its pools. An inactive member's objects are not read:
    the gateway stops watching a member MultiKueue cannot reach, so what it holds of one is old,
    and a stale object must not fail the fleet's pass."""
    state = read_cluster(cluster)
    if not state.active:
        return state, ()
    return state, read_pools(state.name, instance_types, queues)
