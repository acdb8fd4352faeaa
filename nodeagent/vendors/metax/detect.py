"""MetaX GPUs through MXSML (see `mxsml`).

Per card: device info (bus id, UUID, name, virtualization mode) and memory are required; a card
missing either is skipped, and a virtual function (VF) is not a card of this node.

Facts kept from upstream:
- id, name and bus id as MXSML's device info reports them; memory is `vramTotal` KiB as MiB;
- uncorrectable DRAM ECC errors make a card unhealthy;
- the family follows the product line in the name (`MXC`, `MXN`, `MXG`);
- the driver version is MXSML's driver version, the runtime version MACA's;
- `physicalIndexes` are the card's DRM nodes `[card<N>, renderD<M>]`;
- every card takes 16 logical slices (sGPU) without cores overcommit.

Judgment call: the product line is matched regardless of case (names read `MXC500`; upstream's
pattern is lowercase).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    VendorError,
    bus_address,
    drm_nodes,
    environ_or,
    leading_version,
    logically_sliced,
    optional,
)
from nodeagent.vendors.metax.mxsml import VIRTUALIZATION_MODE_VF, Mxsml, open_mxsml

METAX = "metax"
LOGICAL_SLICES = 16
DRIVER_DIRS = ("sys/module/metax/drivers/pci:METAX", "sys/module/metax/drivers/pci:metax")
_LINES = (
    ("MXC", re.compile(r"c\d{2,4}", re.IGNORECASE)),
    ("MXN", re.compile(r"n\d{2,4}", re.IGNORECASE)),
    ("MXG", re.compile(r"g\d{2,4}", re.IGNORECASE)),
)


def product_line(name: str) -> str:
    return next((line for line, pattern in _LINES if pattern.search(name)), "")


class MetaxDetector(VendorDetector[Mxsml]):
    manufacturer = METAX

    def __init__(
        self,
        mxsml: Mxsml | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], Mxsml | None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = environ_or(environ)
        super().__init__(
            mxsml, opener or (lambda: open_mxsml(env)), sysfs, maker, group_id_with_memory
        )

    def read_cards(self, interface: Mxsml) -> list[CardReading]:
        cards = []
        for index in range(interface.device_count()):
            try:
                card = self._card(interface, index)
            except VendorError:
                continue
            if card is not None:
                cards.append(card)
        return cards

    def _card(self, mxsml: Mxsml, index: int) -> CardReading | None:
        info = mxsml.device_info(index)
        if info.mode == VIRTUALIZATION_MODE_VF:
            return None
        memory = mxsml.memory(index)
        address = bus_address(info.bus_id)
        unhealthy = optional(lambda: mxsml.dram_uncorrectable_errors(index), 0) > 0
        return CardReading(
            id=info.uuid,
            name=info.name,
            memory_mib=memory.vram_total_kib >> 10,
            bus_id=address,
            physical_indexes=drm_nodes(self._sysfs, address, DRIVER_DIRS),
            status=logically_sliced(LOGICAL_SLICES, False, unhealthy),
            memory_used_mib=max(memory.vram_used_kib, 0) >> 10,
        )

    def group_facts(self, interface: Mxsml, card: CardReading) -> GroupFacts:
        return GroupFacts(
            driver_version=optional(interface.driver_version, ""),
            runtime_version=leading_version(optional(interface.maca_version, "")),
            family=product_line(card.name),
        )
