"""Partition profiles: how a vendor's profile name becomes the tail of a resource key.

Drivers spell profiles their own way (`MIG 1g.10gb`, T-Head `4g48gb`). The key users request
and the ledger records use one published spelling, and the allocator translates back when it
talks to the driver, so publishing and its inverse must round-trip. A partition's place on its
card (`Placement`) is shared by the Devices spec (legal slots) and the ledger (occupied slots).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chain import fields
from chain.families import PARTITIONED
from chain.manufacturers import Manufacturer
from chain.validation import is_qualified_name

_THEAD = "thead"
_THEAD_VENDOR = re.compile(r"([0-9]+)g([0-9]+)gb")
_THEAD_PUBLISHED = re.compile(r"([0-9]+)g\.([0-9]+)gb")


def normalize_profile_name(raw: str) -> str:
    """The profile part of a driver's profile string: its last word, lowercased."""
    words = raw.lower().split()
    return words[-1] if words else ""


def publish_profile_name(manufacturer: str, profile: str) -> str:
    """The spelling used in keys; only T-Head's `4g48gb` gains a dot (`4g.48gb`). Idempotent."""
    if manufacturer == _THEAD:
        match = _THEAD_VENDOR.fullmatch(profile)
        if match:
            return f"{match[1]}g.{match[2]}gb"
    return profile


def vendor_profile_name(manufacturer: str, profile: str) -> str:
    """Inverse of `publish_profile_name`: the spelling the driver understands."""
    if manufacturer == _THEAD:
        match = _THEAD_PUBLISHED.fullmatch(profile)
        if match:
            return f"{match[1]}g{match[2]}gb"
    return profile


def partitioned_profile_key(manufacturer: Manufacturer, published: str) -> str | None:
    """`<base>.partitioned.<kind>-<profile>`, or None when the manufacturer cannot partition or
    the key is not a valid resource name (e.g. the `+me` variants of MIG profiles)."""
    if not manufacturer.partition_kind or not published:
        return None
    key = f"{manufacturer.resource_name}{PARTITIONED}.{manufacturer.partition_kind}-{published}"
    return key if is_qualified_name(key) else None


@dataclass(frozen=True)
class Placement:
    """Where a partition sits on its card: memory slices `[start, start + length)`."""

    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> Placement:
        return cls(fields.integer(obj, "start", path), fields.integer(obj, "length", path))

    def render(self) -> dict[str, object]:
        return {"start": self.start, "length": self.length}


def parse_placements(obj: fields.Obj, key: str, path: str) -> tuple[Placement, ...]:
    """The `{start, length}` list under `key` (absent: none)."""
    return tuple(Placement.parse(item, where) for item, where in fields.items(obj, key, path))
