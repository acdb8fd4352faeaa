"""The Node `status.capacity` counting keys (docs/design/control-plane.md, "Counting keys").

The kubelet counts whole tokens (`<base>.sliced`, `<base>.partitioned`) that device plugins
advertise; the sizes a request carries (`.sliced.units`, `.sliced.memory-mib`, per-profile
partition counts, ...) are extended resources nobody advertises, so the node agent patches them
onto the Node's status. The scheduler can then refuse a node whose cards cannot hold the request.

Per manufacturer, over the models the node's labels and its `Devices` spec both name (joined by
aKey `<mfr>-<group id>`):

- a card is *partitioned* when `physicalSliced.count > 0`, *logical* when `logicalSliced.count > 0`
  and not partitioned, else neither;
- `.sliced.units` = logical cards x M; `.sliced.memory-percentage` = logical cards x 100;
  `.sliced.memory-mib` = logical cards x the card MiB from the group's `.memory` label;
  `.sliced.cores-percentage` = the group's logical slice count x 100 when the group overcommits
  cores, else logical cards x 100;
- `.partitioned.units` = partitioned cards x M; `.partitioned.<kind>-<profile>` = per profile the
  bound plus still creatable instances on partitioned cards (a card whose ledger row is not ready
  counts the profile's static per-card maximum), every offered profile even at 0.

Sliced keys appear only while the node advertises `<base>.sliced` (> 0), partitioned keys only
while it advertises `<base>.partitioned`: a size without any token would let the scheduler pick a
node where no container can get a card.

Judgment calls:
- An unmanaged node (or one without a Devices object) wants no keys, and the keys it still
  carries are nulled: a node that left the chain must not keep attracting sliced Pods.
- The `.memory` label is the source the spec names; when it is missing or unreadable the group's
  `memory` from the Devices spec stands in (both come from the same detection).
- Overcommit is decided per group from its cards (`aggregate_sliced_detail`), not from the
  stored `acceleratorSlicedDetail`, which an older agent may not have written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chain.devices import Devices, DevicesGroup, aggregate_sliced_detail
from chain.families import (
    PARTITIONED,
    PARTITIONED_UNITS,
    SLICED,
    SLICED_CORES_PERCENTAGE,
    SLICED_MEMORY_MIB,
    SLICED_MEMORY_PERCENTAGE,
    SLICED_UNITS,
    Family,
    classify_resource,
)
from chain.labels import accelerator_feature_key, accelerator_keys_of, is_managed
from chain.ledger import DevicesStatus
from chain.manufacturers import Manufacturer, ManufacturerTable
from chain.memory import memory_mib
from chain.partitions import partitioned_profile_key, publish_profile_name
from chain.quantity import parse_quantity
from chain.units import RESOURCE_MAX_UNITS

COUNTING_SUFFIXES = (
    SLICED_UNITS,
    SLICED_CORES_PERCENTAGE,
    SLICED_MEMORY_PERCENTAGE,
    SLICED_MEMORY_MIB,
    PARTITIONED_UNITS,
)
"""The fixed counting keys' suffixes; per-profile partition keys come on top."""


@dataclass(frozen=True)
class CapacityPatch:
    """What the node's `status.capacity` should carry, and which of our keys must go."""

    desired: dict[str, str]
    """Every counting key the node should carry, with its value."""
    changed: dict[str, str]
    """The part of `desired` the node does not carry yet (or carries with another value)."""
    stale: tuple[str, ...]
    """Counting keys the node carries that it should not."""

    def merge_patch(self) -> dict[str, object]:
        """The Node status merge patch (`null` deletes a key); empty when nothing changes."""
        changes: dict[str, str | None] = dict(self.changed)
        changes.update(dict.fromkeys(self.stale))
        return {"status": {"capacity": changes}} if changes else {}


def is_counting_key(key: str, table: ManufacturerTable) -> bool:
    """True for a capacity key this module owns (and may therefore delete)."""
    kind = classify_resource(key, table)
    if kind.family is Family.PARTITIONED and kind.profile:
        return True
    return kind.family is not Family.NONE and kind.suffix in COUNTING_SUFFIXES


