"""The `Devices` object (`worker.gpustack.ai/v1alpha1`, one per node, named after it).

`spec` is what the node agent detected: card groups (one per model and memory size of one
manufacturer) and their cards, with what each card can be cut into. `status` is the ledger: one
row per card saying in which mode it is held and what is left of it. One card's types live in
`chain.accelerators`, the ledger's in `chain.ledger`; this module holds the groups, the spec and
the whole object, and re-exports the card types so `from chain.devices import ...` finds all.

Every type is a frozen view with `parse(obj, path)` (a ValueError names the broken field, e.g.
`spec.groups[0].accelerators[3].index`) and `render()` (exact upstream field names). Rendering
follows Go's `omitempty`: optional fields at their zero value are left out, required fields are
always written, so `parse(render(x)) == x`.

Judgment calls:
- `physicalIndexes` is required but nullable upstream; `None` (unknown) renders as no key rather
  than `null`, which a merge patch would read as "delete".
- `logicalSliced` / `physicalSliced` / `acceleratorSlicedDetail` are left out when all zero: a
  card that cannot be cut reads the same with or without them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from chain import fields
from chain.accelerators import (
    Accelerator,
    AcceleratorStatus,
    DeviceTopology,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
    Roce,
)
from chain.apis import WORKER_API
from chain.keys import accelerator_key
from chain.labels import AcceleratorGroupFacts
from chain.ledger import DevicesStatus, Mode, UnrecordedRecord
from chain.partitions import Placement

__all__ = [
    "DEVICES_API",
    "DEVICES_KIND",
    "DEVICES_RESOURCE",
    "Accelerator",
    "AcceleratorStatus",
    "DeviceTopology",
    "Devices",
    "DevicesGroup",
    "DevicesSpec",
    "LogicalSliced",
    "PartitionProfile",
    "PhysicalSliced",
    "PhysicalSlicedDetail",
    "Placement",
    "ProfileTotal",
    "Roce",
    "SlicedDetail",
    "aggregate_sliced_detail",
]

DEVICES_KIND = "Devices"
DEVICES_RESOURCE = "devices"
DEVICES_API = WORKER_API

Obj = dict[str, object]


@dataclass(frozen=True)
class ProfileTotal:
    """A partition profile summed over a group's cards."""

    name: str
    count: int
    memory_mib: int = 0

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> ProfileTotal:
        return cls(
            name=fields.string(obj, "name", path, required=True),
            count=fields.integer(obj, "count", path),
            memory_mib=fields.integer(obj, "memoryMib", path),
        )

    def render(self) -> Obj:
        return {"name": self.name, "count": self.count, "memoryMib": self.memory_mib}


@dataclass(frozen=True)
class PhysicalSlicedDetail:
    count: int = 0
    profiles: tuple[ProfileTotal, ...] = ()

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> PhysicalSlicedDetail:
        return cls(
            count=fields.integer(obj, "count", path),
            profiles=tuple(
                ProfileTotal.parse(item, where)
                for item, where in fields.items(obj, "profiles", path)
            ),
        )

    def render(self) -> Obj:
        out: Obj = {"count": self.count}
        if self.profiles:
            out["profiles"] = [profile.render() for profile in self.profiles]
        return out


@dataclass(frozen=True)
class SlicedDetail:
    """`AcceleratorSlicedDetail`: a group's cutting capacity, summed over its cards."""

    logical: LogicalSliced = field(default_factory=LogicalSliced)
    physical: PhysicalSlicedDetail = PhysicalSlicedDetail()

    def __bool__(self) -> bool:
        return bool(self.logical or self.physical.count or self.physical.profiles)

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> SlicedDetail:
        return cls(
            logical=LogicalSliced.parse(
                fields.child(obj, "logical", path), fields.at(path, "logical")
            ),
            physical=PhysicalSlicedDetail.parse(
                fields.child(obj, "physical", path), fields.at(path, "physical")
            ),
        )

    def render(self) -> Obj:
        return {"logical": self.logical.render(), "physical": self.physical.render()}


def aggregate_sliced_detail(cards: Iterable[Accelerator]) -> SlicedDetail:
    """`AggregateAcceleratorSlicedDetail`: sums of the cards' slice and partition counts.

    Overcommit holds for the group if any card that takes logical slices allows it. Profiles
    keep the order in which the cards first name them.
    """
    logical_count = 0
    overcommit = False
    physical_count = 0
    totals: dict[str, ProfileTotal] = {}
    for card in cards:
        logical = card.status.logical_sliced
        logical_count += logical.count
        overcommit = overcommit or (logical.count > 0 and logical.cores_percentage_overcommit)
        physical = card.status.physical_sliced
        physical_count += physical.count
        for profile in physical.profiles:
            seen = totals.get(profile.name)
            memory = seen.memory_mib if seen else profile.memory_mib
            count = (seen.count if seen else 0) + profile.count
            totals[profile.name] = ProfileTotal(profile.name, count, memory)
    return SlicedDetail(
        LogicalSliced(logical_count, overcommit),
        PhysicalSlicedDetail(physical_count, tuple(totals.values())),
    )


