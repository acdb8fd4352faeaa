"""The InstanceType views: what a pool can still take, per request family
(docs/design/control-plane.md, "The four views").

Each card feeds exactly one family group by what it can do, never by its ledger alone:
partitioned cards only PT, every other card EX and SH, and logically sliceable ones SL too. A
view is `{onceMaxRequest, remaining, capacity}`; `onceMaxRequest` is the largest request one
placement can take, so it follows the unit one request is bound to:

- EX: a request of N whole cards lands on one node, so the node with the most free cards.
- SH: a shared request of N names N distinct cards on one node, and spare shares on one card do not
  add up, so the node with the most cards that still have a free share
  (docs/design/control-plane.md, "Shared onceMaxRequest").
- SL: a slice sits on one card, so the freest card.
- PT: a partition request is exactly one instance, so 1 while any card can host one.

CPU: the pool queue's `cpu` quota less what Kueue has reserved; one request lands on one node,
so the largest node (its cores are in the flavor name), but never more than what is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from chain import fields
from chain.ledger import Mode, ProfileCount
from chain.partitions import publish_profile_name
from chain.pool_nodes import PoolCard, PoolNode
from chain.quantity import format_quantity, parse_quantity
from chain.units import RESOURCE_MAX_UNITS, SHARED_MAX_OWNERS, units_to_percent, units_to_shares

Obj = dict[str, object]

PERCENT_PER_CARD = 100
Amount = int | Fraction
_VIEW_KEYS = ("onceMaxRequest", "remaining", "capacity")
_EXCLUSIVE, _SHARED = "accelerator", "acceleratorShared"
_SLICED, _PARTITIONED = "acceleratorSliced", "acceleratorPartitioned"


def _amount(obj: fields.Obj, key: str, path: str) -> Amount:
    raw = obj.get(key)
    where = fields.at(path, key)
    if not isinstance(raw, str | int) or isinstance(raw, bool):
        raise ValueError(f"{where}: expected a quantity, got {raw!r}")
    try:
        value = parse_quantity(str(raw))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    if value < 0:
        raise ValueError(f"{where}: expected a non-negative quantity, got {raw!r}")
    return _plain(value)


@dataclass(frozen=True)
class View:
    once_max_request: Amount = 0
    remaining: Amount = 0
    capacity: Amount = 0

    def render(self) -> Obj:
        return {
            "onceMaxRequest": format_quantity(self.once_max_request),
            "remaining": format_quantity(self.remaining),
            "capacity": format_quantity(self.capacity),
        }

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> View:
        """A rendered view back: three non-negative quantities (a ValueError names the field)."""
        return cls(*(_amount(obj, key, path) for key in _VIEW_KEYS))

    def summary(self) -> str:
        """The printer column's `onceMaxRequest/remaining`."""
        return f"{format_quantity(self.once_max_request)}/{format_quantity(self.remaining)}"


@dataclass(frozen=True)
class PartitionView:
    view: View = View()
    allocated_profiles: tuple[ProfileCount, ...] = ()
    """Bound instances by profile; profiles with none are left out."""
    remaining_profiles: tuple[ProfileCount, ...] = ()
    """Instances still creatable by profile; every offered profile is listed, even at 0, so
    "offered but full" reads differently from "not offered"."""

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> PartitionView:
        def counts(key: str) -> tuple[ProfileCount, ...]:
            return tuple(ProfileCount.parse(item, at) for item, at in fields.items(obj, key, path))

        return cls(View.parse(obj, path), counts("allocatedProfiles"), counts("remainingProfiles"))

    def render(self) -> Obj:
        return {
            **self.view.render(),
            "allocatedProfiles": [entry.render() for entry in self.allocated_profiles],
            "remainingProfiles": [entry.render() for entry in self.remaining_profiles],
        }


@dataclass(frozen=True)
class AcceleratorViews:
    exclusive: View = View()
    shared: View = View()
    sliced: View = View()
    partitioned: PartitionView = field(default_factory=PartitionView)

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> AcceleratorViews:
        """The four rendered views back (the keys `render` writes)."""

        def part(key: str) -> fields.Obj:
            return fields.child(obj, key, path, required=True)

        return cls(
            View.parse(part(_EXCLUSIVE), fields.at(path, _EXCLUSIVE)),
            View.parse(part(_SHARED), fields.at(path, _SHARED)),
            View.parse(part(_SLICED), fields.at(path, _SLICED)),
            PartitionView.parse(part(_PARTITIONED), fields.at(path, _PARTITIONED)),
        )

    def render(self) -> Obj:
        return {
            "accelerator": self.exclusive.render(),
            "acceleratorShared": self.shared.render(),
            "acceleratorSliced": self.sliced.render(),
            "acceleratorPartitioned": self.partitioned.render(),
        }

    def summary(self) -> str:
        """`Accelerator(EX/SH/SL/PT)`: four `onceMaxRequest/remaining` groups."""
        views = (self.exclusive, self.shared, self.sliced, self.partitioned.view)
        return " ".join(view.summary() for view in views)

    def partition_summary(self) -> str:
        """The `-o wide` Partitions column: `<profile>=<remaining>` for every offered profile."""
        return ",".join(
            f"{entry.name}={entry.count}" for entry in self.partitioned.remaining_profiles
        )


