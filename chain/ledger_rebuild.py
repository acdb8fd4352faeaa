"""The ledger (`Devices.status`) rebuilt from the Pods' allocation annotations
(docs/design/node-agent.md, "The ledger").

The device plugin writes each grant onto its Pod as `device.gpustack.ai/accelerator.allocated`: a
JSON map from container name to that container's record,

    {"<container>": {"devices": {"groups": [{"id": "<group>", "manufacturer": "nvidia",
        "accelerators": [{"id": "<uuid>", "index": 0, "mode": 3, "allocated": 800000}]}]},
     "deviceIDs": ["<group>:<uuid>:0000"]}}

`devices` has the ledger's shape (`DevicesStatus`); each accelerator row is one *claim*: a
container's hold on one card, `allocated` being the units it costs. The annotation is the durable
truth, so the ledger is never edited in place: it is recomputed wholesale from every Pod bound to
the node and written only when it differs. Output order follows the spec, so an unchanged node
renders byte for byte the same.

A claim charges until its Pod object is gone, except that a finished Pod (`Succeeded`/`Failed`)
gives back whole, shared and sliced cards while `GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS` is on.
Partitions and MetaX/Cambricon slices stay charged: they are driver objects a reclaimer must tear
down first, and charging them until then keeps a second Pod off hardware still cut for the first.

Judgment calls:
- Cards are matched by manufacturer and card id, not group id: a group id changes when
  `GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY` flips, the card (its UUID) does not.
- A claim in a mode other than the card's (two Pods disagree) is skipped and reported; the Pod's
  other claims still charge. Upstream aborts the rest of that Pod; charging what is consistent
  errs towards a busy card, never towards a card two workloads believe they own.
- Claims of mode None or Visibility and claims on cards the spec no longer lists charge nothing.
- Pods are taken in creation order (then namespace, name, uid), so who wins a conflict does not
  depend on the order a cache lists them in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TypeVar, cast

from chain import fields
from chain.accelerators import Accelerator
from chain.devices import DevicesSpec
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
    UnrecordedRecord,
)
from chain.partitions import Placement
from chain.units import RESOURCE_MAX_UNITS

ALLOCATED_ANNOTATION = "device.gpustack.ai/accelerator.allocated"
PodT = TypeVar("PodT", bound=Mapping[str, Any])
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
STATEFUL_SLICED_MANUFACTURERS = frozenset({"metax", "cambricon"})
"""Their slices are driver objects (sGPU, sMLU) that outlive the container until reclaimed."""


class CardRef(NamedTuple):
    """One card, as every rule here names it."""

    manufacturer: str
    card: str


class Holder(NamedTuple):
    """Who holds a claim: one container of one Pod."""

    pod_uid: str
    container: str


@dataclass(frozen=True)
class Claim:
    """One container's hold on one card: a row of its record."""

    manufacturer: str
    group: str
    row: AcceleratorAllocation

    @property
    def ref(self) -> CardRef:
        return CardRef(self.manufacturer, self.row.id)

    @property
    def holds_partition(self) -> bool:
        row = self.row
        return bool(row.allocated_physical_profile or row.allocated_physical_placements)


@dataclass(frozen=True)
class AllocationRecord:
    """One container's entry in the annotation: its claims and the device IDs kubelet gave."""

    devices: DevicesStatus = field(default_factory=DevicesStatus)
    device_ids: tuple[str, ...] = ()

    def claims(self) -> Iterator[Claim]:
        for entry, row in self.devices.rows():
            yield Claim(entry.manufacturer, entry.id, row)

    def keep(self, wanted: set[int]) -> AllocationRecord:
        """The record with only the claims at the given positions (in `claims()` order)."""
        position = 0
        groups: list[DevicesAllocationGroup] = []
        for entry in self.devices.groups:
            rows = []
            for row in entry.accelerators:
                if position in wanted:
                    rows.append(row)
                position += 1
            if rows:
                groups.append(replace(entry, accelerators=tuple(rows)))
        return AllocationRecord(DevicesStatus(tuple(groups)), self.device_ids)

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> AllocationRecord:
        ids = obj.get("deviceIDs")
        if ids is None:
            ids = []
        if not isinstance(ids, list) or not all(isinstance(item, str) for item in ids):
            raise ValueError(f"{fields.at(path, 'deviceIDs')}: expected a list of strings")
        devices = DevicesStatus.parse(
            fields.child(obj, "devices", path), fields.at(path, "devices")
        )
        return cls(devices, tuple(str(item) for item in ids))

    def render(self) -> dict[str, object]:
        return {"devices": self.devices.render(), "deviceIDs": list(self.device_ids)}


def parse_allocated(value: str | None) -> dict[str, AllocationRecord]:
    """The annotation's records by container; absent or empty means none. ValueError if broken."""
    if not value:
        return {}
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{ALLOCATED_ANNOTATION}: not JSON ({error.msg})") from None
    body = fields.as_object(decoded, ALLOCATED_ANNOTATION)
    return {
        name: AllocationRecord.parse(
            fields.as_object(record, name), f"{ALLOCATED_ANNOTATION}.{name}"
        )
        for name, record in body.items()
    }


