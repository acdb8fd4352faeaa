"""What the InstanceType views read from a pool's `Devices` objects.

A pool's views look at one card group (the pool's aKey) on every node of the pool, each card
joined to its ledger row. Reading that through `Devices.parse` would build every group, card
topology and placement of the object, most of which the views never look at; a pool of a
thousand nodes is re-read on every ledger change, so `pool_node` reads only the pool's group and
its rows, and checks only the fields it reads (a ValueError names the field, relative to the
object).

The join follows the ledger's wire rules (`chain.ledger`): a card without a row is untouched
(M units left), a row without `remaining` is a fully used card (0 left). A partitioned card is
never read as full for a missing or empty row: the views fall back to the card's catalog.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from chain import fields
from chain.accelerators import AcceleratorStatus, LogicalSliced, PartitionProfile, PhysicalSliced
from chain.keys import accelerator_key
from chain.labels import ACCELERATABLE_PREFIX, ARCH, GENERAL_PREFIX, MANAGED, OS, TRUE
from chain.ledger import AcceleratorAllocation, Mode, ProfileCount
from chain.units import RESOURCE_MAX_UNITS


def pool_devices_selector(schedule_labels: Mapping[str, str]) -> dict[str, str] | None:
    """`poolDevicesSelector`: the labels a pool's `Devices` objects carry.

    The pool's feature keys (`acceleratable.`/`general.` ones set to `true`), os and arch, and
    `gpustack.ai/managed=true`. `feature.gpustack.ai/acceleratable` is left out: it is a node
    and flavor label, never a Devices one. None when the labels name no accelerator (a CPU
    pool has no Devices, and os/arch alone would select every node of a platform).
    """
    selector = {MANAGED: TRUE}
    accelerated = False
    for key, value in schedule_labels.items():
        if key in (OS, ARCH):
            selector[key] = value
        elif value == TRUE and key.startswith((GENERAL_PREFIX, ACCELERATABLE_PREFIX)):
            selector[key] = value
            accelerated = accelerated or key.startswith(ACCELERATABLE_PREFIX)
    return selector if accelerated else None


@dataclass(frozen=True)
class PoolCard:
    """One card of the pool's group, with its ledger row (None: the ledger has no row yet)."""

    id: str
    capability: AcceleratorStatus
    """What the card can be cut into; placements are not read (left empty)."""
    row: AcceleratorAllocation | None
    """The ledger row's mode, remaining units and partition counts (the other fields are not
    read and may be left unset)."""

    @property
    def partitioned(self) -> bool:
        return self.capability.partitioned

    @property
    def logically_sliceable(self) -> bool:
        return self.capability.logically_sliceable

    @property
    def remaining(self) -> int:
        """Units still free on the card."""
        return RESOURCE_MAX_UNITS if self.row is None else self.row.remaining

    @property
    def mode(self) -> Mode:
        return Mode.NONE if self.row is None else self.row.mode

    @property
    def ledger_ready(self) -> bool:
        """`PartitionLedgerReady`: the row reports partition instances, so its counts hold."""
        return self.row is not None and self.row.partition_ledger_ready


@dataclass(frozen=True)
class PoolNode:
    """The pool's card group on one node (one `Devices` object)."""

    name: str
    manufacturer: str
    runtime_version: str
    compute_capability: str
    cards: tuple[PoolCard, ...]
    rdma: bool = False
    """An RDMA port of the node is up (`spec.interfaces`, docs/topology.md, "Network cards")."""


def _group(obj: fields.Obj, section: str, akey: str) -> tuple[fields.Obj, str] | None:
    """The entry of `<section>.groups` whose manufacturer and id make `akey`, with its path."""
    for entry, where in fields.items(fields.child(obj, section, ""), "groups", section):
        maker = fields.string(entry, "manufacturer", where, required=True)
        ident = fields.string(entry, "id", where, required=True)
        if accelerator_key(maker, ident) == akey:
            return entry, where
    return None


# The fast readers below accept only exact, well-formed JSON (`type(x) is int` rejects `3.0`
# and `True`) and return None on anything else; the typed parser then reads the same entry and
# either names the broken field or accepts what the fast path was too strict for. Placements,
# topology and the per-pod transport fields are never read here: the views do not use them.


_MODES = tuple(Mode)
"""Modes by wire number (enum lookup by value is slow, and this runs once per card)."""


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


def fast_profiles(raw: object) -> tuple[ProfileCount, ...] | None:
    """A list of profile counts read fast, or None: the typed reader decides (shared with the
    worker gateway's readers, which read the same wire shape)."""
    if raw is None:
        return ()
    if type(raw) is not list:
        return None
    out = []
    for entry in raw:
        if type(entry) is not dict:
            return None
        name, count = entry.get("name"), entry.get("count", 0)
        if type(name) is not str or not name or not _count(count):
            return None
        out.append(ProfileCount(name, count))
    return tuple(out)


