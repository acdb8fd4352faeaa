"""The ledger types: `Devices.status`, one allocation row per card.

The node agent rebuilds the ledger from the Pods on its node; the admission check, the views and
the node capacity keys read it. This module only holds the shapes and their wire form; the rules
that compute a ledger live with whoever computes it.

Wire quirks kept on purpose (docs/design/node-agent.md, "Wire quirks"):
- `mode` is a bare integer, and Visibility (5) is never written to the ledger.
- `remaining` is `omitempty`: a row without it has 0 units left (a fully used card). A card
  without any row is untouched and has all M units; `remaining_of` says so in one place.
- The per-pod transport fields (`allocated`, `allocatedPhysical*`, `allocatedLogicalPlacements`)
  travel in the Pod annotation; in the aggregated ledger they stay empty.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from chain import fields
from chain.partitions import Placement, parse_placements
from chain.units import RESOURCE_MAX_UNITS

Obj = dict[str, object]


class Mode(enum.IntEnum):
    """How a card is held. The numbers are the wire values."""

    NONE = 0
    """Free."""
    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4
    VISIBILITY = 5
    """An SSH sidecar seeing its workload's cards; internal, never in the ledger."""

    def __str__(self) -> str:
        # Upstream's `String()`: None, Exclusive, Shared, ... (used in refusal messages).
        return self.name.capitalize()

    @classmethod
    def parse(cls, value: object, path: str) -> Mode:
        number = fields.whole(value, path)
        try:
            return cls(number)
        except ValueError:
            raise ValueError(f"{path}: unknown mode {number}; known: 0-5") from None


@dataclass(frozen=True)
class ProfileCount:
    """Instances of one partition profile (bound or still creatable)."""

    name: str
    count: int

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> ProfileCount:
        return cls(
            fields.string(obj, "name", path, required=True), fields.integer(obj, "count", path)
        )

    def render(self) -> Obj:
        return {"name": self.name, "count": self.count}


def _profiles(obj: fields.Obj, key: str, path: str) -> tuple[ProfileCount, ...]:
    return tuple(ProfileCount.parse(item, where) for item, where in fields.items(obj, key, path))


@dataclass(frozen=True)
class AcceleratorAllocation:
    """One card's ledger row (or, in a Pod annotation, one container's claim on a card)."""

    id: str
    index: int
    mode: Mode = Mode.NONE
    allocated: int = 0
    """Units of this claim (per-pod transport; 0 in the aggregated ledger)."""
    remaining: int = 0
    """Units still free on the card."""
    allocated_slices: int = 0
    """Containers holding a logical slice of the card."""
    allocated_profiles: tuple[ProfileCount, ...] = ()
    remaining_profiles: tuple[ProfileCount, ...] = ()
    """Partition instances still creatable, given where the bound ones sit."""
    allocated_physical_profile: str = ""
    allocated_physical_placements: tuple[Placement, ...] = ()
    allocated_physical_id: str = ""
    allocated_logical_placements: tuple[Placement, ...] = ()

    @property
    def partition_ledger_ready(self) -> bool:
        """`PartitionLedgerReady`: the row reports partition instances, so counts can be trusted."""
        return bool(self.allocated_profiles or self.remaining_profiles)

    def allocated_of(self, profile: str) -> int:
        return _count_of(self.allocated_profiles, profile)

    def remaining_of(self, profile: str) -> int:
        return _count_of(self.remaining_profiles, profile)

    _INTS = (
        ("allocated", "allocated"),
        ("remaining", "remaining"),
        ("allocatedSlices", "allocated_slices"),
    )
    _PROFILE_LISTS = (
        ("allocatedProfiles", "allocated_profiles"),
        ("remainingProfiles", "remaining_profiles"),
    )
    _PLACEMENT_LISTS = (
        ("allocatedPhysicalPlacements", "allocated_physical_placements"),
        ("allocatedLogicalPlacements", "allocated_logical_placements"),
    )

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> AcceleratorAllocation:
        if obj.get("mode") is None:
            raise ValueError(f"{fields.at(path, 'mode')}: required")
        return cls(
            id=fields.string(obj, "id", path, required=True),
            index=fields.integer(obj, "index", path, required=True),
            mode=Mode.parse(obj["mode"], fields.at(path, "mode")),
            allocated=fields.integer(obj, "allocated", path),
            remaining=fields.integer(obj, "remaining", path),
            allocated_slices=fields.integer(obj, "allocatedSlices", path),
            allocated_profiles=_profiles(obj, "allocatedProfiles", path),
            remaining_profiles=_profiles(obj, "remainingProfiles", path),
            allocated_physical_profile=fields.string(obj, "allocatedPhysicalProfile", path),
            allocated_physical_placements=parse_placements(
                obj, "allocatedPhysicalPlacements", path
            ),
            allocated_physical_id=fields.string(obj, "allocatedPhysicalID", path),
            allocated_logical_placements=parse_placements(obj, "allocatedLogicalPlacements", path),
        )

    def render(self) -> Obj:
        out: Obj = {"id": self.id, "index": self.index, "mode": int(self.mode)}
        for key, name in self._INTS:
            if getattr(self, name):
                out[key] = getattr(self, name)
        for key, name in self._PROFILE_LISTS:
            if getattr(self, name):
                out[key] = [entry.render() for entry in getattr(self, name)]
        if self.allocated_physical_profile:
            out["allocatedPhysicalProfile"] = self.allocated_physical_profile
        if self.allocated_physical_id:
            out["allocatedPhysicalID"] = self.allocated_physical_id
        for key, name in self._PLACEMENT_LISTS:
            if getattr(self, name):
                out[key] = [entry.render() for entry in getattr(self, name)]
        return out


