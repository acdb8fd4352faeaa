"""The device plugin's allocation rules (docs/design/node-agent.md, "Device-plugin resources",
"Allocate"): tokens, costs, and who gets a card.

One device-plugin resource per mode advertises *tokens*, `<group>:<card>:<index>`; kubelet hands a
container some of them and the plugin turns them into a grant. Kubelet knows nothing of modes, so
the rules here keep one card from being given in two modes at once (the cross-mode check) and a
sliced card from being promised past its M units (the sliced gate), and they hint kubelet towards
tight packing (the preferred allocation). All of it is pure: the gRPC servers take a snapshot
under the node's allocation mutex (spec, ledger, reservations, the node's Pods) and act on the
answer. Annotation shapes and the charging rules live in `chain.ledger_rebuild`.

Judgment calls:
- A token naming a card the spec does not list, or a card that offers no token of the mode, is
  refused (FailedPrecondition): kubelet can only hold such a token from a checkpoint older
  than the hardware, and granting it would give a container a card it cannot see.
- The packing hint echoes every must-include token of a card (upstream: the first); kubelet
  rejects a hint that drops one, and with one token per card both read the same.
- With sliced units 0 (not a sliced request) the hint keeps spec order: there is no size to pack.
- A short hint is filled from the deferred cards whether they were deferred for size or for not
  being preferred; a hint kubelet can use beats none, and Allocate's gate still has the last word.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from chain.accelerators import Accelerator
from chain.devices import DevicesGroup, DevicesSpec
from chain.families import PARTITIONED, SHARED, SLICED, visibility_resource
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import AllocationRecord, CardRef, Holder, PodAllocations
from chain.manufacturers import Manufacturer
from chain.units import RESOURCE_MAX_UNITS, SHARE_UNITS, SHARED_MAX_OWNERS, SLICED_MAX_SIZE

PREFERRED_ID_ANNOTATION = "device.gpustack.ai/accelerator.preferred-id"
PREFERRED_INDEX_ANNOTATION = "device.gpustack.ai/accelerator.preferred-index"
TOKEN_INDEX_WIDTH = 4
WORKLOAD_MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED)
"""The modes `decide_grant` serves; partitions and visibility are decided elsewhere."""


class Code(enum.Enum):
    """gRPC status of a refusal (names match `grpc.StatusCode`)."""

    INVALID_ARGUMENT = "InvalidArgument"
    FAILED_PRECONDITION = "FailedPrecondition"
    RESOURCE_EXHAUSTED = "ResourceExhausted"
    INTERNAL = "Internal"


class Refusal(Exception):
    """Allocate says no; kubelet turns it into `UnexpectedAdmissionError` (final for the Pod)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- Tokens -------------------------------------------------------------------------------------

_INDEX = re.compile(r"[0-9]+")


@dataclass(frozen=True, order=True)
class DeviceToken:
    """One advertised device ID: `<group>:<card>:<index>`, the index at least 4 digits wide."""

    group: str
    card: str
    index: int

    def __str__(self) -> str:
        return f"{self.group}:{self.card}:{self.index:0{TOKEN_INDEX_WIDTH}d}"

    @classmethod
    def parse(cls, text: str) -> DeviceToken:
        parts = text.split(":")
        if len(parts) != 3 or not all(parts) or not _INDEX.fullmatch(parts[2]):
            raise ValueError(f"device ID {text!r} is not <group>:<card>:<index>")
        return cls(parts[0], parts[1], int(parts[2]))


def token_card(text: str) -> str:
    """The card a device ID names; empty for text that is no device ID."""
    try:
        return DeviceToken.parse(text).card
    except ValueError:
        return ""


def token_pool(card: Accelerator, mode: Mode) -> int:
    """How many tokens of `mode` a card advertises."""
    if mode == Mode.VISIBILITY:
        return SLICED_MAX_SIZE
    if mode == Mode.PARTITIONED:
        return card.status.physical_sliced.count if card.is_partitioned else 0
    if mode == Mode.SLICED:
        return card.status.logical_sliced.count if card.is_logically_sliceable else 0
    if not card.is_whole_accelerator_capable:
        return 0
    return {Mode.EXCLUSIVE: 1, Mode.SHARED: SHARED_MAX_OWNERS}.get(mode, 0)