def node_capacity_patch(
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    devices: Devices | None,
    table: ManufacturerTable,
) -> CapacityPatch:
    """The counting keys of one node against what its `status.capacity` holds now."""
    wanted = desired_counting_keys(labels, capacity, devices, table)
    changed = {k: v for k, v in wanted.items() if not _same_quantity(capacity.get(k), v)}
    stale = sorted(key for key in capacity if is_counting_key(key, table) and key not in wanted)
    return CapacityPatch(wanted, changed, tuple(stale))


def desired_counting_keys(
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    devices: Devices | None,
    table: ManufacturerTable,
) -> dict[str, str]:
    """Every counting key the node should carry, with its value."""
    if devices is None or not is_managed(labels):
        return {}
    groups = devices.spec.by_accelerator_key()
    totals: dict[str, int] = {}
    for key in accelerator_keys_of(labels, table):
        group = groups.get(key)
        if group is None:
            continue
        maker = table[group.manufacturer]
        card_mib = _card_mib(labels, group)
        if _advertised(capacity, maker.resource_name + SLICED):
            _add(totals, _sliced_counts(maker, group, card_mib))
        if _advertised(capacity, maker.resource_name + PARTITIONED):
            _add(totals, _partitioned_counts(maker, group, devices.status))
    return {key: str(value) for key, value in sorted(totals.items())}


def _sliced_counts(maker: Manufacturer, group: DevicesGroup, card_mib: int) -> dict[str, int]:
    logical = [card for card in group.accelerators if card.is_logically_sliceable]
    if not logical:
        return {}
    detail = aggregate_sliced_detail(logical).logical
    base = maker.resource_name
    cores = detail.count if detail.cores_percentage_overcommit else len(logical)
    return {
        base + SLICED_UNITS: len(logical) * RESOURCE_MAX_UNITS,
        base + SLICED_CORES_PERCENTAGE: cores * 100,
        base + SLICED_MEMORY_PERCENTAGE: len(logical) * 100,
        base + SLICED_MEMORY_MIB: len(logical) * card_mib,
    }


def _partitioned_counts(
    maker: Manufacturer, group: DevicesGroup, status: DevicesStatus
) -> dict[str, int]:
    cards = [card for card in group.accelerators if card.is_partitioned]
    if not cards:
        return {}
    counts = {maker.resource_name + PARTITIONED_UNITS: len(cards) * RESOURCE_MAX_UNITS}
    for card in cards:
        row = status.row(group.manufacturer, group.id, card.id)
        ready = row is not None and row.partition_ledger_ready
        for profile in card.status.physical_sliced.profiles:
            key = partitioned_profile_key(maker, publish_profile_name(maker.name, profile.name))
            if key is None:
                continue
            if row is not None and ready:
                instances = row.allocated_of(profile.name) + row.remaining_of(profile.name)
            else:
                instances = profile.count
            counts[key] = counts.get(key, 0) + instances
    return counts


def _card_mib(labels: Mapping[str, str], group: DevicesGroup) -> int:
    label = labels.get(accelerator_feature_key(group.accelerator_key) + ".memory", "")
    try:
        return memory_mib(label) if label else group.memory
    except ValueError:
        return group.memory


def _same_quantity(held: str | None, wanted: str) -> bool:
    """Whether the Node holds `wanted` already, in whatever spelling: the API server keeps a
    quantity in its canonical form (6400000 comes back as `6400k`), and comparing the strings
    patched such a key again on every report."""
    if held is None:
        return False
    try:
        return held == wanted or parse_quantity(held) == parse_quantity(wanted)
    except ValueError:
        return False


def _advertised(capacity: Mapping[str, str], key: str) -> bool:
    try:
        return parse_quantity(capacity.get(key, "0")) > 0
    except ValueError:
        return False


def _add(totals: dict[str, int], counts: Mapping[str, int]) -> None:
    for key, value in counts.items():
        totals[key] = totals.get(key, 0) + value
