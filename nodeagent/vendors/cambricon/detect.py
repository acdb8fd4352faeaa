"""Cambricon MLUs through CNDev (see `cndev`).

Per card: handle, UUID, PCI bus id, card name and memory are required; a card missing any of
them is skipped.

Facts kept from upstream:
- the id is `MLU-<uuid>`; the name CNDev's card name (`MLU370`);
- memory is the physical memory total (MiB); health state 0 makes a card unhealthy;
- the driver version is `<major>.<minor>`; the runtime version is the Neuware toolkit's
  `x.y.z` from its `version.txt`;
- `physicalIndexes` = `[CNDev enumeration position]`;
- every card takes 16 logical slices (sMLU) without cores overcommit (compute is split spatially).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    bus_address,
    cards_by_handle,
    environ_or,
    logically_sliced,
    optional,
    read_first,
)
from nodeagent.vendors.cambricon.cndev import Cndev, neuware_home, open_cndev

CAMBRICON = "cambricon"
LOGICAL_SLICES = 16
HEALTHY = 1
_TOOLKIT_VERSION = re.compile(r"\d+\.\d+\.\d+")


def neuware_version(home: Path) -> str:
    match = _TOOLKIT_VERSION.search(read_first([home / "version.txt"]))
    return match.group(0) if match else ""


class CambriconDetector(VendorDetector[Cndev]):
    manufacturer = CAMBRICON

    def __init__(
        self,
        cndev: Cndev | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], Cndev | None] | None = None,
        environ: Mapping[str, str] | None = None,
        runtime_version: Callable[[], str] | None = None,
    ) -> None:
        env = environ_or(environ)
        super().__init__(
            cndev, opener or (lambda: open_cndev(env)), sysfs, maker, group_id_with_memory
        )
        self._runtime_version = runtime_version or (lambda: neuware_version(neuware_home(env)))
        self._handles: dict[str, int] = {}

    def read_cards(self, interface: Cndev) -> list[CardReading]:
        found = cards_by_handle(
            interface.device_count,
            interface.handle,
            lambda handle, position: self._card(interface, handle, position),
        )
        self._handles = {card.id: handle for handle, card in found}
        return [card for _, card in found]

    @staticmethod
    def _card(cndev: Cndev, handle: int, position: int) -> CardReading:
        ident = cndev.uuid(handle)
        address = bus_address(cndev.bus_id(handle))
        name = cndev.card_name(handle)
        memory = cndev.memory(handle)
        health = optional(lambda: cndev.health(handle), HEALTHY)
        return CardReading(
            id=ident,
            name=name,
            memory_mib=memory.total_mib,
            bus_id=address,
            physical_indexes=(position,),
            status=logically_sliced(LOGICAL_SLICES, False, health == 0),
            memory_used_mib=max(memory.used_mib, 0),
        )

    def group_facts(self, interface: Cndev, card: CardReading) -> GroupFacts:
        handle = self._handles[card.id]
        return GroupFacts(
            driver_version=optional(lambda: interface.driver_version(handle), ""),
            runtime_version=self._runtime_version(),
        )
