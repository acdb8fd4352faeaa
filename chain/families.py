"""Resource families: the ways a container can ask for a card, and the resource keys of each.

Every accelerator resource key hangs off a manufacturer's base resource `<base>`. The family
decides which gate counts what: Kueue turns a family's keys into `credits.gpustack.ai/<mfr>`,
the admission check and the device plugin place the request per card. Classifying a key is
therefore strict: a key that is not exactly one of the shapes below is `none` and no rule
touches it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from chain.manufacturers import ManufacturerTable

VISIBILITY_PREFIX = "device.gpustack.ai/"
VISIBILITY_SUFFIX = ".visibility"
CREDITS_PREFIX = "credits.gpustack.ai/"

SHARED = ".shared"
SLICED = ".sliced"
SLICED_UNITS = ".sliced.units"
SLICED_CORES_PERCENTAGE = ".sliced.cores-percentage"
SLICED_MEMORY_PERCENTAGE = ".sliced.memory-percentage"
SLICED_MEMORY_MIB = ".sliced.memory-mib"
PARTITIONED = ".partitioned"
PARTITIONED_UNITS = ".partitioned.units"


class Family(enum.StrEnum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"
    VISIBILITY = "visibility"
    """Lets an SSH sidecar see its workload's cards; not an accelerator family."""
    NONE = "none"

    @property
    def is_accelerator(self) -> bool:
        """True for the families the request rules, queues and ledger count."""
        return self not in (Family.VISIBILITY, Family.NONE)


# Upstream's order. Only a known base may precede the suffix, so with real base names at most
# one suffix can match; the order only matters for an exotic override and then agrees upstream.
_SUFFIXES: tuple[tuple[str, Family], ...] = (
    (SLICED_MEMORY_PERCENTAGE, Family.SLICED),
    (SLICED_CORES_PERCENTAGE, Family.SLICED),
    (SLICED_MEMORY_MIB, Family.SLICED),
    (PARTITIONED_UNITS, Family.PARTITIONED),
    (SLICED_UNITS, Family.SLICED),
    (PARTITIONED, Family.PARTITIONED),
    (SLICED, Family.SLICED),
    (SHARED, Family.SHARED),
)


@dataclass(frozen=True)
class ResourceClass:
    """What a resource key is: its family, its manufacturer and which key of the family.

    `suffix` is what follows `<base>` (`""` for the whole-card key, `.sliced.units`, ...; for a
    per-profile partition key `.partitioned.<kind>-<profile>`), and `profile` the published
    profile of a per-profile key.
    """

    family: Family
    manufacturer: str = ""
    suffix: str = ""
    profile: str = ""


_NONE = ResourceClass(Family.NONE)


def classify_resource(key: str, table: ManufacturerTable) -> ResourceClass:
    """Classify one resource key (`ResourceFamilyOf`)."""
    if key.startswith(VISIBILITY_PREFIX):
        maker = key[len(VISIBILITY_PREFIX) :].removesuffix(VISIBILITY_SUFFIX)
        if key.endswith(VISIBILITY_SUFFIX) and maker in table:
            return ResourceClass(Family.VISIBILITY, maker)
        return _NONE

    for entry in table.entries:
        if not entry.partition_kind:
            continue
        stem = f"{entry.resource_name}{PARTITIONED}.{entry.partition_kind}-"
        if key.startswith(stem) and len(key) > len(stem):
            profile = key[len(stem) :]
            return ResourceClass(
                Family.PARTITIONED, entry.name, key[len(entry.resource_name) :], profile
            )

    for suffix, family in _SUFFIXES:
        if key.endswith(suffix):
            owner = table.by_resource(key[: -len(suffix)])
            if owner is not None:
                return ResourceClass(family, owner.name, suffix)

    owner = table.by_resource(key)
    if owner is not None:
        return ResourceClass(Family.EXCLUSIVE, owner.name)
    return _NONE


def credits_resource(manufacturer: str) -> str:
    """`credits.gpustack.ai/<mfr>`: the one resource a pool's ClusterQueue has quota in."""
    return CREDITS_PREFIX + manufacturer


def credits_manufacturer(name: str, table: ManufacturerTable) -> str | None:
    """The manufacturer a credits resource counts for, or None if `name` is not one."""
    maker = name.removeprefix(CREDITS_PREFIX)
    if maker != name and maker in table:
        return maker
    return None


def family_key(base: str, suffix: str = "") -> str:
    """`<base><suffix>`, e.g. `family_key("nvidia.com/gpu", SLICED_UNITS)`."""
    return base + suffix


def visibility_resource(manufacturer: str) -> str:
    """`device.gpustack.ai/<mfr>.visibility`."""
    return f"{VISIBILITY_PREFIX}{manufacturer}{VISIBILITY_SUFFIX}"


CARD_SUFFIXES: dict[Family, str] = {
    Family.EXCLUSIVE: "",
    Family.SHARED: SHARED,
    Family.SLICED: SLICED,
    Family.PARTITIONED: PARTITIONED,
}
"""The key of each family that counts cards (the others carry sizes)."""