@dataclass(frozen=True)
class DevicesGroup:
    """One card model (product name and memory size) of one manufacturer on the node."""

    id: str
    """Sanitized product name without the manufacturer (`tesla-t4`); see `chain.keys.group_id`."""
    manufacturer: str
    name: str
    """Product name as the driver reports it (`NVIDIA H100 80GB HBM3`)."""
    memory: int
    """VRAM per card in MiB."""
    cores: int = 0
    driver_version: str = ""
    runtime_version: str = ""
    """NVIDIA: the CUDA version the driver supports (`13.0`)."""
    compute_capability: str = ""
    family: str = ""
    accelerators: tuple[Accelerator, ...] = ()
    sliced_detail: SlicedDetail = SlicedDetail()
    slicing_unavailable: str = ""
    """Why the node publishes the group without its logical slices although the cards take
    them (the isolation library a sliced grant preloads is not usable there); empty otherwise.
    Not upstream's: the node agent's own word, so `kubectl get devices` says why no slice is
    offered."""

    @property
    def offers_logical_slices(self) -> bool:
        """Whether the group, or any of its cards, offers logical slices."""
        return bool(self.sliced_detail.logical) or any(
            card.status.logical_sliced for card in self.accelerators
        )

    def without_logical_slices(self, reason: str = "") -> DevicesGroup:
        """The group with no card offering logical slices: what a node publishes for a
        manufacturer whose slices no device plugin of it can hand out, or (with the `reason`
        kept in `slicingUnavailable`) for a group whose isolation library is not usable."""
        if not self.offers_logical_slices:
            return replace(self, slicing_unavailable=reason)
        cards = tuple(
            replace(card, status=replace(card.status, logical_sliced=LogicalSliced()))
            for card in self.accelerators
        )
        detail = replace(self.sliced_detail, logical=LogicalSliced())
        return replace(self, accelerators=cards, sliced_detail=detail, slicing_unavailable=reason)

    @property
    def accelerator_key(self) -> str:
        """`<mfr>-<id>`: the aKey of the group's labels and pools."""
        return accelerator_key(self.manufacturer, self.id)

    def facts(self) -> AcceleratorGroupFacts:
        """What the node labels publish about this group."""
        return AcceleratorGroupFacts(
            manufacturer=self.manufacturer,
            group_id=self.id,
            name=self.name,
            memory_mib=self.memory,
            cards=len(self.accelerators),
            cores=self.cores,
            driver_version=self.driver_version,
            runtime_version=self.runtime_version,
            family=self.family,
            compute_capability=self.compute_capability,
        )

    def accelerator(self, card_id: str) -> Accelerator | None:
        return next((card for card in self.accelerators if card.id == card_id), None)

    _TEXT = (
        ("driverVersion", "driver_version"),
        ("runtimeVersion", "runtime_version"),
        ("computeCapability", "compute_capability"),
        ("family", "family"),
    )

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> DevicesGroup:
        text = {name: fields.string(obj, key, path) for key, name in cls._TEXT}
        detail = fields.child(obj, "acceleratorSlicedDetail", path)
        return cls(
            id=fields.string(obj, "id", path, required=True),
            manufacturer=fields.string(obj, "manufacturer", path, required=True),
            name=fields.string(obj, "name", path, required=True),
            memory=fields.integer(obj, "memory", path, required=True),
            cores=fields.integer(obj, "cores", path),
            accelerators=tuple(
                Accelerator.parse(item, where)
                for item, where in fields.items(obj, "accelerators", path)
            ),
            sliced_detail=SlicedDetail.parse(detail, fields.at(path, "acceleratorSlicedDetail")),
            slicing_unavailable=fields.string(obj, "slicingUnavailable", path),
            **text,
        )

    def render(self) -> Obj:
        out: Obj = {
            "id": self.id,
            "manufacturer": self.manufacturer,
            "name": self.name,
            "memory": self.memory,
        }
        if self.cores:
            out["cores"] = self.cores
        out.update({key: getattr(self, name) for key, name in self._TEXT if getattr(self, name)})
        if self.accelerators:
            out["accelerators"] = [card.render() for card in self.accelerators]
        if self.sliced_detail:
            out["acceleratorSlicedDetail"] = self.sliced_detail.render()
        if self.slicing_unavailable:
            out["slicingUnavailable"] = self.slicing_unavailable
        return out