TOKEN_INDEX_BASE = 10_000_000
"""Each mode's tokens start at `mode * TOKEN_INDEX_BASE`, so one device ID names one resource.

Upstream numbers every mode from 0 (`<grp>:<dev>:0000` is the exclusive token, the first share
and the first slice of a card at once). Since Kubernetes v1.36 the kubelet routes a device's
health by its ID alone, so the exclusive plugin marking a card's token unhealthy once the card
is shared raised a health event on the Pod holding the share. Here the index's leading digit
names the mode: exclusive `0000`, shared `20000000`, `20160000`, ... (still counting units),
sliced `30000000`..., partitioned `40000000`..., visibility `50000000`... The format and its
parse are upstream's; the index stays an opaque number everywhere else."""


def card_tokens(group_id: str, card: Accelerator, mode: Mode) -> tuple[DeviceToken, ...]:
    """A card's tokens of `mode`. Shared indexes count units (base, base + 160000, ...), so a
    token says which share of the card it stands for; the others count from their base."""
    step = SHARE_UNITS if mode == Mode.SHARED else 1
    base = 0 if mode == Mode.EXCLUSIVE else int(mode) * TOKEN_INDEX_BASE
    pool = range(token_pool(card, mode))
    return tuple(DeviceToken(group_id, card.id, base + n * step) for n in pool)


def plugin_resource(maker: Manufacturer, mode: Mode) -> str:
    """The extended resource a mode's plugin registers."""
    suffix = {Mode.SHARED: SHARED, Mode.SLICED: SLICED, Mode.PARTITIONED: PARTITIONED}
    if mode == Mode.VISIBILITY:
        return visibility_resource(maker.name)
    if mode == Mode.EXCLUSIVE or mode in suffix:
        return maker.resource_name + suffix.get(mode, "")
    raise ValueError(f"mode {mode} has no device-plugin resource")


def plugin_socket(manufacturer: str, mode: Mode) -> str:
    """Socket file name in kubelet's device-plugins directory (`nvidia.sliced.sock`)."""
    return f"{manufacturer}.{mode.name.lower()}.sock"


def served_modes(
    maker: Manufacturer, shared: bool = True, sliced: bool = True, partitioned: bool = True
) -> tuple[Mode, ...]:
    """The plugins one manufacturer registers (the `--no-*` flags switch modes off)."""
    modes = [Mode.EXCLUSIVE]
    if shared:
        modes.append(Mode.SHARED)
    if sliced:
        modes.append(Mode.SLICED)
    if partitioned and maker.partition_kind:
        modes.append(Mode.PARTITIONED)
    modes.append(Mode.VISIBILITY)
    return tuple(modes)


# --- Cost ---------------------------------------------------------------------------------------


def units_per_token(limit: int) -> int:
    """A container's `.sliced.units` (or `.partitioned.units`) limit; 1 when it has none."""
    return limit if limit > 0 else 1


def grant_units(mode: Mode, per_token: int, tokens: int) -> int:
    """Units one card is charged for a grant of `tokens` of its tokens.

    A slice without a size costs one unit (per token): a Pod that bypassed the webhook barely
    dents `remaining`, but still takes one of the card's slice slots.
    """
    if mode == Mode.SHARED:
        return SHARE_UNITS
    if mode in (Mode.SLICED, Mode.PARTITIONED):
        return min(per_token * tokens, RESOURCE_MAX_UNITS)
    return RESOURCE_MAX_UNITS


# --- Who holds a card ---------------------------------------------------------------------------


def conflicting_mode(
    ref: CardRef,
    mode: Mode,
    status: DevicesStatus,
    reservations: Iterable[AllocationRecord],
) -> Mode:
    """A mode other than `mode` the card is held in (ledger or reservation), else `Mode.NONE`."""
    for entry, row in status.rows():
        if CardRef(entry.manufacturer, row.id) == ref and row.mode not in (Mode.NONE, mode):
            return row.mode
    for record in reservations:
        for claim in record.claims():
            if claim.ref == ref and claim.row.mode not in (Mode.NONE, Mode.VISIBILITY, mode):
                return claim.row.mode
    return Mode.NONE


def sliced_occupancy(
    holdings: Mapping[Holder, AllocationRecord],
) -> dict[CardRef, dict[Holder, int]]:
    """Sliced units per card per holder, from every charging record on the node."""
    occupancy: dict[CardRef, dict[Holder, int]] = {}
    for holder, record in holdings.items():
        for claim in record.claims():
            if claim.row.mode == Mode.SLICED:
                per_card = occupancy.setdefault(claim.ref, {})
                per_card[holder] = per_card.get(holder, 0) + claim.row.allocated
    return occupancy


