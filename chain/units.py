"""Units and credits: the one scale every gate of the chain agrees on.

A whole card is `RESOURCE_MAX_UNITS` (upstream's `ResourceMaxUnits`, "M" in the specs and in the
prose of this repository) units on the node (the `Devices` ledger) and as many credits in Kueue.
M = 1,600,000 = 2^9 * 5^5 is divisible by 10 (shares) and by 100 (percent), so a share and one
percent of VRAM are whole numbers of units and the conversions below never round either. (Not
`M` in code: that is also the SI suffix `chain.quantity` reads.)
"""

from __future__ import annotations

import math
from fractions import Fraction

RESOURCE_MAX_UNITS = 1_600_000
"""`ResourceMaxUnits` (M): units (and credits) of one whole card."""

CREDITS_PER_ACCELERATOR = RESOURCE_MAX_UNITS
"""Credits per whole card; equal to M so `.sliced.units` turn into credits one to one."""

SHARED_MAX_OWNERS = 10
"""`SharedResourceMaxSize`: owners one card can be shared between."""

SHARE_UNITS = RESOURCE_MAX_UNITS // SHARED_MAX_OWNERS
"""Units one share costs (160,000)."""

PERCENT_UNITS = RESOURCE_MAX_UNITS // 100
"""Units of one percent of a card's VRAM (16,000)."""

SLICED_MAX_SIZE = 512
"""`SlicedResourceMaxSize`: the token pool of the visibility resource per card."""

NODE_DEVICES_RETRY_AFTER_SECONDS = 30
MAX_QUEUE_FLAVORS = 64
"""Kueue's limit of flavors in one resource group."""

_MICRO = 1_000_000


def accelerators_to_credits(cards: int) -> int:
    """Credits that `cards` whole cards are worth (the nominal quota per pool card)."""
    return cards * CREDITS_PER_ACCELERATOR


def credits_to_micro_accelerators(credits: int | Fraction) -> int:
    """Cards a credit amount stands for, in millionths of a card.

    Upstream rounds the credits up to a whole credit first and then divides at micro scale, so
    the result is floored to a millionth; we keep both roundings so status quantities match.
    """
    whole = math.ceil(credits)
    return whole * _MICRO // CREDITS_PER_ACCELERATOR


def credits_to_accelerators(credits: int | Fraction) -> Fraction:
    """Cards a credit amount stands for, exact to a millionth (see the micro variant)."""
    return Fraction(credits_to_micro_accelerators(credits), _MICRO)


def memory_mib_to_units(mib: int, card_mib: int) -> int:
    """Units that `mib` of VRAM cost on a card of `card_mib`; 0 when the card size is unknown."""
    if card_mib <= 0:
        return 0
    return mib * RESOURCE_MAX_UNITS // card_mib


def memory_percentage_to_units(percent: int) -> int:
    """Units a `.sliced.memory-percentage` request folds into."""
    return percent * PERCENT_UNITS


def units_to_shares(units: int) -> int:
    """Whole shares left in `units` (the SH view counts these)."""
    return units // SHARE_UNITS


def units_to_percent(units: int) -> int:
    """Whole percents left in `units` (the SL view counts these)."""
    return units // PERCENT_UNITS
