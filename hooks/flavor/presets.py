"""Unit resources of derived InstanceTypes: how much CPU and RAM one card comes with.

An Instance asks for N cards and gets N units of CPU and RAM, so the unit must suit the card:
a big-VRAM training card gets more host memory than an inference card. The table maps product
families to a few tiers; anything not listed gets the fallback tier.

Lookup: the product name is normalized (manufacturer prefix dropped) and split into tokens on
`-`, `_` and `.`; leading brand words (`tesla`, `radeon`, ...) are dropped; the entry whose token
sequence starts the product's tokens wins; its variant list may then pick another tier by a
whole token (`a100 ... 80gb` is large, plain `a100` medium).

Judgment calls:
- `geforce` is a brand word too (the spec says "at least" tesla, radeon, instinct, quadro): RTX
  consumer cards report `NVIDIA GeForce RTX 4090` and would otherwise never reach their row.
- Ascend `910-9362...9392` is read as the `910` family with a second token in 9362..9392.
- Should two entries match, the longer token sequence wins (the table has no such pair today).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from chain.normalize import normalize_name

LOCAL_STORAGE = "100Gi"
"""Local storage every derived InstanceType offers."""


@dataclass(frozen=True)
class UnitResources:
    """CPU cores and GiB of RAM per unit (per card, or per core for a CPU pool)."""

    cpu: int
    ram_gib: int

    def as_spec(self) -> dict[str, str]:
        """The InstanceType `spec.unitResources` form: `{"cpu": "8", "ram": "32Gi"}`."""
        return {"cpu": str(self.cpu), "ram": f"{self.ram_gib}Gi"}


class Tier(enum.StrEnum):
    FALLBACK = "fallback"
    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"
    XLARGE = "xlarge"


TIER_UNITS: dict[Tier, UnitResources] = {
    Tier.FALLBACK: UnitResources(4, 16),
    Tier.SMALL: UnitResources(8, 32),
    Tier.MEDIUM: UnitResources(8, 64),
    Tier.LARGE: UnitResources(12, 128),
    Tier.XLARGE: UnitResources(12, 192),
}

CPU_POOL_UNITS = UnitResources(1, 2)
"""Unit of a CPU-only pool: one core and 2Gi (the webhook requires exactly one core)."""

FALLBACK_UNITS = TIER_UNITS[Tier.FALLBACK]

_TOKEN_SPLIT = re.compile(r"[-_.]")
_BRAND_WORDS = (("tesla",), ("radeon",), ("instinct",), ("quadro",), ("geforce",))


@dataclass(frozen=True)
class PresetEntry:
    family: tuple[str, ...]
    """Leading tokens of the products this entry covers."""
    tier: Tier
    variants: tuple[tuple[str, Tier], ...] = ()
    """Ordered (whole token, tier) overrides; the first token the product has wins."""


def _family(spelling: str, tier: Tier, *variants: tuple[str, Tier]) -> PresetEntry:
    return PresetEntry(tuple(spelling.split("-")), tier, variants)


def _families(tier: Tier, *spellings: str) -> tuple[PresetEntry, ...]:
    return tuple(_family(spelling, tier) for spelling in spellings)


_S, _M, _L, _XL = Tier.SMALL, Tier.MEDIUM, Tier.LARGE, Tier.XLARGE

PRESETS: dict[str, tuple[PresetEntry, ...]] = {
    "nvidia": (
        *_families(_XL, "b200", "b300", "gb200", "gb300", "h100", "h200", "h800", "gh200"),
        _family("a100", _M, ("80gb", _L), ("40gb", _M)),
        _family("a800", _M, ("80gb", _L), ("40gb", _M)),
        _family("v100", _S, ("32gb", _M)),
        *_families(_L, "l40s"),
        *_families(_M, "a10", "a10g", "l40", "rtx-4090", "rtx-5090"),
        *_families(_S, "gb10", "a30", "l4", "t4", "v100s", "rtx-pro-4500", "rtx-6000"),
        *_families(_S, "rtx-4000", "rtx-a6000", "rtx-a5000", "rtx-a4000", "rtx-3090"),
    ),
    "ascend": (
        *_families(_M, "310p", "310p1", "310p2", "310p3", "310p4", "310p5", "310p7"),
        *_families(_M, "910b", "910b1", "910b2", "910b3", "910b4", "910b2c"),
        _family("910", Tier.FALLBACK, *((str(n), _XL) for n in range(9362, 9393))),
        *_families(_XL, "950", "950pr", "950dt"),
    ),
    "amd": (
        *_families(_XL, "mi300x", "mi308x", "mi325x", "mi350x", "mi355x"),
        *_families(_M, "mi250", "mi250x"),
        *_families(_L, "mi210"),
    ),
    "cambricon": _families(_M, "mlu370", "mlu590"),
    "hygon": (
        *_families(_S, "z100", "z100l"),
        *_families(_L, "k100", "bw100"),
        *_families(_XL, "bw1000"),
    ),
    "metax": (*_families(_M, "mxc500"), *_families(_L, "mxc550", "mxc588", "mxc600")),
    "mthreads": _families(_M, "mtt-s4000", "mtt-s5000"),
    "iluvatar": _families(_M, "bi-v100", "bi-v150", "mr-v50", "mr-v100"),
    "thead": _families(_M, "ppu-zw810e", "ppu-zwm890"),
}


def product_tokens(manufacturer: str, product: str) -> tuple[str, ...]:
    """The product's tokens with the manufacturer and leading brand words removed."""
    key = normalize_name(product, manufacturer, 0)
    tokens = tuple(token for token in _TOKEN_SPLIT.split(key) if token)
    stripped = True
    while stripped:
        stripped = False
        for brand in _BRAND_WORDS:
            if tokens[: len(brand)] == brand:
                tokens = tokens[len(brand) :]
                stripped = True
    return tokens


def preset_tier(manufacturer: str, product: str) -> Tier:
    entries = PRESETS.get(manufacturer, ())
    if not entries:
        return Tier.FALLBACK
    tokens = product_tokens(manufacturer, product)
    matches = [entry for entry in entries if tokens[: len(entry.family)] == entry.family]
    if not matches:
        return Tier.FALLBACK
    entry = max(matches, key=lambda candidate: len(candidate.family))
    present = set(tokens)
    for token, tier in entry.variants:
        if token in present:
            return tier
    return entry.tier


def preset_unit_resources(manufacturer: str, product: str) -> UnitResources:
    """`PresetUnitResources`: the unit of a derived accelerated InstanceType."""
    return TIER_UNITS[preset_tier(manufacturer, product)]