def sliced_room(occupancy: Mapping[CardRef, Mapping[Holder, int]], ref: CardRef, me: Holder) -> int:
    """Units of a card not held by another container's slice (my own retry does not count)."""
    others = sum(units for holder, units in occupancy.get(ref, {}).items() if holder != me)
    return max(RESOURCE_MAX_UNITS - others, 0)


def _check_sliced_gate(
    cards: Sequence[tuple[CardRef, Accelerator, int]],
    per_token: int,
    occupancy: Mapping[CardRef, Mapping[Holder, int]],
    me: Holder,
) -> None:
    for ref, card, tokens in cards:
        need = min(min(per_token, RESOURCE_MAX_UNITS) * tokens, RESOURCE_MAX_UNITS)
        others = [holder for holder in occupancy.get(ref, {}) if holder != me]
        slots = card.status.logical_sliced.count
        if card.is_logically_sliceable and len(others) >= slots:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"card {card.id} already hosts {len(others)} of its {slots} slices",
            )
        free = sliced_room(occupancy, ref, me)
        if free < need:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"card {card.id} has {free} of {RESOURCE_MAX_UNITS} units free"
                f" and the slice needs {need}",
            )


# --- Allocate -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrantRequest:
    """One Allocate call for a workload mode, with the container it was identified as."""

    manufacturer: str
    mode: Mode
    device_ids: tuple[str, ...]
    holder: Holder
    per_token: int = 1
    """`units_per_token(...)` of the container's limit (sliced only)."""


def _locate(spec: DevicesSpec, manufacturer: str, token: DeviceToken) -> DevicesGroup:
    group = spec.group(manufacturer, token.group)
    if group is None or group.accelerator(token.card) is None:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"card {token.card} of group {token.group} is not on this node",
        )
    return group


def decide_grant(
    spec: DevicesSpec,
    status: DevicesStatus,
    reservations: Mapping[Holder, AllocationRecord],
    request: GrantRequest,
    occupancy: Mapping[CardRef, Mapping[Holder, int]] | None,
) -> AllocationRecord:
    """The record an Exclusive, Shared or Sliced grant writes, or a `Refusal`.

    `occupancy` is `sliced_occupancy(node_holdings(...))`, or None when the sliced gate is off.
    """
    if request.mode not in WORKLOAD_MODES:
        raise Refusal(Code.INTERNAL, f"{request.mode} grants are not decided here")
    try:
        # Keep kubelet's own spelling of each ID: it compares them with what it handed out.
        tokens = sorted((DeviceToken.parse(text), text) for text in request.device_ids)
    except ValueError as error:
        raise Refusal(Code.INVALID_ARGUMENT, str(error)) from None
    if not tokens:
        raise Refusal(Code.INVALID_ARGUMENT, "no device IDs")
    per_card: dict[CardRef, int] = {}
    cards: dict[CardRef, Accelerator] = {}
    for token, _ in tokens:
        group = _locate(spec, request.manufacturer, token)
        card = group.accelerator(token.card)
        assert card is not None  # _locate checked it
        if token_pool(card, request.mode) == 0:
            # A group published without slices (its isolation library) says why: a kubelet may
            # still hold a token it advertised before.
            why = f": {group.slicing_unavailable}" if group.slicing_unavailable else ""
            raise Refusal(
                Code.FAILED_PRECONDITION, f"card {card.id} offers no {request.mode} tokens{why}"
            )
        ref = CardRef(request.manufacturer, card.id)
        per_card[ref] = per_card.get(ref, 0) + 1
        cards[ref] = card
    for ref, count in per_card.items():
        if request.mode == Mode.SHARED and count > 1:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"a shared grant takes one share per card, got {count} of card {ref.card}",
            )
        conflict = conflicting_mode(ref, request.mode, status, reservations.values())
        if conflict != Mode.NONE:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"card {ref.card} is held in {conflict} mode, "
                f"cannot allocate it in {request.mode} mode",
            )
    if request.mode == Mode.SLICED and occupancy is not None:
        gated = [(ref, cards[ref], per_card[ref]) for ref in per_card]
        _check_sliced_gate(gated, request.per_token, occupancy, request.holder)
    return AllocationRecord(
        _grant_status(spec, request, per_card), tuple(text for _, text in tokens)
    )