def render_allocated(records: Mapping[str, AllocationRecord]) -> str:
    """The annotation value: compact JSON, containers sorted, so equal maps render equally."""
    body = {name: records[name].render() for name in sorted(records)}
    return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True)
class PodAllocations:
    """What a Pod holds per its annotation, with what the rules need of the Pod itself."""

    uid: str
    namespace: str = ""
    name: str = ""
    phase: str = ""
    created: str = ""
    records: Mapping[str, AllocationRecord] = field(default_factory=dict)
    problem: str = ""
    """Why the annotation could not be read (then `records` is empty)."""

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @classmethod
    def from_pod(cls, pod: Mapping[str, object]) -> PodAllocations:
        meta = fields.child(pod, "metadata", "pod")
        status = fields.child(pod, "status", "pod")
        annotations = fields.child(meta, "annotations", "metadata")
        raw = annotations.get(ALLOCATED_ANNOTATION)
        records: dict[str, AllocationRecord] = {}
        problem = ""
        if raw is not None and not isinstance(raw, str):
            problem = f"{ALLOCATED_ANNOTATION}: expected a string"
        else:
            try:
                records = parse_allocated(raw)
            except ValueError as error:
                problem = str(error)
        return cls(
            uid=fields.string(meta, "uid", "metadata"),
            namespace=fields.string(meta, "namespace", "metadata"),
            name=fields.string(meta, "name", "metadata"),
            phase=fields.string(status, "phase", "status"),
            created=fields.string(meta, "creationTimestamp", "metadata"),
            records=records,
            problem=problem,
        )


def with_unrecorded(pods: Sequence[PodT], unrecorded: Iterable[UnrecordedRecord]) -> Sequence[PodT]:
    """The node's Pods, each one listed in `unrecorded` (same uid, namespace and name) carrying
    the listed record as its annotation: the node agent lists only the latest record it keeps
    writing, newer than anything the Pod carries, and the ledger beside the list charges it.
    Whoever reads the records through this (the agent's ledger, the verdict driver's ledger and
    its count of promised Pods) therefore counts such a Pod's cards once. An entry naming no Pod
    of the node (gone, or another Pod of that name now) changes nothing."""
    listed = {entry.uid: entry for entry in unrecorded}
    if not listed:
        return pods
    out: list[PodT] = []
    for pod in pods:
        meta = pod.get("metadata")
        entry = listed.get(str(meta.get("uid", ""))) if isinstance(meta, Mapping) else None
        if (
            entry is None
            or not isinstance(meta, Mapping)
            or (meta.get("namespace"), meta.get("name")) != (entry.namespace, entry.name)
        ):
            out.append(pod)
            continue
        annotations = meta.get("annotations")
        kept = dict(annotations) if isinstance(annotations, Mapping) else {}
        kept[ALLOCATED_ANNOTATION] = entry.record
        # A copy as plain dicts, whatever mapping the caller's Pods are (they are dicts).
        out.append(cast(PodT, {**pod, "metadata": {**meta, "annotations": kept}}))
    return out


def stays_charged(claim: Claim) -> bool:
    """Whether a finished Pod's claim still charges its card (`heldAllocation`)."""
    if claim.holds_partition:
        return True
    if claim.row.mode == Mode.SLICED:
        return claim.manufacturer in STATEFUL_SLICED_MANUFACTURERS
    return claim.row.mode not in (Mode.EXCLUSIVE, Mode.SHARED)


def charged_part(record: AllocationRecord, terminal: bool, release: bool) -> AllocationRecord:
    """The part of a record that still charges, given whether its Pod finished and the release
    switch."""
    if not (terminal and release):
        return record
    kept = {number for number, claim in enumerate(record.claims()) if stays_charged(claim)}
    return record.keep(kept)


def charging_reservations(
    pods: Iterable[PodAllocations],
    reservations: Mapping[Holder, AllocationRecord],
    release_terminated: bool,
) -> dict[Holder, AllocationRecord]:
    """This process's reservations, each cut to the part that still charges its cards.

    A reservation lives as long as its Pod is listed, finished Pods included, so a whole card
    granted to a Pod that has since Succeeded would otherwise stay held in its mode: a Pod of
    another mode on that card refused by Allocate and the card advertised Unhealthy, while the
    ledger (and so the verdict driver) counts it free (#35). A finished Pod's reservation
    charges exactly what its record would (`charged_part`); a reservation whose Pod the list
    does not name yet is the newest grant of all and charges whole."""
    finished = {pod.uid for pod in pods if pod.terminal}
    charging: dict[Holder, AllocationRecord] = {}
    for holder, record in reservations.items():
        kept = charged_part(record, holder.pod_uid in finished, release_terminated)
        if next(kept.claims(), None) is not None:
            charging[holder] = kept
    return charging


