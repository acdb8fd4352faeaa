"""MIG: the GPU instance profiles an NVIDIA card offers, read from NVML.

A card in MIG mode is handed out by partition only. Each profile becomes a
`PartitionProfile` with the empty-card placements cached, so the ledger can count how many
instances of each profile still fit without asking the driver on every Pod event.

Profiles left out:
- media-extension and graphics variants (`+me`, `+me.all`, `+gfx`, and the graphics profile ids):
  they overlap the plain profiles of the same size and a `+` cannot appear in a resource name;
- profiles whose published name does not form a valid `<base>.partitioned.mig-<profile>` key;
- profiles without any placement (the card cannot host them at all).
"""

from __future__ import annotations

import ctypes
from fractions import Fraction

from chain.devices import PartitionProfile
from chain.manufacturers import Manufacturer
from chain.partitions import (
    Placement,
    normalize_profile_name,
    partitioned_profile_key,
    publish_profile_name,
)
from nodeagent.vendors.common.nvml import GpuInstanceProfileInfo, Nvml, PlacementStruct

GRAPHICS_PROFILES = frozenset({0x0A, 0x0B, 0x0C, 0x11})
"""`NVML_GPU_INSTANCE_PROFILE_{1,2,4,3}_SLICE_GFX`: graphics-capable variants."""
MEMORY_SLICES = 8
"""MIG divides a card's memory into eighths."""


def text(value: str | bytes) -> str:
    """NVML strings arrive as str from pynvml's wrappers and as bytes from raw structs."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def memory_slices(profile_mib: int, card_mib: int) -> int:
    """How many eighths of the card the profile's memory is, rounded half up."""
    if card_mib <= 0:
        return 0
    eighths = Fraction(profile_mib * MEMORY_SLICES, card_mib)
    return int(eighths + Fraction(1, 2))


def profile_name(info: GpuInstanceProfileInfo, slices: int, card_mib: int) -> str:
    """The profile's name (`MIG 1g.10gb` -> `1g.10gb`), or one made from its size when the
    driver reports none (`<compute>g.<GB>gb`)."""
    name = normalize_profile_name(text(getattr(info, "name", b"")))
    if name:
        return name
    return f"{info.sliceCount}g.{slices * (card_mib // 1024) // MEMORY_SLICES}gb"


def profile_info(nvml: Nvml, handle: object, index: int) -> GpuInstanceProfileInfo | None:
    """The profile at NVML index `index`, or None when the card does not offer it. Drivers
    without the versioned call answer the older struct, which carries no name."""
    for version in (2, 1):
        try:
            return nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version)
        except nvml.NVMLError:
            continue
    return None


def placements(nvml: Nvml, handle: object, profile_id: int) -> tuple[Placement, ...]:
    """Where instances of the profile can start on an empty card (ask the size, then fill)."""
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.pointer(count))
    if count.value == 0:
        return ()
    slots = (PlacementStruct * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
        handle, profile_id, slots, ctypes.pointer(count)
    )
    found = {Placement(int(slot.start), int(slot.size)) for slot in slots[: count.value]}
    return tuple(sorted(found, key=lambda slot: (slot.start, slot.length)))


def mig_profiles(
    nvml: Nvml, handle: object, card_mib: int, maker: Manufacturer
) -> tuple[PartitionProfile, ...]:
    """The card's usable MIG profiles, smallest first."""
    found: dict[str, PartitionProfile] = {}
    for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        if index in GRAPHICS_PROFILES:
            continue
        info = profile_info(nvml, handle, index)
        if info is None:
            continue
        slices = memory_slices(int(info.memorySizeMB), card_mib)
        name = profile_name(info, slices, card_mib)
        if "+" in name or name in found:
            continue
        if partitioned_profile_key(maker, publish_profile_name(maker.name, name)) is None:
            continue
        try:
            slots = placements(nvml, handle, int(info.id))
        except nvml.NVMLError:
            continue
        if not slots:
            continue
        found[name] = PartitionProfile(
            name=name,
            memory_mib=int(info.memorySizeMB),
            count=int(info.instanceCount),
            compute_slices=int(info.sliceCount),
            memory_slices=slices,
            placements=slots,
        )
    return tuple(
        sorted(
            found.values(), key=lambda entry: (entry.compute_slices, entry.memory_mib, entry.name)
        )
    )
