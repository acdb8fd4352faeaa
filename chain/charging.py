"""Charging a Workload's demands to concrete cards of its pool: the cards a flavor's nodes carry
(`Card`, with the budget a verdict has charged), and per family whether a demand still finds
room (`first_miss`; logical slices placed together by `unplaced_slice`)."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from chain import fields
from chain.accelerators import Accelerator
from chain.devices import Devices
from chain.families import Family
from chain.fit import free_shares, free_slice_units, free_slots, remaining
from chain.labels import (
    COUNT_SUFFIX,
    accelerator_feature_key,
    accelerator_keys_of,
    count_key,
)
from chain.ledger import AcceleratorAllocation, Mode
from chain.manufacturers import ManufacturerTable
from chain.partitions import vendor_profile_name
from chain.requests import INT32_MAX
from chain.units import RESOURCE_MAX_UNITS
from chain.workload_state import Share

# --- demands --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    family: Family
    cards: int
    """Cards to find (partition instances for a partition, slices for a slice)."""
    units_per_card: int = 0
    profile: str = ""
    flavor: str = ""
    node: str = ""
    """Hostname the demand is pinned to; "" = anywhere in the flavor's pool."""
    manufacturer: str = ""
    holders: tuple[tuple[int, int], ...] = ()
    """Shared: (cards one container holds, how many such containers)."""
    roles: tuple[str, ...] = ()


def demands(shares: Iterable[Share]) -> list[Demand]:
    """Scale per-Pod demands by Pods, merge equal ones, order as the fit takes them."""
    merged: dict[tuple[Family, int, str, str, str], Demand] = {}
    for share in shares:
        for pod in share.per_pod:
            cards = min(pod.cards * share.pods, INT32_MAX)
            if cards <= 0:
                continue
            holders = Counter({size: share.pods for size in pod.holders})
            key = (pod.family, pod.units_per_card, pod.profile, share.flavor, share.node)
            seen = merged.get(key)
            if seen is not None:
                cards = min(cards + seen.cards, INT32_MAX)
                holders.update(dict(seen.holders))
            roles = (*seen.roles, share.role) if seen else (share.role,)
            merged[key] = Demand(
                pod.family,
                cards,
                pod.units_per_card,
                pod.profile,
                share.flavor,
                share.node,
                pod.manufacturer,
                tuple(sorted(holders.items(), reverse=True)),
                tuple(dict.fromkeys(roles)),
            )
    return sorted(
        merged.values(),
        key=lambda d: (d.family != Family.PARTITIONED, -d.units_per_card, d.family, d.node),
    )


# --- the pool ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What a flavor pins on its nodes: one card model and, if set, the node's card count."""

    flavor: str
    akey: str
    """"" when the flavor pins no single accelerator key."""
    count: int
    """Cards of the model per node: 0 any, -1 none (the label is broken)."""
    selector: Mapping[str, str]
    """The flavor's nodeLabels without the `.count` keys (Devices carry no counts)."""

    def covers(self, akey: str, cards: int) -> bool:
        return bool(self.akey) and self.akey == akey and self.count in (0, cards)


def flavor_scope(flavor: fields.Obj | None, name: str, table: ManufacturerTable) -> Scope | None:
    """The scope of a ResourceFlavor; None when it is gone or selects no nodes."""
    if flavor is None:
        return None
    labels = fields.child(fields.child(flavor, "spec", ""), "nodeLabels", "spec")
    if not labels:
        return None
    text = {key: str(value) for key, value in labels.items()}
    keys = accelerator_keys_of(text, table)
    akey = keys[0] if len(keys) == 1 else ""
    count = 0
    raw = text.get(count_key(accelerator_feature_key(akey))) if akey else None
    if raw is not None:
        count = int(raw) if raw.isdigit() and int(raw) > 0 else -1
    selector = {k: v for k, v in text.items() if not k.endswith(COUNT_SUFFIX)}
    return Scope(name, akey, count, selector)


@dataclass(eq=False)
class Card:
    """One card of the candidate pool with the budget this verdict has charged to it."""

    hostname: str
    manufacturer: str
    accelerator: Accelerator
    row: AcceleratorAllocation | None
    flavors: frozenset[str]
    whole: int = 0
    shares: int = 0
    units: int = 0
    slices: int = 0
    placements: int = 0

    @property
    def untouched(self) -> bool:
        return not (self.whole or self.shares or self.units or self.slices or self.placements)

    @property
    def mode(self) -> Mode:
        return Mode.NONE if self.row is None else self.row.mode

    def covers(self, demand: Demand) -> bool:
        return demand.flavor in self.flavors and demand.node in ("", self.hostname)


@dataclass
class NodeCards:
    devices: Devices
    hostname: str
    scopes: list[Scope] = field(default_factory=list)


def candidate_cards(nodes: Mapping[str, NodeCards]) -> list[Card]:
    cards = []
    for name in sorted(nodes):
        node = nodes[name]
        for group in node.devices.spec.groups:
            size = len(group.accelerators)
            flavors = frozenset(
                s.flavor for s in node.scopes if s.covers(group.accelerator_key, size)
            )
            if not flavors:
                continue
            for card in group.accelerators:
                row = node.devices.status.row(group.manufacturer, group.id, card.id)
                cards.append(Card(node.hostname, group.manufacturer, card, row, flavors))
    return cards


# --- room for a demand ----------------------------------------------------------------------


class Miss(enum.Enum):
    CARDS = enum.auto()
    NOT_PARTITIONED = enum.auto()
    LEDGER_NOT_READY = enum.auto()
    PROFILE_FULL = enum.auto()


