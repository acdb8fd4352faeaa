"""Partitioned grants (docs/design/node-agent.md, "Allocate", steps 2.4-2.8): which profile, which
card, which slot.

A partitioned token (`<group>:<card>:<index>`) is a place in a node-wide count, not a card:
kubelet picks tokens without knowing which card can still host the profile, so the plugin
chooses the card itself. The container names its profile through the counting key
`<base>.partitioned.<kind>-<profile>`; the partition goes where a prior grant of the same
container put it (a retry must land on the instance it already made), else onto the most
occupied card that still has a legal slot overlapping no partition already placed (packing
keeps whole cards free for large profiles). The grant's record carries the profile and the slot
so the ledger's physical fold (`chain.ledger_rebuild`) counts it.

ListAndWatch advertises every partitioned token but marks only `room` of them healthy:
what the cards hold plus the most instances of any one profile that still fit, so kubelet's
free count tracks what can really be created.

Judgment calls:
- One partition per request: a container asking for several tokens is refused
  (FailedPrecondition); several profiles per container are refused the same way.
- "Most occupied" counts occupied memory slices; ties go to the card first in spec order; on a
  card the lowest free legal slot is taken.
- Unhealthy cards are never chosen. A card held in another mode may be chosen by packing and is
  then refused by the cross-mode check, as upstream orders the steps.
- The healthy fill takes the remaining tokens in spec order, whichever card they name (the
  token's card does not decide where the partition goes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from chain.accelerators import Accelerator, PartitionProfile
from chain.allocation import (
    Code,
    DeviceToken,
    Refusal,
    card_tokens,
    conflicting_mode,
    grant_units,
    units_per_token,
)
from chain.devices import DevicesGroup, DevicesSpec
from chain.families import PARTITIONED
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import AllocationRecord, CardRef, Claim, Holder
from chain.manufacturers import Manufacturer
from chain.partitions import Placement
from chain.units import memory_mib_to_units


def requested_profiles(maker: Manufacturer, limit_keys: Iterable[str]) -> list[str]:
    """The published profiles a container's positive limits name (`...partitioned.mig-1g.5gb`
    -> `1g.5gb`)."""
    if not maker.partition_kind:
        return []
    stem = f"{maker.resource_name}{PARTITIONED}.{maker.partition_kind}-"
    return sorted({key[len(stem) :] for key in limit_keys if key.startswith(stem)} - {""})


def requested_profile(maker: Manufacturer, limit_keys: Iterable[str]) -> str:
    """The one profile a partitioned container asks for, or a FailedPrecondition refusal."""
    found = requested_profiles(maker, limit_keys)
    if not found:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"the container names no {maker.resource_name}{PARTITIONED}."
            f"{maker.partition_kind}-<profile> limit",
        )
    if len(found) > 1:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"the container asks for {len(found)} partition profiles ({', '.join(found)})",
        )
    return found[0]


def occupied_placements(
    holdings: Mapping[Holder, AllocationRecord], manufacturer: str
) -> dict[CardRef, list[Placement]]:
    """Slots taken per card by every charging record (annotations and reservations)."""
    occupied: dict[CardRef, list[Placement]] = {}
    for record in holdings.values():
        for claim in record.claims():
            if claim.manufacturer == manufacturer and claim.row.allocated_physical_placements:
                occupied.setdefault(claim.ref, []).extend(claim.row.allocated_physical_placements)
    return occupied


def prior_partition(
    holder: Holder,
    reservations: Mapping[Holder, AllocationRecord],
    annotated: Mapping[str, AllocationRecord],
    manufacturer: str,
) -> Claim | None:
    """The partition this container already holds: this process's reservation, then its Pod's
    annotation."""
    for record in (reservations.get(holder), annotated.get(holder.container)):
        if record is None:
            continue
        for claim in record.claims():
            if claim.manufacturer == manufacturer and claim.holds_partition:
                return claim
    return None


@dataclass(frozen=True)
class PartitionSite:
    """Where one partition goes."""

    group: DevicesGroup
    card: Accelerator
    profile: PartitionProfile
    placement: Placement

    @property
    def ref(self) -> CardRef:
        return CardRef(self.group.manufacturer, self.card.id)


def _free_slots(profile: PartitionProfile, taken: Sequence[Placement]) -> list[Placement]:
    legal = sorted(profile.placements, key=lambda slot: (slot.start, slot.length))
    return [slot for slot in legal if not any(slot.overlaps(used) for used in taken)]


def choose_site(
    spec: DevicesSpec,
    manufacturer: str,
    profile: str,
    occupied: Mapping[CardRef, Sequence[Placement]],
    prior: Claim | None = None,
) -> PartitionSite:
    """The prior grant's card and slot, else the fullest healthy card with a free legal slot;
    ResourceExhausted when no card can host the profile."""
    if prior is not None and prior.row.allocated_physical_profile == profile:
        for group, card in spec.cards():
            offered = card.status.physical_sliced.profile(profile)
            if (
                group.manufacturer == manufacturer
                and card.id == prior.row.id
                and offered is not None
                and prior.row.allocated_physical_placements
            ):
                return PartitionSite(
                    group, card, offered, prior.row.allocated_physical_placements[0]
                )
    best: tuple[int, PartitionSite] | None = None
    for group, card in spec.cards():
        offered = card.status.physical_sliced.profile(profile)
        if group.manufacturer != manufacturer or offered is None or card.status.unhealthy:
            continue
        if not card.is_partitioned:
            continue
        taken = occupied.get(CardRef(manufacturer, card.id), ())
        slots = _free_slots(offered, taken)
        if not slots:
            continue
        fullness = sum(slot.length for slot in taken)
        if best is None or fullness > best[0]:
            best = (fullness, PartitionSite(group, card, offered, slots[0]))
    if best is None:
        raise Refusal(
            Code.RESOURCE_EXHAUSTED,
            f"no card on this node can host another instance of partition profile {profile}",
        )
    return best[1]


@dataclass(frozen=True)
class PartitionRequest:
    """One partitioned Allocate call, with what the identified container asks for."""

    manufacturer: str
    device_ids: tuple[str, ...]
    holder: Holder
    profile: str
    units_limit: int = 0
    """The container's `<base>.partitioned.units` limit (0: derive from the profile's memory)."""


@dataclass(frozen=True)
class PartitionGrant:
    record: AllocationRecord
    site: PartitionSite


def _check_tokens(spec: DevicesSpec, manufacturer: str, device_ids: Sequence[str]) -> None:
    try:
        tokens = [DeviceToken.parse(text) for text in device_ids]
    except ValueError as error:
        raise Refusal(Code.INVALID_ARGUMENT, str(error)) from None
    if len(tokens) != 1:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"a partitioned grant takes one partition, got {len(tokens)} device IDs",
        )
    group = spec.group(manufacturer, tokens[0].group)
    card = group.accelerator(tokens[0].card) if group is not None else None
    if card is None or not card.is_partitioned:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"card {tokens[0].card} of group {tokens[0].group} is no partitioned card here",
        )


def decide_partition(
    spec: DevicesSpec,
    status: DevicesStatus,
    reservations: Mapping[Holder, AllocationRecord],
    occupied: Mapping[CardRef, Sequence[Placement]],
    prior: Claim | None,
    request: PartitionRequest,
) -> PartitionGrant:
    """The record a partitioned grant writes and where its partition goes, or a `Refusal`."""
    _check_tokens(spec, request.manufacturer, request.device_ids)
    site = choose_site(spec, request.manufacturer, request.profile, occupied, prior)
    others = {h: r for h, r in reservations.items() if h != request.holder}
    conflict = conflicting_mode(site.ref, Mode.PARTITIONED, status, others.values())
    if conflict != Mode.NONE:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"card {site.card.id} is held in {conflict} mode, "
            f"cannot allocate it in {Mode.PARTITIONED} mode",
        )
    per_token = units_per_token(request.units_limit)
    if request.units_limit <= 0:
        per_token = memory_mib_to_units(site.profile.memory_mib, site.group.memory)
    row = AcceleratorAllocation(
        id=site.card.id,
        index=site.card.index,
        mode=Mode.PARTITIONED,
        allocated=grant_units(Mode.PARTITIONED, per_token, 1),
        allocated_physical_profile=site.profile.name,
        allocated_physical_placements=(site.placement,),
    )
    entry = DevicesAllocationGroup(site.group.id, site.group.manufacturer, (row,))
    devices = DevicesStatus((entry,))
    return PartitionGrant(AllocationRecord(devices, tuple(request.device_ids)), site)


def with_partition_id(record: AllocationRecord, partition_id: str) -> AllocationRecord:
    """The record with the created instance's id (the MIG UUID) on its partition claim."""
    groups = tuple(
        replace(
            entry,
            accelerators=tuple(
                replace(row, allocated_physical_id=partition_id)
                if row.allocated_physical_profile
                else row
                for row in entry.accelerators
            ),
        )
        for entry in record.devices.groups
    )
    return AllocationRecord(DevicesStatus(groups), record.device_ids)


