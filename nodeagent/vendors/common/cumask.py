"""AMD compute slices: the compute-unit window a slice gets, for `HSA_CU_MASK` (pure).

ROCr enforces compute in hardware through `HSA_CU_MASK`, read while it initialises, before any
preloaded library exists, so the operator derives the mask from the card's topology:

- CDNA (`gfx9*`) allocates CUs across its XCCs: the atom is one CU per XCC, so a window is
  `round_half_up(CU * pct / 100)` CUs rounded down to a multiple of the XCC count;
- RDNA (`gfx10*`-`gfx12*`) allocates in WGP pairs across its shader engines: the window is
  `round_half_up(WGP * pct / 100)` WGPs rounded down to a multiple of the shader-engine count,
  two CUs each.

So the smallest requestable percentage is a property of the card, `ceil((100 * atom - 50) /
units)` (9 % on a 60 CU / 3 shader-engine part, 3 % on a 304 CU / 8 XCC one). A request below it
is refused, naming that minimum, rather than rounded up into a ceiling nobody asked for; one above
it that misses the atom is aligned down (the caller logs the percentage delivered).

Windows of one card are placed beside each other: on multiples of the card's quantum (XCC count,
or two CUs per shader engine), the first start that overlaps no other slice's window, else the
one overlapping the fewest CUs (lowest start on a tie). A mask fails open (a mask ROCr rejects
gives the whole card, silently), which is why the slice also gets `rocm-cumask-check`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    gfx: str
    """The gfx target (`gfx942`)."""
    compute_units: int
    shader_engines: int = 0
    xcc: int = 0

    @property
    def cdna(self) -> bool:
        return self.gfx.startswith("gfx9")

    @property
    def rdna(self) -> bool:
        return self.gfx.startswith(("gfx10", "gfx11", "gfx12"))


def _round_half_up(numerator: int, denominator: int) -> int:
    return (numerator + denominator // 2) // denominator


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


@dataclass(frozen=True)
class Shape:
    """How a card's CUs are handed out: `units` of `unit_cus` CUs each, in atoms of `atom`
    units; windows start on multiples of `quantum` CUs."""

    units: int
    unit_cus: int
    atom: int
    quantum: int

    def minimum_percentage(self) -> int:
        return _ceil(100 * self.atom - 50, self.units)


def shape(card: Topology) -> Shape:
    """ValueError (naming the card's gfx target) when no mask can be derived."""
    where = f"cannot derive a CU mask for {card.gfx!r}"
    if card.compute_units <= 0:
        raise ValueError(f"{where}: it reports {card.compute_units} compute units")
    if card.cdna:
        if card.xcc <= 0:
            raise ValueError(
                f"{where}: it reports no XCC count, and on this architecture an unknown one "
                "cannot be assumed to be 1 (a mask sized for one XCC leaves every other XCC "
                "unmasked)"
            )
        found = Shape(card.compute_units, 1, card.xcc, card.xcc)
    elif card.rdna:
        if card.shader_engines <= 0:
            raise ValueError(f"{where}: it reports {card.shader_engines} shader engines")
        if card.compute_units % 2:
            raise ValueError(
                f"{where}: {card.compute_units} compute units is odd, and RDNA allocates in "
                "WGP pairs"
            )
        wgps = card.compute_units // 2
        if card.shader_engines > wgps:
            raise ValueError(
                f"{where}: {card.shader_engines} shader engines exceed its {wgps} WGPs"
            )
        found = Shape(wgps, 2, card.shader_engines, 2 * card.shader_engines)
    else:
        raise ValueError(
            f"{where}: unrecognised GPU architecture family, only gfx9* (CDNA) and "
            "gfx10*/gfx11*/gfx12* (RDNA) are supported"
        )
    if card.compute_units % found.quantum:
        raise ValueError(
            f"{where}: its {found.quantum}-CU quantum does not divide "
            f"{card.compute_units} compute units"
        )
    return found


def window_length(card: Topology, percentage: int) -> int:
    """The CUs a slice of `percentage` gets, aligned down to the card's atom."""
    found = shape(card)
    if not 1 <= percentage <= 100:
        raise ValueError(f"cannot derive a CU mask for {card.gfx!r}: {percentage}% is not a share")
    units = _round_half_up(found.units * percentage, 100) // found.atom * found.atom
    if units == 0:
        kind = "CUs" if found.unit_cus == 1 else "WGPs"
        raise ValueError(
            f"{percentage}% of {found.units} {kind} is below one {found.atom}-{kind[:-1]} atom "
            f"on this card ({card.gfx}); its smallest slice is {found.minimum_percentage()}%"
        )
    return min(units, found.units) * found.unit_cus


def delivered_percentage(card: Topology, length: int) -> int:
    return length * 100 // card.compute_units


def place(card: Topology, length: int, occupied: Iterable[tuple[int, int]]) -> int:
    """The start of a `length`-CU window beside the `(start, length)` windows other slices of
    the card hold: the first free quantum-aligned start, else the least overlapping one."""
    quantum = shape(card).quantum
    taken = [0] * card.compute_units
    for start, size in occupied:
        for cu in range(max(start, 0), min(start + size, card.compute_units)):
            taken[cu] = 1
    best, least = 0, None
    for start in range(0, card.compute_units - length + 1, quantum):
        overlap = sum(taken[start : start + length])
        if overlap == 0:
            return start
        if least is None or overlap < least:
            best, least = start, overlap
    return best


def mask_entry(position: int, start: int, length: int) -> str:
    """One card's `HSA_CU_MASK` entry: its position in `ROCR_VISIBLE_DEVICES`, then its CUs."""
    return f"{position}:{start}-{start + length - 1}"