def _count_of(entries: tuple[ProfileCount, ...], profile: str) -> int:
    return sum(entry.count for entry in entries if entry.name == profile)


@dataclass(frozen=True)
class DevicesAllocationGroup:
    """The ledger rows of one spec group."""

    id: str
    manufacturer: str
    accelerators: tuple[AcceleratorAllocation, ...] = ()

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> DevicesAllocationGroup:
        return cls(
            id=fields.string(obj, "id", path, required=True),
            manufacturer=fields.string(obj, "manufacturer", path, required=True),
            accelerators=tuple(
                AcceleratorAllocation.parse(item, where)
                for item, where in fields.items(obj, "accelerators", path)
            ),
        )

    def render(self) -> Obj:
        out: Obj = {"id": self.id, "manufacturer": self.manufacturer}
        if self.accelerators:
            out["accelerators"] = [row.render() for row in self.accelerators]
        return out


@dataclass(frozen=True)
class DevicesStatus:
    groups: tuple[DevicesAllocationGroup, ...] = ()

    def rows(self) -> Iterator[tuple[DevicesAllocationGroup, AcceleratorAllocation]]:
        for entry in self.groups:
            for row in entry.accelerators:
                yield entry, row

    def row(self, manufacturer: str, group_id: str, card_id: str) -> AcceleratorAllocation | None:
        """The row of one card, or None when the ledger has not listed it yet."""
        for entry, row in self.rows():
            if entry.manufacturer == manufacturer and entry.id == group_id and row.id == card_id:
                return row
        return None

    def remaining_of(self, manufacturer: str, group_id: str, card_id: str) -> int:
        """Units free on a card: a missing row is an untouched card (M), a row without
        `remaining` a fully used one (0)."""
        row = self.row(manufacturer, group_id, card_id)
        return RESOURCE_MAX_UNITS if row is None else row.remaining

    @classmethod
    def parse(cls, obj: fields.Obj, path: str = "status") -> DevicesStatus:
        return cls(
            tuple(
                DevicesAllocationGroup.parse(item, where)
                for item, where in fields.items(obj, "groups", path)
            )
        )

    def render(self) -> Obj:
        return {"groups": [entry.render() for entry in self.groups]} if self.groups else {}


@dataclass(frozen=True)
class UnrecordedRecord:
    """A Pod's allocation record the API server has not taken, listed in `Devices.status`
    (`unrecorded`) by the node agent that granted the cards.

    The kubelet granted the cards and the container runs on them, but the record could not be
    written onto the Pod: the API server refused it (an admission policy, e.g. over a tenant's
    oversized annotations) or keeps failing that one write. The agent keeps trying, and until the
    record lands it publishes it here: the ledger rows of the same object charge its cards, and
    whoever reads the Pods' records (the verdict driver) reads this one in place of the Pod's
    annotation, so the cards count once, from the ledger, and never as a promise besides."""

    uid: str
    namespace: str
    name: str
    record: str
    """The annotation value the agent keeps writing (the Pod's whole record, its latest)."""
    agent: str = ""
    """Which agent of the node keeps it (its manufacturers, comma-separated): each agent
    rewrites its own entries and carries the others' along."""
    reason: str = ""
    """Why it has not landed: `Forbidden`, `Invalid`, `BadRequest` (refused by the API server,
    retried at the longest backoff), or a transient one (`Conflict`, `Timeout`, ...)."""
    message: str = ""
    """The API server's answer, as first given for that reason."""

    _REQUIRED = ("uid", "namespace", "name", "record")
    _OPTIONAL = ("agent", "reason", "message")

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> UnrecordedRecord:
        given = {key: fields.string(obj, key, path, required=True) for key in cls._REQUIRED}
        given |= {key: fields.string(obj, key, path) for key in cls._OPTIONAL}
        return cls(**given)

    @classmethod
    def parse_all(cls, status: fields.Obj, path: str = "status") -> tuple[UnrecordedRecord, ...]:
        """`status.unrecorded`, ordered by uid (the order every writer renders them in)."""
        found = (cls.parse(item, where) for item, where in fields.items(status, "unrecorded", path))
        return tuple(sorted(found, key=lambda entry: entry.uid))

    def render(self) -> Obj:
        out: Obj = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "record": self.record,
        }
        for key in self._OPTIONAL:
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out
