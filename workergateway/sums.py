"""The fleet's views: one per pool name, summed over the Active members that have the pool
(docs/fleet.md, "How the views sum").

Pool names come from hardware identity (docs/design/control-plane.md, "InstanceType"), so the
same cards have the same pool name in every member, and the name alone joins them. The rules,
and why each:

- Only a member whose `MultiKueueCluster` is `Active` counts: MultiKueue dispatches nowhere
  else, so an inactive member's cards are not the fleet's, however recent its last view.
- A pool is in the fleet while at least one Active member has it. Its members (the
  MultiKueueConfig's `clusters`) are exactly the Active members that have it, counted or not.
- Of those, only a pool whose member-side phase is `Active` adds to the sums: a Held, Pending or
  draining queue admits nothing, and a Workload dispatched there would only wait.
- `remaining` and `capacity` add: they are amounts over many cards, and the fleet holds all of
  them.
- `onceMaxRequest` is the largest of the members', never a sum: one request lands in one
  member, then on one node (EX, SH, CPU) or one card (SL); two members' halves do not make one
  placement. PT's is 1 while any member can host an instance, so the largest again.
- `remainingProfiles` and `allocatedProfiles` add per profile name (the published names are the
  same in every member); every offered profile stays listed, at 0 too, as each member lists it.
- Quota (credits or CPU, as each member's ClusterQueue counts it) adds: the manager's queue may
  admit what the members together could.
- Members that disagree on the pool's identity (card group, CPU group, os, arch, acceleratable)
  make the pool a conflict naming both, and it does not sum: one name must mean one kind of
  hardware, or a request admitted on the manager could land on cards it did not ask for. The
  other pools are not held up by it. On the unit's resources (`cpu`, `ram`,
  `localStorage`) the smallest wins: the manager's webhooks default and bound a request by the
  fleet type, and the smallest is the one every member accepts. `displayName` and `description`
  are the first member's by name: words only, and a fixed order keeps them from flapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from chain.fleet_pools import fleet_pool_object
from chain.ledger import ProfileCount
from chain.quantity import format_quantity
from chain.views import AcceleratorViews, Amount, PartitionView, View, shown_views
from workergateway.members import MemberPool, MemberState

Obj = dict[str, object]


class PoolConflict(ValueError):
    """Two Active members call different hardware by one pool name."""

    def __init__(
        self, pool: str, field: str, first: tuple[str, object], second: tuple[str, object]
    ) -> None:
        super().__init__(
            f"pool {pool}: members disagree on spec.{field}: "
            f"{first[0]} says {first[1]!r}, {second[0]} says {second[1]!r}"
        )
        self.pool = pool
        self.field = field
        self.members = (first[0], second[0])


def _plain(value: Fraction | int) -> Amount:
    if type(value) is int:
        return value  # the common case: whole amounts stay ints, no Fraction made
    value = Fraction(value)
    return value.numerator if value.denominator == 1 else value


def sum_views(views: Iterable[View]) -> View:
    """`remaining` and `capacity` add; `onceMaxRequest` is the largest (one request, one
    member). Whole amounts add as ints, and a fraction among them makes the sum exact."""
    once: Amount = 0
    remaining: Amount = 0
    capacity: Amount = 0
    for view in views:
        once = max(once, view.once_max_request)
        remaining += view.remaining
        capacity += view.capacity
    return View(_plain(once), _plain(remaining), _plain(capacity))


def _sum_counts(
    lists: Iterable[Sequence[ProfileCount]], keep_zero: bool
) -> tuple[ProfileCount, ...]:
    totals: dict[str, int] = {}
    for counts in lists:
        for entry in counts:
            totals[entry.name] = totals.get(entry.name, 0) + entry.count
    return tuple(ProfileCount(name, count) for name, count in totals.items() if keep_zero or count)


def sum_partitions(views: Sequence[PartitionView]) -> PartitionView:
    """PT: the view sums like the others; the profile counts add by name, in first-seen order
    (members by name), offered profiles kept at 0, bound ones only above 0."""
    return PartitionView(
        sum_views(view.view for view in views),
        _sum_counts((view.allocated_profiles for view in views), keep_zero=False),
        _sum_counts((view.remaining_profiles for view in views), keep_zero=True),
    )


def sum_accelerators(views: Sequence[AcceleratorViews]) -> AcceleratorViews:
    return AcceleratorViews(
        sum_views(view.exclusive for view in views),
        sum_views(view.shared for view in views),
        sum_views(view.sliced for view in views),
        sum_partitions([view.partitioned for view in views]),
    )


def _render_quota(quota: Iterable[tuple[str, Fraction | int]]) -> list[Obj]:
    return [
        {"name": name, "nominalQuota": format_quantity(_plain(amount))} for name, amount in quota
    ]


def sum_quota(
    pools: Sequence[MemberPool], counted: Iterable[MemberPool]
) -> tuple[tuple[str, Fraction | int], ...]:
    """Nominal quota per resource, added over the `counted` pools. Every resource any member's
    queue names is listed, at 0 when no counted pool has it: the manager's queue keeps covering
    its resource while nothing counts, so it admits nothing rather than losing its shape."""
    totals: dict[str, Fraction | int] = {name: 0 for pool in pools for name, _ in pool.quota}
    for pool in counted:
        for name, amount in pool.quota:
            totals[name] += amount
    return tuple(totals.items())


_IDENTITY = (
    ("acceleratable", "acceleratable"),
    ("acceleratorGroup", "accelerator_group"),
    ("generalGroup", "general_group"),
    ("os", "os"),
    ("arch", "arch"),
)


def _spec(name: str, pools: Sequence[MemberPool]) -> Obj:
    """The fleet type's spec: the identity every member agrees on, the smallest unit, the first
    member's words. `inactive` is not copied: the fleet type's is the manager's own."""
    first = pools[0]
    spec: Obj = {}
    for key, attribute in _IDENTITY:
        value = getattr(first.identity, attribute)
        for other in pools[1:]:
            theirs = getattr(other.identity, attribute)
            if theirs != value:
                raise PoolConflict(name, key, (first.member, value), (other.member, theirs))
        # A CPU pool has no card group: the key is left out, as its InstanceType leaves it.
        if value != "":
            spec[key] = value
    if first.unit.display_name:
        spec["displayName"] = first.unit.display_name
    if first.unit.description:
        spec["description"] = first.unit.description

    def smallest(attribute: str) -> str:
        """The smallest of the members' bounds, as its member wrote it; "" when none names one."""
        bounds = [bound for pool in pools if (bound := getattr(pool.unit, attribute)) is not None]
        return min(bounds, key=lambda bound: bound.value).text if bounds else ""

    units = {key: value for key in ("cpu", "ram") if (value := smallest(key))}
    if units:
        spec["unitResources"] = units
    if storage := smallest("local_storage"):
        spec["localStorage"] = storage
    return spec


