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

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

from chain import fields
from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_ACTIVE, KUEUE_API, WORKER_API
from chain.pool_nodes import fast_profiles
from chain.pools import PoolIdentity
from chain.quantity import parse_quantity
from chain.views import AcceleratorViews, Amount, PartitionView, View

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


# Fast readers. A pass reads every Active member's every InstanceType and pool queue afresh
# (docs/benchmarks.md, "Fleet": ten members of a thousand nodes), and nearly every amount there
# is a plain whole number. These accept only exact, well-formed JSON (a digit string, an `int`
# that is not a `bool`, lists and maps of the right types) and answer None on anything else;
# the typed readers then read the same object and either name the broken field or accept what
# the fast path was too strict for (`500m`, `16Gi`). So both read the same values.


def _fast_amount(raw: object) -> Amount | None:
    if type(raw) is str:
        return int(raw) if raw.isascii() and raw.isdigit() else None
    if type(raw) is int and raw >= 0:
        return raw
    return None


def _fast_view(raw: object) -> View | None:
    if type(raw) is not dict:
        return None
    once, remaining, capacity = raw.get("onceMaxRequest"), raw.get("remaining"), raw.get("capacity")
    if type(once) is str and type(remaining) is str and type(capacity) is str:
        # Three digit strings, checked at once: the joined text is all digits only if each is.
        joined = once + remaining + capacity
        if once and remaining and capacity and joined.isascii() and joined.isdigit():
            return View(int(once), int(remaining), int(capacity))
        return None
    amounts = (_fast_amount(once), _fast_amount(remaining), _fast_amount(capacity))
    if amounts[0] is None or amounts[1] is None or amounts[2] is None:
        return None
    return View(amounts[0], amounts[1], amounts[2])


def _fast_views(status: Mapping[str, object]) -> tuple[AcceleratorViews, View] | None:
    """(views, cpu) of a status, or None: the typed readers decide."""
    exclusive = _fast_view(status.get("accelerator"))
    shared = _fast_view(status.get("acceleratorShared"))
    sliced = _fast_view(status.get("acceleratorSliced"))
    partitioned = status.get("acceleratorPartitioned")
    cpu = _fast_view(status.get("cpu"))
    pt = _fast_view(partitioned)
    if exclusive is None or shared is None or sliced is None or cpu is None or pt is None:
        return None
    assert type(partitioned) is dict  # _fast_view took it
    allocated = fast_profiles(partitioned.get("allocatedProfiles"))
    offered = fast_profiles(partitioned.get("remainingProfiles"))
    if allocated is None or offered is None:
        return None
    return AcceleratorViews(exclusive, shared, sliced, PartitionView(pt, allocated, offered)), cpu


def _fast_quota(queue: Mapping[str, object]) -> tuple[tuple[str, Fraction | int], ...] | None:
    # The usual queue's shape is taken for granted and anything else fails a lookup: indexing a
    # string, a list or a number by a key raises TypeError (iterating a map yields its keys,
    # strings), a missing key KeyError, a missing `.get` AttributeError. None then: the typed
    # reader reads it, and names what is wrong. Only the names and amounts are checked by type.
    totals: dict[str, Fraction | int] = {}
    try:
        for group in queue["spec"].get("resourceGroups", ()):  # type: ignore[attr-defined]
            for flavor in group["flavors"]:
                for resource in flavor["resources"]:
                    name, raw = resource["name"], resource["nominalQuota"]
                    if type(raw) is str and raw.isdigit() and raw.isascii():
                        amount: Amount = int(raw)
                    elif type(raw) is int and raw >= 0:
                        amount = raw
                    else:
                        return None
                    if type(name) is not str or not name:
                        return None
                    totals[name] = totals.get(name, 0) + amount
    except (TypeError, KeyError, AttributeError):
        return None
    return tuple(totals.items())


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
    quota: tuple[tuple[str, Fraction | int], ...]
    """(resource, nominal quota) of the member's ClusterQueue of the same name, summed over its
    flavors, in the order the queue names them; empty while the member has no such queue."""

    @property
    def counted(self) -> bool:
        """Whether the pool adds to the fleet: only while its queue admits (docs/fleet.md,
        "Which pools count")."""
        return self.phase == ACTIVE_PHASE


@functools.lru_cache(maxsize=1024)
def _bound_of(text: str) -> Bound | None:
    """A unit's bound from its text: a handful of distinct strings in a whole fleet, read on
    every pass, so each is parsed once (a refused one raises, and is not remembered)."""
    return Bound(parse_quantity(text), text) if text else None


@functools.lru_cache(maxsize=1024)
def _unit_of(display: str, description: str, cpu: str, ram: str, storage: str) -> UnitSpec:
    """The unit from its five strings; a fleet has a few distinct ones, the same every pass."""
    return UnitSpec(display, description, _bound_of(cpu), _bound_of(ram), _bound_of(storage))


def _bound(obj: fields.Obj, key: str, path: str) -> Bound | None:
    text = fields.string(obj, key, path)
    try:
        return _bound_of(text)
    except ValueError as err:
        raise ValueError(f"{fields.at(path, key)}: {err}") from None