# --- ListAndWatch -------------------------------------------------------------------------------


def partition_room(spec: DevicesSpec, manufacturer: str, status: DevicesStatus) -> int:
    """Partitions the node can hold now: per healthy partitioned card, what it holds plus the
    most instances of any one profile that still fit; a card without a ledger row counts its
    full `count`, an unhealthy card nothing."""
    rows = {CardRef(g.manufacturer, row.id): row for g, row in status.rows()}
    room = 0
    for group, card in spec.cards():
        if group.manufacturer != manufacturer or not card.is_partitioned:
            continue
        if card.status.unhealthy:
            continue
        row = rows.get(CardRef(manufacturer, card.id))
        if row is None or not row.partition_ledger_ready:
            room += card.status.physical_sliced.count
            continue
        held = sum(entry.count for entry in row.allocated_profiles)
        room += held + max((entry.count for entry in row.remaining_profiles), default=0)
    return room


def partition_health(
    spec: DevicesSpec, manufacturer: str, status: DevicesStatus, held_ids: Iterable[str]
) -> list[tuple[DeviceToken, bool]]:
    """Every partitioned token with its health: held tokens first, then enough others (in
    order) to reach `partition_room`."""
    tokens = [
        token
        for group, card in spec.cards()
        if group.manufacturer == manufacturer
        for token in card_tokens(group.id, card, Mode.PARTITIONED)
    ]
    known = {str(token) for token in tokens}
    healthy = {text for text in held_ids if text in known}
    room = partition_room(spec, manufacturer, status)
    for token in tokens:
        if len(healthy) >= room:
            break
        healthy.add(str(token))
    return [(token, str(token) in healthy) for token in tokens]