def _grant_status(
    spec: DevicesSpec, request: GrantRequest, per_card: Mapping[CardRef, int]
) -> DevicesStatus:
    groups = []
    for group in spec.groups:
        if group.manufacturer != request.manufacturer:
            continue
        rows = tuple(
            AcceleratorAllocation(
                id=card.id,
                index=card.index,
                mode=request.mode,
                allocated=grant_units(request.mode, request.per_token, tokens),
            )
            for card in group.accelerators
            if (tokens := per_card.get(CardRef(group.manufacturer, card.id), 0))
        )
        if rows:
            groups.append(DevicesAllocationGroup(group.id, group.manufacturer, rows))
    return DevicesStatus(tuple(groups))


def visibility_owner(
    me: Holder,
    pod: PodAllocations | None,
    reservations: Mapping[Holder, AllocationRecord],
    spec: DevicesSpec,
    manufacturer: str,
    requested: int,
) -> tuple[Holder, AllocationRecord]:
    """The container whose cards a visibility grant shows (docs/design/node-agent.md, "Visibility
    Allocate"), and its record: another container of the same Pod, this process's reservation first,
    the lowest container name winning. Fails closed: a visibility container must never see a card
    its Pod does not hold."""
    reserved = sorted(
        (h.container, r) for h, r in reservations.items() if h.pod_uid == me.pod_uid and h != me
    )
    if reserved:
        name, owner = reserved[0]
    elif pod is None or pod.problem:
        why = pod.problem if pod is not None else "its Pod is not on this node"
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"container {me.container} cannot be shown its Pod's {manufacturer} cards: {why}",
        )
    else:
        names = sorted(name for name in pod.records if name != me.container)
        if not names:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"container {me.container} asks to see its Pod's {manufacturer} cards, but no "
                f"other container of the Pod holds any; give another container a card resource",
            )
        name, owner = names[0], pod.records[names[0]]
    claims = [c for c in owner.claims() if c.manufacturer == manufacturer]
    known = {card.id for group, card in spec.cards() if group.manufacturer == manufacturer}
    missing = sorted(c.row.id for c in claims if c.row.id not in known)
    if missing:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"card {', '.join(missing)} of container {name} is no longer on this node",
        )
    if len(claims) != requested:
        raise Refusal(
            Code.FAILED_PRECONDITION,
            f"container {name} holds {len(claims)} {manufacturer} cards but {me.container} "
            f"asks to see {requested}; ask for as many visibility devices as it holds cards",
        )
    return Holder(me.pod_uid, name), owner


def shown_partitions(owner: AllocationRecord) -> tuple[str, ...]:
    """The owner's cards that hold a partition: showing one means naming the partition,
    never its parent card."""
    return tuple(
        c.row.id for c in owner.claims() if c.holds_partition or c.row.mode == Mode.PARTITIONED
    )


# --- GetPreferredAllocation ---------------------------------------------------------------------


def preferred_cards(
    annotations: Mapping[str, str], spec: DevicesSpec, manufacturer: str
) -> frozenset[str]:
    """Card ids a Pod asks for: `preferred-id`, else `preferred-index` translated to ids."""
    ids = _comma_list(annotations.get(PREFERRED_ID_ANNOTATION, ""))
    if ids:
        return frozenset(ids)
    wanted = {
        int(item)
        for item in _comma_list(annotations.get(PREFERRED_INDEX_ANNOTATION, ""))
        if _INDEX.fullmatch(item)
    }
    return frozenset(
        card.id
        for group, card in spec.cards()
        if group.manufacturer == manufacturer and card.index in wanted
    )


def _comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@dataclass(frozen=True)
class PreferenceRequest:
    """One `ContainerPreferredAllocationRequest`, with what the plugin knows of the container."""

    manufacturer: str
    mode: Mode
    available: tuple[str, ...]
    must_include: tuple[str, ...] = ()
    size: int = 1
    sliced_units: int = 0
    """The container's `.sliced.units` capped at M; 0 = no packing by size."""
    preferred: frozenset[str] = frozenset()