def _fast_row(item: object) -> AcceleratorAllocation | None:
    if type(item) is not dict:
        return None
    ident, index, mode = item.get("id"), item.get("index"), item.get("mode")
    remaining = item.get("remaining", 0)
    if type(ident) is not str or not ident or not _count(index) or not _count(remaining):
        return None
    if type(mode) is not int or not 0 <= mode < len(_MODES):
        return None
    allocated = fast_profiles(item.get("allocatedProfiles"))
    left = fast_profiles(item.get("remainingProfiles"))
    if allocated is None or left is None:
        return None
    return AcceleratorAllocation(
        ident,
        index,
        _MODES[mode],
        remaining=remaining,
        allocated_profiles=allocated,
        remaining_profiles=left,
    )


def _fast_capability(status: object) -> AcceleratorStatus | None:
    if status is None:
        return _capability(0, False, 0, ())
    if type(status) is not dict:
        return None
    logical = status.get("logicalSliced") or {}
    physical = status.get("physicalSliced") or {}
    if type(logical) is not dict or type(physical) is not dict:
        return None
    count, overcommit = logical.get("count", 0), logical.get("coresPercentageOvercommit", False)
    partitions, raw = physical.get("count", 0), physical.get("profiles") or []
    if not _count(count) or type(overcommit) is not bool or not _count(partitions):
        return None
    if type(raw) is not list:
        return None
    profiles = []
    for entry in raw:
        if type(entry) is not dict:
            return None
        name, limit, memory = entry.get("name"), entry.get("count", 0), entry.get("memoryMib", 0)
        if type(name) is not str or not name or not _count(limit) or not _count(memory):
            return None
        profiles.append((name, memory, limit))
    return _capability(count, overcommit, partitions, tuple(profiles))


@functools.lru_cache(maxsize=256)
def _capability(
    count: int, overcommit: bool, partitions: int, profiles: tuple[tuple[str, int, int], ...]
) -> AcceleratorStatus:
    """One shared value per distinct capability: a pool's cards are nearly all alike."""
    return AcceleratorStatus(
        logical_sliced=LogicalSliced(count, overcommit),
        physical_sliced=PhysicalSliced(
            partitions, tuple(PartitionProfile(*profile) for profile in profiles)
        ),
    )


def _entries(obj: fields.Obj, key: str, path: str) -> list[fields.Obj]:
    """The objects of a list field; the field reader explains a list that is not one."""
    raw = obj.get(key)
    if type(raw) is list and all(type(item) is dict for item in raw):
        return raw
    return [item for item, _ in fields.items(obj, key, path)]


def _rows(obj: fields.Obj, akey: str) -> dict[str, AcceleratorAllocation]:
    ledger = _group(obj, "status", akey)
    rows: dict[str, AcceleratorAllocation] = {}
    if ledger is None:
        return rows
    group, where = ledger
    for number, item in enumerate(_entries(group, "accelerators", where)):
        row = _fast_row(item)
        if row is None:
            row = AcceleratorAllocation.parse(item, f"{where}.accelerators[{number}]")
        rows.setdefault(row.id, row)
    return rows


def rdma_up(spec: object) -> bool:
    """Whether a Devices spec lists an RDMA port that is up. Read leniently: the CRD schema
    checks the entries, and a node is never kept out of its pool over this one fact."""
    interfaces = spec.get("interfaces") if isinstance(spec, Mapping) else None
    return isinstance(interfaces, list) and any(
        isinstance(entry, Mapping) and entry.get("rdma") is True and entry.get("up") is True
        for entry in interfaces
    )


def pool_node(obj: Mapping[str, object], akey: str) -> PoolNode | None:
    """The pool's group (aKey `akey`) on the node a `Devices` object describes, joined to the
    ledger; None when the node has no card of that group."""
    body = fields.as_object(obj, "$")
    name = fields.string(
        fields.child(body, "metadata", "", required=True), "name", "metadata", True
    )
    found = _group(body, "spec", akey)
    if found is None:
        return None
    group, where = found
    rows = _rows(body, akey)
    cards = []
    for number, item in enumerate(_entries(group, "accelerators", where)):
        path = f"{where}.accelerators[{number}]"
        card_id = item.get("id")
        if type(card_id) is not str or not card_id:
            card_id = fields.string(item, "id", path, required=True)
        capability = _fast_capability(item.get("status"))
        if capability is None:
            status = fields.child(item, "status", path)
            capability = AcceleratorStatus.parse(status, fields.at(path, "status"))
        cards.append(PoolCard(card_id, capability, rows.get(card_id)))
    return PoolNode(
        name=name,
        manufacturer=fields.string(group, "manufacturer", where),
        runtime_version=fields.string(group, "runtimeVersion", where),
        compute_capability=fields.string(group, "computeCapability", where),
        cards=tuple(cards),
        rdma=rdma_up(body.get("spec")),
    )