def node_holdings(
    pods: Iterable[PodAllocations],
    reservations: Mapping[Holder, AllocationRecord],
    release_terminated: bool,
) -> dict[Holder, AllocationRecord]:
    """Every container's charging record: annotation or, preferred, this process's reservation.

    Reservations of Pods no longer on the node are dropped: their Pod is gone, so is the hold.
    """
    held: dict[Holder, AllocationRecord] = {}
    for pod in pods:
        mine = {h.container: r for h, r in reservations.items() if h.pod_uid == pod.uid}
        for container in sorted({*pod.records, *mine}):
            record = mine.get(container) or pod.records[container]
            held[Holder(pod.uid, container)] = charged_part(
                record, pod.terminal, release_terminated
            )
    return held


@dataclass(frozen=True)
class LedgerRebuild:
    status: DevicesStatus
    live_pod_uids: frozenset[str]
    """Every Pod seen (finished and terminating ones too): reservations of others are stale."""
    problems: tuple[str, ...] = ()
    """Pods skipped and claims refused, for the log."""


@dataclass
class _Card:
    """One card's ledger row while the claims are added up."""

    card: Accelerator
    mode: Mode = Mode.NONE
    remaining: int = RESOURCE_MAX_UNITS
    slices: int = 0
    profiles: list[str] = field(default_factory=list)
    occupied: list[Placement] = field(default_factory=list)

    def charge(self, claim: Claim) -> None:
        row = claim.row
        self.mode = row.mode
        self.remaining = max(self.remaining - row.allocated, 0)
        if row.mode == Mode.SLICED:
            self.slices += 1
        if row.allocated_physical_profile:
            self.profiles.append(row.allocated_physical_profile)
        self.occupied.extend(row.allocated_physical_placements)

    def row(self) -> AcceleratorAllocation:
        allocated: tuple[ProfileCount, ...] = ()
        remaining: tuple[ProfileCount, ...] = ()
        offered = self.card.status.physical_sliced.profiles
        if offered:
            allocated = tuple(
                ProfileCount(name, self.profiles.count(name)) for name in sorted(set(self.profiles))
            )
            remaining = tuple(
                ProfileCount(p.name, free_placements(p.placements, self.occupied))
                for p in sorted(offered, key=lambda p: p.name)
            )
        return AcceleratorAllocation(
            id=self.card.id,
            index=self.card.index,
            mode=self.mode,
            remaining=self.remaining,
            allocated_slices=self.slices,
            allocated_profiles=allocated,
            remaining_profiles=remaining,
        )


def free_placements(legal: Iterable[Placement], occupied: Iterable[Placement]) -> int:
    """How many of a profile's legal slots overlap nothing already placed on the card."""
    taken = tuple(occupied)
    return sum(1 for slot in legal if not any(slot.overlaps(used) for used in taken))


def _pod_order(pod: PodAllocations) -> tuple[str, str, str, str]:
    return (pod.created, pod.namespace, pod.name, pod.uid)


def rebuild_status(
    spec: DevicesSpec, pods: Iterable[PodAllocations], release_terminated: bool = True
) -> LedgerRebuild:
    """The ledger the node's Pods add up to (`BuildDesiredStatus`)."""
    cards: dict[CardRef, _Card] = {}
    for group, card in spec.cards():
        cards[CardRef(group.manufacturer, card.id)] = _Card(card)
    problems: list[str] = []
    seen: set[str] = set()
    for pod in sorted(pods, key=_pod_order):
        seen.add(pod.uid)
        if pod.problem:
            problems.append(
                f"pod {pod.namespace}/{pod.name}: {pod.problem}; its cards will be reported free"
            )
            continue
        for container in sorted(pod.records):
            record = charged_part(pod.records[container], pod.terminal, release_terminated)
            for claim in record.claims():
                problem = _merge(cards, claim)
                if problem:
                    problems.append(
                        f"pod {pod.namespace}/{pod.name} container {container}: {problem}"
                    )
    groups = []
    for group in spec.groups:
        rows = tuple(
            cards[CardRef(group.manufacturer, card.id)].row() for card in group.accelerators
        )
        if rows:
            groups.append(DevicesAllocationGroup(group.id, group.manufacturer, rows))
    return LedgerRebuild(DevicesStatus(tuple(groups)), frozenset(seen), tuple(problems))


def _merge(cards: Mapping[CardRef, _Card], claim: Claim) -> str:
    """Charge one claim to its card; the reason when it cannot be charged, else ""."""
    if claim.row.mode in (Mode.NONE, Mode.VISIBILITY):
        return ""
    target = cards.get(claim.ref)
    if target is None:
        return ""
    if target.mode not in (Mode.NONE, claim.row.mode):
        return (
            f"card {claim.row.id} is held in {target.mode} mode, "
            f"cannot account it in {claim.row.mode} mode"
        )
    target.charge(claim)
    return ""