def _offered(ids: Iterable[str]) -> dict[str, list[str]]:
    """Offered IDs by card, lowest token first, in kubelet's own spelling."""
    by_card: dict[str, set[tuple[DeviceToken, str]]] = {}
    for text in ids:
        try:
            token = DeviceToken.parse(text)
        except ValueError:
            continue  # not one of ours; never echoed back
        by_card.setdefault(token.card, set()).add((token, text))
    return {card: [text for _, text in sorted(tokens)] for card, tokens in by_card.items()}


def _packing_order(
    group: DevicesGroup, must: Mapping[str, object], units: int, room: Mapping[str, int]
) -> list[Accelerator]:
    position = {card.id: n for n, card in enumerate(group.accelerators)}

    def key(card: Accelerator) -> tuple[int, int, int]:
        if card.id in must:
            return (0, 0, position[card.id])
        if units <= 0:
            return (1, 0, position[card.id])
        if room[card.id] >= units:
            return (1, room[card.id], position[card.id])  # fullest that fits first
        return (2, -room[card.id], position[card.id])  # then the emptiest misfit

    return sorted(group.accelerators, key=key)


Choose = Callable[[Sequence[str], Sequence[str], int], Sequence[str]]
"""Which cards a multi-card hint names: (the candidate cards in packing order, the cards that
must be included, how many cards in all) -> the cards, must ones included. The node agent passes
its best-connected choice (docs/topology.md, "Best-connected card sets")."""


def packed(ranked: Sequence[str], must: Sequence[str], size: int) -> Sequence[str]:
    """The plain packing hint: the first cards of the packing order."""
    return (*must, *ranked[: size - len(must)])


def preferred_allocation(
    spec: DevicesSpec,
    status: DevicesStatus,
    request: PreferenceRequest,
    room: Mapping[CardRef, int],
    choose: Choose = packed,
    reservations: Iterable[AllocationRecord] = (),
) -> tuple[str, ...]:
    """The hint for kubelet, or () for none. `room` is `sliced_room` per card; a card missing
    from it falls back to the ledger's `remaining` (gate off, occupancy unreadable). The cards
    are ranked by packing (must-include first, then the fullest card a slice fits, then in
    enumeration order), cards the Pod does not prefer or a slice does not fit last; `choose`
    picks among them when more than one card is asked, the first tier before the last.

    A card held in another mode, by the ledger or by one of `reservations` (grants whose
    record has not reached the ledger yet), is never named: the kubelet still offers it while
    its device list lags behind the agent's, and Allocate would refuse it (#35)."""
    if request.mode not in WORKLOAD_MODES:
        return ()
    must = _offered(request.must_include)
    offered = _offered((*request.available, *request.must_include))
    held = tuple(reservations)
    first: list[str] = []
    deferred: list[str] = []
    emitted: list[str] = []
    """Every card in the order the hint lists them (the order kubelet has always been given)."""
    for group in spec.groups:
        if group.manufacturer != request.manufacturer:
            continue
        free = {
            card.id: room.get(
                CardRef(group.manufacturer, card.id),
                status.remaining_of(group.manufacturer, group.id, card.id),
            )
            for card in group.accelerators
        }
        for card in _packing_order(group, must, request.sliced_units, free):
            ref = CardRef(group.manufacturer, card.id)
            if (
                not offered.get(card.id)
                or conflicting_mode(ref, request.mode, status, held) != Mode.NONE
            ):
                continue
            emitted.append(card.id)
            if card.id in must:
                continue
            if (request.sliced_units > 0 and free[card.id] < request.sliced_units) or (
                request.preferred and card.id not in request.preferred
            ):
                deferred.append(card.id)
            else:
                first.append(card.id)
    needed = [card for card in emitted if card in must]
    left = request.size - sum(len(must[card]) for card in needed)
    if left > len(first) + len(deferred):
        return ()
    if left <= 0:
        chosen: set[str] = set(needed)
    elif len(needed) + left < 2:
        chosen = {*needed, *(first + deferred)[:left]}  # one card: packing alone
    elif left <= len(first):
        chosen = set(choose(first, needed, len(needed) + left))
    else:  # every preferred card, and the best of the others
        chosen = set(choose(deferred, [*needed, *first], len(needed) + left))
    tokens = [
        *(
            text
            for card in emitted
            if card in chosen and card not in deferred
            for text in must.get(card, offered[card][:1])
        ),
        *(offered[card][0] for card in deferred if card in chosen),
    ]
    return tuple(tokens)
