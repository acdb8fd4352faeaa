"""Hygon partitions (DMI's "MIG"): the node's mode and the profiles each card offers.

Facts kept from upstream:
- the mode is node-wide (`nvmlGetSystemMigMode`): on, every card offers its partition profiles
  and no logical slice (a container given the card's nodes but no partition sees no device);
  off, or no Multi-Instance library on the host, every card takes its 4 logical slices; any other
  failure to read it leaves the mode unknown, and a card then offers neither;
- a card is reached by its domain-qualified PCI address; profiles are probed by width (1 to 4
  slices; a width the card disclaims is skipped) and published under the last word of their
  name, lowercased (`MIG 2g.15gb` -> `2g.15gb`), with the profile's memory, its width as compute
  slices, the length of its placements as memory slices, and how many fit;
- a profile whose placements cannot be read, or that has none, is withheld, as is one that forms
  no valid `<base>.partitioned.mig-<profile>` key; two readings publishing one name differently
  are both withheld (on one card, or on two cards of one group).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from chain.devices import AcceleratorStatus, PartitionProfile
from chain.manufacturers import Manufacturer
from chain.partitions import normalize_profile_name, partitioned_profile_key
from nodeagent.detect.partitions import physical_sliced, unique_by_name
from nodeagent.detect.vendor import VendorError, logically_sliced
from nodeagent.vendors.hygon.dmi import ABSENT, MAX_WIDTH, MIG_ENABLE, Dmi

log = logging.getLogger(__name__)

LOGICAL_SLICES = 4
UNAVAILABLE = frozenset({-99998, 9, 12, 13, 18})
"""No library, no driver, a missing entry point, a library/driver mismatch: no MIG here."""


@dataclass(frozen=True)
class Mode:
    """The node's Multi-Instance mode for one detection pass."""

    enabled: bool
    known: bool = True


def read_mode(dmi: Dmi | None) -> Mode:
    if dmi is None:
        return Mode(False)
    try:
        return Mode(dmi.system_mig_mode() == MIG_ENABLE)
    except VendorError as error:
        if error.code in UNAVAILABLE:
            return Mode(False)
        log.error("Hygon Multi-Instance mode unreadable (%s): cards offer no slices", error)
        return Mode(False, known=False)


def card_profiles(dmi: Dmi, bus_id: str, maker: Manufacturer) -> tuple[PartitionProfile, ...]:
    """The partition profiles one card offers (see the module doc)."""
    try:
        device = dmi.handle_by_bus(bus_id)
    except VendorError as error:
        log.error("Hygon card %s is not known to the Multi-Instance library: %s", bus_id, error)
        return ()
    entries: list[PartitionProfile] = []
    for width in range(1, MAX_WIDTH + 1):
        try:
            profile = dmi.profile(device, width)
        except VendorError as error:
            if error.code not in ABSENT:
                log.error("Hygon card %s: %d-slice profile unreadable: %s", bus_id, width, error)
            continue
        name = normalize_profile_name(profile.name)
        if partitioned_profile_key(maker, name) is None:
            continue
        try:
            slots = dmi.placements(device, profile.id)
        except VendorError:
            continue  # its geometry is unverified
        if not slots or slots[0].length <= 0:
            continue
        entry = PartitionProfile(
            name=name,
            memory_mib=profile.memory_mib,
            count=profile.count,
            compute_slices=profile.slices,
            memory_slices=slots[0].length,
            placements=slots,
        )
        entries.append(entry)
    return unique_by_name(entries)


def card_status(
    mode: Mode, dmi: Dmi | None, bus_id: str, maker: Manufacturer, unhealthy: bool
) -> AcceleratorStatus:
    """Partitions in MIG mode, 4 logical slices out of it, neither when the mode is unknown."""
    if not mode.known:
        return AcceleratorStatus(unhealthy)
    if mode.enabled and dmi is not None:
        profiles = card_profiles(dmi, bus_id, maker)
        return AcceleratorStatus(unhealthy, physical_sliced=physical_sliced(profiles))
    return logically_sliced(LOGICAL_SLICES, False, unhealthy)
