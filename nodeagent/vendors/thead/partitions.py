"""T-Head PPU partitions (HGML's MIG): the GPU instance profiles a card in MIG mode offers.

Facts kept from upstream:
- profiles are probed by id over HGML's whole profile-id space; media and graphics variants
  (a `+` in the name) are not offered;
- a profile's published name is its driver name made a resource-name segment (`4g48gb` ->
  `4g.48gb`); one that forms no valid `<base>.partitioned.mig-<profile>` key cannot be requested
  and is left out, nameless ones included;
- memory slices: the length of the profile's placements when the driver lists any, else the
  profile's memory in eighths of the card, rounded half up;
- a profile whose placement query fails is withheld (its geometry is unverified); one the driver
  answers with no placement is kept without placements;
- two profiles (on one card, or on two cards of one group) publishing one name with different
  geometry, memory, count or placements are both withheld: the group aggregate merges by name.
"""

from __future__ import annotations

from chain.devices import PartitionProfile
from chain.manufacturers import Manufacturer
from chain.partitions import normalize_profile_name, partitioned_profile_key, publish_profile_name
from nodeagent.detect.partitions import unique_by_name
from nodeagent.detect.vendor import VendorError
from nodeagent.vendors.common.nvmlike import NvmlLike

PROFILE_COUNT = 0x55
"""`HGML_GPU_INSTANCE_PROFILE_COUNT`: the profile ids a card may answer for."""
MEMORY_SLICES = 8


def memory_slices(profile_mib: int, card_mib: int) -> int:
    per_slice = card_mib // MEMORY_SLICES
    return (profile_mib + per_slice // 2) // per_slice if per_slice > 0 else 0


def mig_profiles(
    hgml: NvmlLike, handle: int, card_mib: int, maker: Manufacturer
) -> tuple[PartitionProfile, ...]:
    entries: list[PartitionProfile] = []
    for profile in range(PROFILE_COUNT):
        try:
            info = hgml.instance_profile(handle, profile)
        except VendorError:
            continue  # the card does not offer this id
        if "+" in info.name:
            continue
        name = publish_profile_name(maker.name, normalize_profile_name(info.name))
        if partitioned_profile_key(maker, name) is None:
            continue
        try:
            slots = hgml.placements(handle, info.id)
        except VendorError:
            continue
        slices = slots[0].length if slots and slots[0].length > 0 else None
        entry = PartitionProfile(
            name=name,
            memory_mib=info.memory_mb,
            count=info.instance_count,
            compute_slices=info.slice_count,
            memory_slices=slices or memory_slices(info.memory_mb, card_mib),
            placements=slots,
        )
        entries.append(entry)
    return unique_by_name(entries)
