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

from collections.abc import Callable, Mapping
from pathlib import Path

from chain.manufacturers import Manufacturer
from nodeagent.detect.nvidia import compute_capability, runtime_version
from nodeagent.detect.nvmlike import IXML_SYMBOLS, NvmlLike, open_nvmlike
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    VendorError,
    bus_address,
    env_home,
    environ_or,
    library_candidates,
    logically_sliced,
    optional,
)

ILUVATAR = "iluvatar"
LOGICAL_SLICES = 128
HEALTH_OK = 0


def ixml_candidates(environ: Mapping[str, str]) -> list[str]:
    home = Path(env_home(environ, ("COREX_HOME",), "/usr/local/corex"))
    return library_candidates("libixml.so", [home / "lib64", home / "lib"])


class IluvatarDetector(VendorDetector[NvmlLike]):
    manufacturer = ILUVATAR

    def __init__(
        self,
        ixml: NvmlLike | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], NvmlLike | None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = environ_or(environ)
        super().__init__(
            ixml,
            opener or (lambda: open_nvmlike(ixml_candidates(env), IXML_SYMBOLS)),
            sysfs,
            maker,
            group_id_with_memory,
        )
        self._handles: dict[str, int] = {}

    def read_cards(self, interface: NvmlLike) -> list[CardReading]:
        try:
            count = interface.device_count()
        except VendorError:
            return []
        self._handles = {}
        cards = []
        for position in range(count):
            try:
                handle = interface.handle(position)
                card = self._card(interface, handle, position)
            except VendorError:
                continue
            self._handles[card.id] = handle
            cards.append(card)
        return cards

    @staticmethod
    def _card(ixml: NvmlLike, handle: int, position: int) -> CardReading:
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
        handle = self._handles[card.id]
        major, minor = optional(lambda: interface.compute_capability(handle), (0, 0))
        return GroupFacts(
            driver_version=optional(interface.driver_version, ""),
            runtime_version=runtime_version(optional(interface.runtime_version, 0)),
            compute_capability=compute_capability(major, minor),
        )
