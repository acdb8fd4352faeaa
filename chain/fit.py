"""Per-card room and the node fit labels (docs/design/control-plane.md, "Fit labels").

Kueue's topology-aware scheduler sums a node's capacity keys, so it cannot see that a node's free
slice units are spread over cards none of which fits a slice, or that its shared tokens sit on
too few cards. Two labels per card model close that gap: the largest slice one card can still
take, and how many cards still have a free share. The Workload webhook pins a Workload to nodes
whose labels show room, and the admission check measures each card with the same helpers.

A card without a ledger row is untouched: mode None, all M units, no slices (`chain.ledger`).

Judgment call: a ledger row whose card is not in the spec is skipped; without the spec there is
no way to know what the card can serve, and the node agent writes rows only for spec cards.
"""

from __future__ import annotations

from collections.abc import Mapping

from chain.accelerators import Accelerator
from chain.devices import Devices
from chain.keys import accelerator_key
from chain.labels import is_fit_label_key, shared_fit_key, sliced_fit_key
from chain.ledger import AcceleratorAllocation, Mode
from chain.units import RESOURCE_MAX_UNITS, units_to_shares

_SLICEABLE_MODES = (Mode.NONE, Mode.SLICED)
_SHAREABLE_MODES = (Mode.NONE, Mode.SHARED)


def _mode(row: AcceleratorAllocation | None) -> Mode:
    return Mode.NONE if row is None else row.mode


def remaining(row: AcceleratorAllocation | None) -> int:
    """Units free on a card (M for a card the ledger has not listed)."""
    return RESOURCE_MAX_UNITS if row is None else row.remaining


def free_slots(card: Accelerator, row: AcceleratorAllocation | None) -> int:
    """Logical slices the card can still host: its slice count minus the slices held."""
    held = 0 if row is None else row.allocated_slices
    return card.status.logical_sliced.count - held


def free_slice_units(card: Accelerator, row: AcceleratorAllocation | None) -> int:
    """Units a new slice may take on the card, or -1 when the card takes no slice now."""
    if card.is_logically_sliceable and _mode(row) in _SLICEABLE_MODES and free_slots(card, row) > 0:
        return remaining(row)
    return -1


def free_shares(card: Accelerator, row: AcceleratorAllocation | None) -> int:
    """Shares (of 10 per card) still free on the card; 0 when it is held another way."""
    if card.is_partitioned or _mode(row) not in _SHAREABLE_MODES:
        return 0
    return units_to_shares(remaining(row))


def serves_sliced(card: Accelerator) -> bool:
    return card.is_logically_sliceable


def serves_shared(card: Accelerator) -> bool:
    return card.is_whole_accelerator_capable


def fit_labels(devices: Devices | None, managed: bool) -> dict[str, str]:
    """The fit labels a node should carry (`NodeFitLabelReconciler`), from its Devices.

    Per ledger group: `sliced-max-free-units...` when some card serves slices (the largest
    `free_slice_units`, never below 0), `shared-free-cards...` when some card serves shares (how
    many have a free share). An unmanaged node or one without Devices carries none.
    """
    if devices is None or not managed:
        return {}
    labels: dict[str, str] = {}
    for group in devices.status.groups:
        spec = devices.spec.group(group.manufacturer, group.id)
        if spec is None:
            continue
        akey = accelerator_key(group.manufacturer, group.id)
        sliced: int | None = None
        shared: int | None = None
        for row in group.accelerators:
            card = spec.accelerator(row.id)
            if card is None:
                continue
            if serves_sliced(card):
                sliced = max(sliced or 0, free_slice_units(card, row))
            if serves_shared(card):
                shared = (shared or 0) + (free_shares(card, row) > 0)
        for key, value in ((sliced_fit_key(akey), sliced), (shared_fit_key(akey), shared)):
            if value is not None and is_fit_label_key(key):
                labels[key] = str(value)
    return labels


def fit_label_patch(
    current: Mapping[str, str], desired: Mapping[str, str]
) -> dict[str, str | None]:
    """A merge patch of node labels: changed fit labels set, stale ones nulled, nothing else."""
    patch: dict[str, str | None] = {
        key: value for key, value in desired.items() if current.get(key) != value
    }
    patch.update((key, None) for key in current if is_fit_label_key(key) and key not in desired)
    return patch
