"""Iluvatar GPUs through IXML (`libixml.so`, NVML's API under NVML's names; see `nvmlike`).

Per card: handle, UUID, PCI bus id, name and memory are required; a card missing any of them is
skipped.

Facts kept from upstream:
- id, name and bus id as IXML reports them; memory `total >> 20` MiB (the `_v2` memory query
  first, the first version if the driver lacks it);
- a non-zero `ixmlDeviceGetHealth` bitmask makes a card unhealthy;
- `runtimeVersion` is the CUDA-compatible driver version as `major.minor`, `computeCapability`
  the CUDA compute capability;
- `physicalIndexes` = `[minor number]`, else `[enumeration position]`.

Judgment call: every card takes 128 logical slices with cores overcommit. Upstream enforces
Iluvatar slices with NVIDIA's HAMi-core build (corex is CUDA-compatible), whose per-card cap is
NVIDIA's 128; the spec found no Iluvatar-specific count.
"""

from __future__ import annotations

from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    bus_address,
    logically_sliced,
    optional,
)
from nodeagent.vendors.common.nvmlike import (
    IXML_SYMBOLS,
    NvmlLike,
    compute_capability,
    runtime_version,
)
from nodeagent.vendors.common.nvmlike_detector import NvmlLikeDetector

ILUVATAR = "iluvatar"
LOGICAL_SLICES = 128
HEALTH_OK = 0


class IluvatarDetector(NvmlLikeDetector):
    manufacturer = ILUVATAR
    library = "libixml.so"
    home_variables = ("COREX_HOME",)
    default_home = "/usr/local/corex"
    symbols = IXML_SYMBOLS

    def read_card(self, ixml: NvmlLike, handle: int, position: int) -> CardReading:
        ident = ixml.uuid(handle)
        address = bus_address(ixml.bus_id(handle))
        name = ixml.name(handle)
        total, used = ixml.memory(handle)
        health = optional(lambda: ixml.health(handle), HEALTH_OK)
        minor = optional(lambda: ixml.minor_number(handle), -1)
        return CardReading(
            id=ident,
            name=name,
            memory_mib=total >> 20,
            bus_id=address,
            physical_indexes=(minor if minor >= 0 else position,),
            status=logically_sliced(LOGICAL_SLICES, True, health != HEALTH_OK),
            memory_used_mib=used >> 20,
        )

    def group_facts(self, interface: NvmlLike, card: CardReading) -> GroupFacts:
        handle = self.handle(card)
        major, minor = optional(lambda: interface.compute_capability(handle), (0, 0))
        return GroupFacts(
            driver_version=optional(interface.driver_version, ""),
            runtime_version=runtime_version(optional(interface.runtime_version, 0)),
            compute_capability=compute_capability(major, minor),
        )