class _Counts(dict[str, int]):
    """Counts by profile name, in first-seen order."""

    def add(self, name: str, count: int) -> None:
        self[name] = self.get(name, 0) + count

    def entries(self, keep_zero: bool) -> tuple[ProfileCount, ...]:
        return tuple(ProfileCount(n, c) for n, c in self.items() if keep_zero or c)


@dataclass
class _Tally:
    once: int = 0
    remaining: int = 0
    capacity: int = 0

    def view(self) -> View:
        return View(self.once, self.remaining, self.capacity)


@dataclass
class _Partitions:
    tally: _Tally = field(default_factory=_Tally)
    allocated: _Counts = field(default_factory=_Counts)
    offered: _Counts = field(default_factory=_Counts)

    def add(self, card: PoolCard, manufacturer: str) -> None:
        """One partitioned card: the ledger's counts when it has them, else the catalog's
        ceilings (a card is never read as full for a missing row)."""
        physical = card.capability.physical_sliced
        self.tally.capacity += physical.count
        row = card.row if card.ledger_ready else None
        if row is not None:
            left = max((entry.count for entry in row.remaining_profiles), default=0)
            for entry in row.allocated_profiles:
                self.allocated.add(publish_profile_name(manufacturer, entry.name), entry.count)
        else:
            left = physical.count
        for profile in physical.profiles:
            count = profile.count if row is None else row.remaining_of(profile.name)
            self.offered.add(publish_profile_name(manufacturer, profile.name), count)
        self.tally.remaining += left
        if left > 0:
            self.tally.once = 1

    def view(self) -> PartitionView:
        return PartitionView(
            self.tally.view(),
            self.allocated.entries(keep_zero=False),
            self.offered.entries(keep_zero=True),
        )


def accelerator_views(nodes: Iterable[PoolNode]) -> AcceleratorViews:
    """The four views over the pool's nodes (only the pool's card group on each)."""
    exclusive, shared, sliced = _Tally(), _Tally(), _Tally()
    partitions = _Partitions()
    for node in nodes:
        free_cards = cards_with_share = 0
        for card in node.cards:
            if card.partitioned:
                partitions.add(card, node.manufacturer)
                continue
            units, mode = card.remaining, card.mode
            free = units >= RESOURCE_MAX_UNITS
            exclusive.capacity += 1
            shared.capacity += SHARED_MAX_OWNERS
            if free:
                exclusive.remaining += 1
                free_cards += 1
            if free or mode == Mode.SHARED:
                shares = units_to_shares(units)
                shared.remaining += shares
                if shares:
                    cards_with_share += 1
            if card.logically_sliceable:
                sliced.capacity += PERCENT_PER_CARD
                if free or mode == Mode.SLICED:
                    percent = units_to_percent(units)
                    sliced.remaining += percent
                    sliced.once = max(sliced.once, percent)
        exclusive.once = max(exclusive.once, free_cards)
        shared.once = max(shared.once, cards_with_share)
    return AcceleratorViews(exclusive.view(), shared.view(), sliced.view(), partitions.view())


def free_whole_cards(node: PoolNode) -> int:
    """Cards of the node that take a whole-card request: not partitioned, nothing taken (the
    EX view's count on one node)."""
    return sum(
        1 for card in node.cards if not card.partitioned and card.remaining >= RESOURCE_MAX_UNITS
    )


def shown_views(views: AcceleratorViews, cpu: View) -> Obj:
    """The five views and the three printer columns' summaries, as an InstanceType's status
    shows them (and a FleetPool's spec, which a fleet InstanceType's status copies)."""
    return {
        **views.render(),
        "cpu": cpu.render(),
        "acceleratorSummary": views.summary(),
        "cpuSummary": cpu.summary(),
        "partitionSummary": views.partition_summary(),
    }


def cpu_view(capacity: Fraction, reserved: Fraction, node_cores: Sequence[int]) -> View:
    """`capacity` cores of quota, `reserved` of them held by workloads, nodes of `node_cores`."""
    remaining = max(Fraction(0), capacity - reserved)
    largest = Fraction(max(node_cores, default=0))
    return View(_plain(min(largest, remaining)), _plain(remaining), _plain(capacity))


def _plain(value: Fraction) -> Amount:
    return value.numerator if value.denominator == 1 else value