def _exclusive(cards: Sequence[Card], demand: Demand) -> Miss | None:
    free = [
        c
        for c in cards
        if c.untouched
        and c.covers(demand)
        and not c.accelerator.is_partitioned
        and remaining(c.row) >= RESOURCE_MAX_UNITS
    ]
    for card in free[: demand.cards]:
        card.whole += 1
    return None if len(free) >= demand.cards else Miss.CARDS


def _shares_left(card: Card) -> int:
    return free_shares(card.accelerator, card.row) - card.shares


def _shared(cards: Sequence[Card], demand: Demand) -> Miss | None:
    missed = None
    for size, containers in demand.holders:
        for _ in range(containers):
            free = [
                c
                for c in cards
                if c.covers(demand) and not (c.whole or c.units or c.slices) and _shares_left(c) > 0
            ]
            by_host = Counter(c.hostname for c in free)
            best = min(by_host, key=lambda h: (-by_host[h], h), default=None)
            if best is None or by_host[best] < size:
                # Nothing frees up within one verdict: the rest of this size cannot fit either
                # (and a PodSet of a billion Pods must not cost a billion passes).
                missed = Miss.CARDS
                break
            on_host = sorted(
                (c for c in free if c.hostname == best), key=_shares_left, reverse=True
            )
            for card in on_host[:size]:
                card.shares += 1
    return missed


def _slice_room(card: Card, demand: Demand) -> int | None:
    if not (card.covers(demand) and card.accelerator.is_logically_sliceable):
        return None
    if card.mode not in (Mode.NONE, Mode.SLICED) or card.whole or card.shares:
        return None
    if card.slices >= free_slots(card.accelerator, card.row):
        return None
    room = free_slice_units(card.accelerator, card.row) - card.units
    return room if room >= demand.units_per_card else None


def _sliced(cards: Sequence[Card], demand: Demand) -> Miss | None:
    for _ in range(demand.cards):
        best: Card | None = None
        best_room = 0
        for card in cards:
            room = _slice_room(card, demand)
            if room is not None and (best is None or room < best_room):
                best, best_room = card, room
        if best is None:
            return Miss.CARDS
        best.units += demand.units_per_card
        best.slices += 1
    return None


def _partitioned(cards: Sequence[Card], demand: Demand) -> Miss | None:
    hosts = [
        c
        for c in cards
        if c.covers(demand)
        and c.accelerator.is_partitioned
        and c.mode in (Mode.NONE, Mode.PARTITIONED)
    ]
    if not hosts:
        return Miss.NOT_PARTITIONED
    ready = [(c, c.row) for c in hosts if c.row is not None and c.row.partition_ledger_ready]
    if not ready:
        return Miss.LEDGER_NOT_READY
    needed = demand.cards
    # The ledger counts instances under the driver's spelling of the profile.
    profile = vendor_profile_name(demand.manufacturer, demand.profile)
    for card, row in ready:
        take = min(row.remaining_of(profile) - card.placements, needed)
        if take > 0:
            card.placements += take
            needed -= take
    return Miss.PROFILE_FULL if needed > 0 else None


_FITS = {
    Family.EXCLUSIVE: _exclusive,
    Family.SHARED: _shared,
    Family.SLICED: _sliced,
    Family.PARTITIONED: _partitioned,
}


def first_miss(cards: Sequence[Card], demand: Demand) -> Miss | None:
    """Charge `demand` to `cards`; what was missing, or None when it all fits."""
    return _FITS[demand.family](cards, demand)


# Slices of different sizes compete for the same cards' room and slots, and no greedy order is
# optimal then (one node, card A with 20 % and two free slots, card B with 30 % and one: a 20 %
# slice best-fitted onto A leaves no card for two 10 % ones; on B it leaves A for both). The
# slices of one verdict are therefore placed together by an exhaustive search, best fit first so
# that its first answer is the greedy one whenever that fits, cut short where it cannot matter:
# cards whose room, free slots, flavors (and host, if a demand pins one) are equal are
# interchangeable, so only one of them is tried. Past these bounds (never reached by a realistic
# Workload) the greedy answer stands, which can only err towards Retry.
EXACT_SLICES = 64
EXACT_STEPS = 20_000


def unplaced_slice(cards: Sequence[Card], demands: Sequence[Demand]) -> Demand | None:
    """Charge every sliced `demand` to `cards` together; the demand to name when they do not
    all fit (None when they do)."""
    items = [d for d in sorted(demands, key=lambda d: -d.units_per_card) for _ in range(d.cards)]
    if len(items) <= EXACT_SLICES:
        before = [(card.units, card.slices) for card in cards]
        if _place_slices(cards, items, any(d.node for d in demands)):
            return None
        for card, (units, taken) in zip(cards, before, strict=True):
            card.units, card.slices = units, taken
    return next((d for d in demands if _sliced(cards, d) is not None), None)


def _place_slices(cards: Sequence[Card], items: Sequence[Demand], pinned: bool) -> bool:
    steps = 0

    def place(index: int) -> bool:
        nonlocal steps
        if index == len(items):
            return True
        steps += 1
        if steps > EXACT_STEPS:
            return False
        demand = items[index]
        options: dict[tuple[object, ...], tuple[int, Card]] = {}
        for card in cards:
            room = _slice_room(card, demand)
            if room is None:
                continue
            slots = free_slots(card.accelerator, card.row) - card.slices
            alike = (room, slots, card.flavors, card.hostname if pinned else "")
            options.setdefault(alike, (room, card))
        for _, card in sorted(options.values(), key=lambda option: option[0]):
            card.units += demand.units_per_card
            card.slices += 1
            if place(index + 1):
                return True
            card.units -= demand.units_per_card
            card.slices -= 1
        return False

    return place(0)