def _render_member(pool: MemberPool) -> Obj:
    return {
        "name": pool.member,
        "phase": pool.phase,
        "counted": pool.counted,
        **pool.views.render(),
        "cpu": pool.cpu.render(),
        "quota": _render_quota(pool.quota),
    }


@dataclass(frozen=True)
class FleetPool:
    """One pool of the fleet: what the manager's objects for it are made from."""

    name: str
    spec: Obj
    members: tuple[str, ...]
    """The Active members that have the pool, by name: the MultiKueueConfig's `clusters`."""
    views: AcceleratorViews
    cpu: View
    quota: tuple[tuple[str, Fraction | int], ...]
    breakdown: tuple[MemberPool, ...]

    def member_summary(self) -> str:
        """The MEMBERS printer column: the members that count now, of those that have the pool
        (`2/3 east,west`), so a member whose queue does not admit shows as the difference."""
        counted = [pool.member for pool in self.breakdown if pool.counted]
        return f"{len(counted)}/{len(self.members)} {','.join(counted)}".rstrip()

    def render(self) -> Obj:
        """The `FleetPool`'s spec (`chain.fleet_pools`, whose reader the fleet hooks use)."""
        return {
            "instanceType": self.spec,
            "members": list(self.members),
            "quota": _render_quota(self.quota),
            **shown_views(self.views, self.cpu),
            "memberSummary": self.member_summary(),
            "memberViews": [_render_member(pool) for pool in self.breakdown],
        }

    def object(self) -> Obj:
        """The `FleetPool` object the gateway applies on the manager, named after the pool."""
        return fleet_pool_object(self.name, self.render())


@dataclass(frozen=True)
class Fleet:
    """One pass's answer: the pools that sum, and the pools whose members disagree (each left
    out of `pools`, so the gateway keeps what it last wrote for it and says why)."""

    pools: dict[str, FleetPool]
    conflicts: tuple[PoolConflict, ...] = ()


def fleet_pools(members: Iterable[tuple[MemberState, Sequence[MemberPool]]]) -> Fleet:
    """The fleet's pools by name, from each member's state and pools (`members.read_member`).

    Inactive members are left out whole. Members are taken by name, so the answer does not
    depend on the order the watches delivered them in. A pool whose members disagree on its
    identity is a conflict of that pool alone: the other pools still sum."""
    by_pool: dict[str, list[MemberPool]] = {}
    seen: set[str] = set()
    for state, pools in sorted(members, key=lambda member: member[0].name):
        if state.name in seen:
            raise ValueError(f"member {state.name}: listed twice")
        seen.add(state.name)
        if not state.active:
            continue
        for pool in pools:
            by_pool.setdefault(pool.name, []).append(pool)
    fleet: dict[str, FleetPool] = {}
    conflicts: list[PoolConflict] = []
    for name in sorted(by_pool):
        pools = by_pool[name]
        try:
            spec = _spec(name, pools)
        except PoolConflict as conflict:
            conflicts.append(conflict)
            continue
        counted = [pool for pool in pools if pool.counted]
        fleet[name] = FleetPool(
            name=name,
            spec=spec,
            members=tuple(pool.member for pool in pools),
            views=sum_accelerators([pool.views for pool in counted]),
            cpu=sum_views(pool.cpu for pool in counted),
            quota=sum_quota(pools, counted),
            breakdown=tuple(pools),
        )
    return Fleet(fleet, tuple(conflicts))