def _unit_spec(spec: fields.Obj) -> UnitSpec:
    units = spec.get("unitResources", {})
    if type(units) is dict:
        texts = (
            spec.get("displayName", ""),
            spec.get("description", ""),
            units.get("cpu", ""),
            units.get("ram", ""),
            spec.get("localStorage", ""),
        )
        if all(type(text) is str for text in texts):
            with contextlib.suppress(ValueError):  # the typed reads below name the field
                return _unit_of(*texts)
    units = fields.child(spec, "unitResources", "spec")
    return UnitSpec(
        fields.string(spec, "displayName", "spec"),
        fields.string(spec, "description", "spec"),
        _bound(units, "cpu", "spec.unitResources"),
        _bound(units, "ram", "spec.unitResources"),
        _bound(spec, "localStorage", "spec"),
    )


Quota = tuple[tuple[str, Fraction | int], ...]
TypeParts = tuple[PoolIdentity, UnitSpec, str, AcceleratorViews, View]
Version = tuple[str, str, str | int]
"""(member, uid, version): one object's content for good, in one member."""
KEPT = 4096
"""Objects whose reading is remembered, per kind: a fleet's pools times its members, with room."""


class Remembered(Generic[T]):
    """What a pure read made of an object, by the version that names the object's content.

    Every pass lists every Active member's every InstanceType and pool queue, but between two
    passes few of them change: a watch-woken pass follows one change. The API server moves an
    object's `resourceVersion` on every write to it, and its `generation` on every write to its
    spec (these kinds have a status subresource), and a uid is one object's for good, so the
    answer for a version is the answer a fresh read would give. An object without a uid or
    version (a hand-written one) is read every time; a read that fails is not remembered."""

    def __init__(self, version: str, make: Callable[[fields.Obj], T], kept: int = KEPT) -> None:
        self.version = version
        """The metadata field that names the content: `resourceVersion` or `generation`."""
        self.make = make
        self.kept = kept
        self._answers: dict[tuple[str, str], tuple[str | int, T]] = {}
        """(member, uid) -> (version, answer): one entry per object, its latest version only,
        so a busy object does not fill the room; a deleted one waits to be pushed out."""
        self._lock = threading.Lock()  # members are read on threads side by side

    def read(self, member: str, obj: fields.Obj) -> T:
        version = _version(member, obj, self.version)
        if version is not None:
            with self._lock:
                known = self._answers.get(version[:2])
            if known is not None and known[0] == version[2]:
                return known[1]
        answer = self.make(obj)
        if version is not None:
            with self._lock:
                self._answers.pop(version[:2], None)
                if len(self._answers) >= self.kept:
                    del self._answers[next(iter(self._answers))]  # the longest unchanged
                self._answers[version[:2]] = (version[2], answer)
        return answer

    def reader(self, member: str) -> Callable[[fields.Obj], T]:
        return functools.partial(self.read, member)

    def forget(self) -> None:
        with self._lock:
            self._answers.clear()


def _version(member: str, obj: fields.Obj, key: str) -> Version | None:
    meta = obj.get("metadata")
    if type(meta) is not dict:
        return None
    uid, version = meta.get("uid"), meta.get(key)
    if type(uid) is not str or not uid:
        return None
    if type(version) is int or (type(version) is str and version):
        return member, uid, version
    return None


def _queue_quota(queue: fields.Obj) -> Quota:
    """Nominal quota per resource over every flavor of every group, as Kueue counts a queue's
    quota."""
    fast = _fast_quota(queue)
    if fast is not None:
        return fast
    totals: dict[str, Fraction | int] = {}
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
                totals[name] = totals.get(name, 0) + amount
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
    fast = _fast_views(status)
    if fast is not None:
        return (phase, *fast)
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
        # The usual object in a few lookups; anything unusual takes the checks that name it.
        meta = obj.get("metadata") if type(obj) is dict else None
        name = meta.get("name") if type(meta) is dict else None
        if (
            type(name) is str
            and name
            and name not in found
            and obj.get("apiVersion") == kind[0]
            and obj.get("kind") == kind[1]
        ):
            try:
                found[name] = read(obj)
            except ValueError as err:
                raise _fail(member, f"{plural}/{name}", err) from None
            continue
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


def _type_parts(obj: fields.Obj) -> TypeParts:
    spec = fields.child(obj, "spec", "")
    return (PoolIdentity.of_spec(spec, "spec"), _unit_spec(spec), *_status(obj))


_quotas: Remembered[Quota] = Remembered("generation", _queue_quota)
"""By `generation`: a pool's queue names every flavor of the pool, dozens at a thousand nodes,
and its spec changes only when the pool's flavors do."""
_types: Remembered[TypeParts] = Remembered("resourceVersion", _type_parts)
"""By `resourceVersion`: an InstanceType's status is rewritten whenever its views move."""


def forget_read() -> None:
    """Read every object again, as a pass after the gateway starts does (the benchmark's)."""
    _quotas.forget()
    _types.forget()


def read_pools(
    member: str, instance_types: Iterable[fields.Obj], queues: Iterable[fields.Obj]
) -> tuple[MemberPool, ...]:
    """A member's pools, by name, from its InstanceTypes and ClusterQueues (the queues of other
    names are not read: only a pool's own queue holds its quota)."""
    quotas = _by_name(
        member, "clusterqueues", (KUEUE_API, CLUSTER_QUEUE), queues, _quotas.reader(member)
    )
    types = _by_name(
        member,
        "instancetypes",
        (WORKER_API, INSTANCE_TYPE),
        instance_types,
        _types.reader(member),
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
