"""The ledger the admission verdict judges with: card by card, the busier of two readings.

The node agent publishes `Devices.status` by rebuilding it from the Pods' allocation annotations
(`chain.ledger_rebuild.rebuild_status`), but the write lags the annotations: a card the device
plugin granted a moment ago still reads free in the published status. The verdict driver reads
the node's Pods anyway, so it rebuilds the ledger too and keeps, per card, whatever leaves less
room. A node whose status is written without annotations (no device plugin) rebuilds to free
rows, so its published ledger passes through unchanged.

"Busier" is taken field by field, so the merged row never offers more than either reading by any
measure the fit uses (units left, slice slots, shares, slice room, partition instances):
- `remaining` is the smaller, `allocatedSlices` and the allocated profile counts the larger;
- the mode is the one that is not None; two different held modes mean the card changed hands
  between the readings, so the row offers nothing (held, no units, no partition instance);
- partition instances count only when both readings report them (`partition_ledger_ready`),
  each profile at the smaller count; otherwise the merged row reports none (ledger not ready).

A card without a row is untouched (all M units, no partition report), as `chain.ledger` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from chain.devices import DevicesSpec
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.units import RESOURCE_MAX_UNITS


def _untouched(like: AcceleratorAllocation) -> AcceleratorAllocation:
    return AcceleratorAllocation(id=like.id, index=like.index, remaining=RESOURCE_MAX_UNITS)


def _counts(
    a: Iterable[ProfileCount], b: Iterable[ProfileCount], pick: Callable[[int, int], int]
) -> tuple[ProfileCount, ...]:
    left = {p.name: p.count for p in a}
    right = {p.name: p.count for p in b}
    # A profile one reading does not list has no instance there.
    names = sorted({*left, *right})
    return tuple(ProfileCount(n, pick(left.get(n, 0), right.get(n, 0))) for n in names)


def busier_row(
    published: AcceleratorAllocation | None, rebuilt: AcceleratorAllocation | None
) -> AcceleratorAllocation | None:
    """One card's row that leaves no more room than either reading (None: both untouched)."""
    if published is None and rebuilt is None:
        return None
    if published is None or rebuilt is None:
        known = published or rebuilt
        assert known is not None
        published, rebuilt = published or _untouched(known), rebuilt or _untouched(known)
    held = {row.mode for row in (published, rebuilt)} - {Mode.NONE}
    conflict = len(held) > 1
    if conflict:
        # Partitioned wins so a partition demand still reads "no instance left" on this card.
        mode = Mode.PARTITIONED if Mode.PARTITIONED in held else Mode.EXCLUSIVE
    else:
        mode = held.pop() if held else Mode.NONE
    allocated: tuple[ProfileCount, ...] = ()
    left: tuple[ProfileCount, ...] = ()
    if published.partition_ledger_ready and rebuilt.partition_ledger_ready:
        allocated = _counts(published.allocated_profiles, rebuilt.allocated_profiles, max)
        left = _counts(published.remaining_profiles, rebuilt.remaining_profiles, min)
        if conflict:
            left = tuple(ProfileCount(p.name, 0) for p in left)
    return AcceleratorAllocation(
        id=published.id,
        index=published.index,
        mode=mode,
        remaining=0 if conflict else min(published.remaining, rebuilt.remaining),
        allocated_slices=max(published.allocated_slices, rebuilt.allocated_slices),
        allocated_profiles=allocated,
        remaining_profiles=left,
    )


def busier_ledger(
    spec: DevicesSpec, published: DevicesStatus, rebuilt: DevicesStatus
) -> DevicesStatus:
    """The node's ledger, per spec card the busier of the published and the rebuilt row.

    Rows of cards the spec does not list are dropped: no verdict can place anything on them."""
    groups = []
    for group in spec.groups:
        rows = []
        for card in group.accelerators:
            row = busier_row(
                published.row(group.manufacturer, group.id, card.id),
                rebuilt.row(group.manufacturer, group.id, card.id),
            )
            if row is not None:
                rows.append(row)
        if rows:
            groups.append(DevicesAllocationGroup(group.id, group.manufacturer, tuple(rows)))
    return DevicesStatus(tuple(groups))
