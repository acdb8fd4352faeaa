"""Card memory (VRAM, in MiB) as it appears in labels, notes and group ids.

Two spellings exist on purpose: the `.memory` label is an exact Kubernetes quantity (`15Gi`,
`44280Mi`) so it can be parsed back to the MiB the ledger divides by, while the optional group-id
suffix is a short lowercase floor (`43g`) because it is part of a key, not a measurement.
"""

from __future__ import annotations

import math

from chain.quantity import MIB, parse_quantity

_BINARY_UP_FROM_MIB = (("Ei", 2**40), ("Pi", 2**30), ("Ti", 2**20), ("Gi", 2**10))


def format_memory_label(mib: int) -> str:
    """`<mib>Mi` in the largest binary unit that keeps it whole (Kubernetes' canonical form)."""
    if mib == 0:
        return "0"
    for suffix, size in _BINARY_UP_FROM_MIB:
        if mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


def format_group_memory(mib: int) -> str:
    """The `-<mem>` group-id suffix: floor to the largest binary unit, lowercase, no `i`.

    Anything under 1 GiB reads `1g` (not `0g`) so a tiny card still names a non-zero size; only
    an unknown size (0) reads `0g`.
    """
    if mib <= 0:
        return "0g"
    for suffix, size in _BINARY_UP_FROM_MIB:
        if mib >= size:
            return f"{mib // size}{suffix[0].lower()}"
    return "1g"


def memory_mib(quantity: str) -> int:
    """MiB in a memory quantity (label, note or status field), floored; ValueError if invalid."""
    value = parse_quantity(quantity)
    if value < 0:
        raise ValueError(f"{quantity!r} is a negative memory size")
    return math.floor(value / MIB)
