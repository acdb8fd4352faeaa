"""Moore Threads GPUs through MTML (see `mtml`).

Per card: device object, UUID, PCI bus id, name and memory total are required; a card missing
any of them is skipped, and a guest virtual device is not a card of this node.

Facts kept from upstream:
- id, name and bus id as MTML reports them; memory `total >> 20` MiB;
- uncorrected volatile DRAM ECC errors make a card unhealthy;
- cores are MTML's GPU core count, the driver version MTML's system driver version (no runtime
  version is read);
- `physicalIndexes` = `[MTML enumeration position]`;
- every card takes 16 logical slices without cores overcommit (the compute share is a weight).

Judgment call: the virtualization role is read from the property's role field (upstream compares
the capability field against the role value).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    VendorError,
    bus_address,
    logically_sliced,
    optional,
)
from nodeagent.vendors.mthreads.mtml import VIRT_ROLE_GUEST_VIRTDEVICE, Mtml, open_mtml

MTHREADS = "mthreads"
LOGICAL_SLICES = 16


class MthreadsDetector(VendorDetector[Mtml]):
    manufacturer = MTHREADS

    def __init__(
        self,
        mtml: Mtml | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], Mtml | None] = open_mtml,
    ) -> None:
        super().__init__(mtml, opener, sysfs, maker, group_id_with_memory)
        self._cores: dict[str, int] = {}

    def read_cards(self, interface: Mtml) -> list[CardReading]:
        try:
            count = interface.device_count()
        except VendorError:
            return []
        self._cores = {}
        cards = []
        for position in range(count):
            card = self._read_one(interface, position)
            if card is not None:
                cards.append(card)
        return cards

    def _read_one(self, mtml: Mtml, position: int) -> CardReading | None:
        try:
            device = mtml.open_device(position)
        except VendorError:
            return None
        try:
            return self._card(mtml, device, position)
        except VendorError:
            return None
        finally:
            optional(lambda: mtml.close_device(device), None)

    def _card(self, mtml: Mtml, device: Any, position: int) -> CardReading | None:
        if optional(lambda: mtml.virt_role(device), 0) == VIRT_ROLE_GUEST_VIRTDEVICE:
            return None
        ident = mtml.uuid(device)
        address = bus_address(mtml.bus_id(device))
        name = mtml.name(device)
        memory = mtml.memory(device)
        # Cores are a group fact, but the device object is only open while the card is read.
        self._cores[ident] = optional(lambda: mtml.core_count(device), 0)
        return CardReading(
            id=ident,
            name=name,
            memory_mib=memory.total_bytes >> 20,
            bus_id=address,
            physical_indexes=(position,),
            status=logically_sliced(LOGICAL_SLICES, False, (memory.uncorrected_errors or 0) > 0),
            memory_used_mib=memory.used_bytes >> 20,
        )

    def group_facts(self, interface: Mtml, card: CardReading) -> GroupFacts:
        return GroupFacts(
            cores=self._cores.get(card.id, 0),
            driver_version=optional(interface.driver_version, ""),
        )