@dataclass(frozen=True)
class DevicesSpec:
    groups: tuple[DevicesGroup, ...] = ()

    def group(self, manufacturer: str, group_id: str) -> DevicesGroup | None:
        return next(
            (
                entry
                for entry in self.groups
                if entry.manufacturer == manufacturer and entry.id == group_id
            ),
            None,
        )

    def by_accelerator_key(self) -> dict[str, DevicesGroup]:
        """Groups by aKey, the join with the node's `acceleratable.feature...` labels."""
        return {entry.accelerator_key: entry for entry in self.groups}

    def cards(self) -> Iterator[tuple[DevicesGroup, Accelerator]]:
        """Every card with its group, in spec order."""
        for entry in self.groups:
            for card in entry.accelerators:
                yield entry, card

    @classmethod
    def parse(cls, obj: fields.Obj, path: str = "spec") -> DevicesSpec:
        groups = tuple(
            DevicesGroup.parse(item, where) for item, where in fields.items(obj, "groups", path)
        )
        seen: set[tuple[str, str]] = set()
        for number, entry in enumerate(groups):
            # listType=map keyed by id+manufacturer: the API server refuses duplicates, so a
            # duplicate here means a hand-made object that no lookup could answer for.
            if (entry.manufacturer, entry.id) in seen:
                raise ValueError(
                    f"{path}.groups[{number}]: duplicate group {entry.manufacturer}/{entry.id}"
                )
            seen.add((entry.manufacturer, entry.id))
        return cls(groups)

    def render(self) -> Obj:
        return {"groups": [entry.render() for entry in self.groups]}


@dataclass(frozen=True)
class Devices:
    """A whole `Devices` object: name, labels, hardware and ledger."""

    name: str
    spec: DevicesSpec = DevicesSpec()
    status: DevicesStatus = field(default_factory=DevicesStatus)
    labels: Mapping[str, str] = field(default_factory=dict)
    unrecorded: tuple[UnrecordedRecord, ...] = ()
    """`status.unrecorded`: Pods whose records the ledger charges from the node agent's journal,
    not from the Pod (`UnrecordedRecord`), ordered by uid."""

    @classmethod
    def parse(cls, obj: object) -> Devices:
        body = fields.as_object(obj, "$")
        if body.get("kind", DEVICES_KIND) != DEVICES_KIND:
            raise ValueError(f"kind: expected {DEVICES_KIND}, got {body.get('kind')!r}")
        meta = fields.child(body, "metadata", "", required=True)
        labels = fields.child(meta, "labels", "metadata")
        for key, value in labels.items():
            if not isinstance(value, str):
                raise ValueError(f"metadata.labels.{key}: expected a string")
        status = fields.child(body, "status", "")
        return cls(
            name=fields.string(meta, "name", "metadata", required=True),
            spec=DevicesSpec.parse(fields.child(body, "spec", ""), "spec"),
            status=DevicesStatus.parse(status, "status"),
            labels={key: str(value) for key, value in labels.items()},
            unrecorded=UnrecordedRecord.parse_all(status),
        )

    def summary(self) -> Obj:
        """What `kubectl get devices` shows (the CRD's printer columns), kept in the status
        beside the ledger: the cards listed, the whole cards free, the cards held in each mode,
        and the logical slices held. A card without a ledger row is untouched (free)."""
        held = {mode: 0 for mode in Mode if mode != Mode.NONE}
        cards = free = slices = 0
        for group, card in self.spec.cards():
            cards += 1
            row = self.status.row(group.manufacturer, group.id, card.id)
            if row is None or row.mode == Mode.NONE:
                free += 1
                continue
            held[row.mode] += 1
            slices += row.allocated_slices
        return {
            "cards": cards,
            "free": free,
            "exclusive": held[Mode.EXCLUSIVE],
            "shared": held[Mode.SHARED],
            "sliced": held[Mode.SLICED],
            "partitioned": held[Mode.PARTITIONED],
            "slices": slices,
        }

    def render_status(self) -> Obj:
        """The ledger and the records it charges from a journal (`unrecorded`)."""
        status = self.status.render()
        if self.unrecorded:
            status = {**status, "unrecorded": [entry.render() for entry in self.unrecorded]}
        return status

    def render(self) -> Obj:
        metadata: Obj = {"name": self.name}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {
            "apiVersion": DEVICES_API,
            "kind": DEVICES_KIND,
            "metadata": metadata,
            "spec": self.spec.render(),
            "status": self.render_status(),
        }
