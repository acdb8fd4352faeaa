"""T-Head PPUs through HGML (`libhgml.so`, NVML's API renamed `hgml*`; see `nvmlike`).

Per card: handle, UUID, PCI bus id, name and memory are required; a card missing any of them is
skipped.

Facts kept from upstream:
- memory `total >> 20` MiB; uncorrected volatile DRAM ECC errors make a card unhealthy;
- `runtimeVersion` is the HGGC driver version as `major.minor`, `computeCapability` HGGC's;
  cores HGML's GPU core count;
- `physicalIndexes` = `[minor number]`, and absent when the driver cannot tell it: the allocator
  proves a device node by that minor, so a substitute would make a wrong node look proven;
- a card in MIG mode offers its partition profiles (see `partitions.py`); any other card (MIG off,
  unsupported or unreadable) 128 logical slices with cores overcommit.
"""

from __future__ import annotations

from collections.abc import Sequence

from chain.devices import AcceleratorStatus
from nodeagent.detect.partitions import agree_within_groups, physical_sliced
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    bus_address,
    logically_sliced,
    optional,
)
from nodeagent.vendors.common.nvmlike import (
    DEVICE_MIG_ENABLE,
    HGML_SYMBOLS,
    NvmlLike,
    compute_capability,
    runtime_version,
)
from nodeagent.vendors.common.nvmlike_detector import NvmlLikeDetector
from nodeagent.vendors.thead.partitions import mig_profiles

THEAD = "thead"
LOGICAL_SLICES = 128


class TheadDetector(NvmlLikeDetector):
    manufacturer = THEAD
    library = "libhgml.so"
    home_variables = ("PPU_HOME",)
    default_home = "/usr/local/PPU_SDK"
    symbols = HGML_SYMBOLS

    def finish(self, cards: Sequence[CardReading]) -> list[CardReading]:
        return agree_within_groups(list(cards))

    def read_card(self, hgml: NvmlLike, handle: int, position: int) -> CardReading:
        ident = hgml.uuid(handle)
        address = bus_address(hgml.bus_id(handle))
        name = hgml.name(handle)
        total, used = hgml.memory(handle)
        memory = total >> 20
        unhealthy = optional(lambda: hgml.uncorrected_dram_errors(handle), 0) > 0
        minor = optional(lambda: hgml.minor_number(handle), -1)
        if optional(lambda: hgml.mig_mode(handle), 0) == DEVICE_MIG_ENABLE:
            profiles = mig_profiles(hgml, handle, memory, self._maker)
            status = AcceleratorStatus(unhealthy, physical_sliced=physical_sliced(profiles))
        else:
            status = logically_sliced(LOGICAL_SLICES, True, unhealthy)
        return CardReading(
            id=ident,
            name=name,
            memory_mib=memory,
            bus_id=address,
            physical_indexes=(minor,) if minor >= 0 else None,
            status=status,
            memory_used_mib=used >> 20,
        )

    def group_facts(self, interface: NvmlLike, card: CardReading) -> GroupFacts:
        handle = self.handle(card)
        major, minor = optional(lambda: interface.compute_capability(handle), (0, 0))
        return GroupFacts(
            cores=optional(lambda: interface.core_count(handle), 0),
            driver_version=optional(interface.driver_version, ""),
            runtime_version=runtime_version(optional(interface.runtime_version, 0)),
            compute_capability=compute_capability(major, minor),
        )
