"""Ascend NPUs through DCMI (see `dcmi`: generation V1, fallback V2).

Per device: its type (non-NPU units are skipped when the type is readable), die id, PCI bus id,
chip info, memory and physical id are required; a device missing any of them is skipped.

Facts kept from upstream:
- the id is the device's die id: five words in uppercase hex, space separated. A device whose
  die cannot be read is dropped rather than named by its PCI address, which repeats on every
  node;
- the name is the chip name as DCMI reports it (`910B3`), cores the AI core count;
- memory is the HBM size (MB); without an HBM answer, the detailed memory info's size;
- unhealthy: ECC enabled on that memory (HBM, or DDR when memory came from the detailed query)
  with single- or double-bit errors counted;
- `physicalIndexes` = `[physical id, DCMI card id, device index in the card]`;
- the family comes from the SoC the chip name belongs to (`910`, `310P`, `910B`, `310B`, `910C`,
  `950`); every `950*` name is one SoC;
- the runtime version is the CANN toolkit's (`Version=` of its `version.info`);
- logical slicing (63 slices, cores overcommit) only for the family/CANN-major pairs the image
  builds a vcann-rt for (a missing runtime version counts as major 8).

Judgment calls: an HBM answer of 0 MB (a card without HBM) falls back to the detailed memory
info like a refused HBM query; RoCE addresses are not read (network inventory is out of scope).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from chain.devices import AcceleratorStatus
from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    VendorError,
    bus_address,
    environ_or,
    key_value,
    logically_sliced,
    optional,
    read_first,
)
from nodeagent.vendors.ascend.dcmi import (
    DEVICE_TYPE_DDR,
    DEVICE_TYPE_HBM,
    NPU_TYPE,
    Dcmi,
    open_dcmi,
)

ASCEND = "ascend"
LOGICAL_SLICES = 63
DEFAULT_RUNTIME_MAJOR = 8

SOC_FAMILIES: Mapping[str, tuple[str, ...]] = {
    "910": ("Ascend910PremiumA", "Ascend910ProA", "Ascend910A", "Ascend910ProB", "Ascend910B"),
    "310P": tuple(f"Ascend310P{n}" for n in (1, 2, 3, 4, 5, 7)),
    "910B": (
        "Ascend910B1",
        "Ascend910B2",
        "Ascend910B2C",
        "Ascend910B3",
        "Ascend910B4",
        "Ascend910B4-1",
    ),
    "310B": tuple(f"Ascend310B{n}" for n in (1, 2, 3, 4)),
    "910C": (
        "Ascend910",
        *(f"Ascend910_{n}" for n in (9391, 9392, 9381, 9382, 9372, 9362, 9363)),
    ),
    "950": ("Ascend950", "Ascend910_95", "Ascend910_9579"),
}
"""SoC names by family (the A2 is `910B`, the A3 `910C`, the A5 `950`)."""
FAMILY_OF_SOC = {soc: family for family, socs in SOC_FAMILIES.items() for soc in socs}

SLICED_RUNTIME_MAJORS: Mapping[str, frozenset[int]] = {
    "910B": frozenset({8, 9}),
    "910C": frozenset({8, 9}),
    "950": frozenset({9}),
    "310P": frozenset({9}),
}
"""CANN majors the image builds vcann-rt for, per family (one build stage each)."""

_310P = re.compile(r"310P\d?|I2\d?")
_910B = re.compile(r"910B\d|A2G\d")


def soc_name(chip_name: str) -> str:
    """The SoC a chip name belongs to (`910B3` -> `Ascend910B3`); empty when unknown."""
    bare = chip_name.strip().removeprefix("Ascend").strip()
    soc = f"Ascend{bare}"
    if soc in FAMILY_OF_SOC:
        return soc
    # Newer parts get open-ended suffixes; fold them onto the SoC every vendor tool uses.
    if bare.startswith("950"):
        return "Ascend950"
    if _310P.match(bare):
        return "Ascend310P1"
    if "310B" in bare:
        return "Ascend310B1"
    if _910B.match(bare):
        return "Ascend910B1"
    if bare.startswith("910"):
        return "Ascend910A"
    return ""


def family(chip_name: str) -> str:
    return FAMILY_OF_SOC.get(soc_name(chip_name), "")


def runtime_major(version: str) -> int | None:
    """The major of a CANN version (`8.0.RC2` -> 8); 8 when unknown, None when unreadable."""
    head = version.strip().split(".", 1)[0] if version.strip() else str(DEFAULT_RUNTIME_MAJOR)
    return int(head) if head.isdigit() else None


def logical_slices(chip_family: str, runtime_version: str) -> int:
    """63 where a vcann-rt is built for the pair, else 0 (slicing not offered at all)."""
    major = runtime_major(runtime_version)
    return LOGICAL_SLICES if major in SLICED_RUNTIME_MAJORS.get(chip_family, ()) else 0


def toolkit_home(environ: Mapping[str, str]) -> Path:
    if environ.get("ASCEND_TOOLKIT_HOME"):
        return Path(environ["ASCEND_TOOLKIT_HOME"])
    cann = Path("/usr/local/Ascend/cann")
    return cann if cann.is_dir() else Path("/usr/local/Ascend/ascend-toolkit/latest/runtime")


def toolkit_version(home: Path) -> str:
    """`Version=` of the toolkit's `version.info`; empty without a toolkit."""
    for path in (home / "version.info", home / "share/info/runtime/version.info"):
        value = key_value(read_first([path]), "Version")
        if value:
            return value.removeprefix("v").removeprefix("V")
    return ""


def die_text(words: tuple[int, ...]) -> str:
    return " ".join(f"{word:X}" for word in words)


class AscendDetector(VendorDetector[Dcmi]):
    manufacturer = ASCEND

    def __init__(
        self,
        dcmi: Dcmi | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], Dcmi | None] | None = None,
        environ: Mapping[str, str] | None = None,
        runtime_version: Callable[[], str] | None = None,
    ) -> None:
        env = environ_or(environ)
        super().__init__(
            dcmi, opener or (lambda: open_dcmi(env)), sysfs, maker, group_id_with_memory
        )
        self._runtime_version = runtime_version or (lambda: toolkit_version(toolkit_home(env)))
        self._chips: dict[str, int] = {}
        """This pass's AI core count per card id, for the group facts."""
        self._runtime = ""

    def read_cards(self, interface: Dcmi) -> list[CardReading]:
        try:
            card_ids = interface.card_list()
        except VendorError:
            return []
        self._chips = {}
        self._runtime = self._runtime_version()
        cards = []
        for card in card_ids:
            try:
                count = interface.device_count(card)
            except VendorError:
                continue
            for device in range(count):
                reading = self._device(interface, card, device)
                if reading is not None:
                    cards.append(reading)
        return cards

    def _device(self, dcmi: Dcmi, card: int, device: int) -> CardReading | None:
        kind = optional(lambda: dcmi.device_type(card, device), NPU_TYPE)
        if kind != NPU_TYPE:
            return None
        try:
            ident = die_text(dcmi.die_id(card, device))
            address = bus_address(dcmi.bus_id(card, device))
            chip = dcmi.chip_info(card, device)
            memory, used, memory_type = self._memory(dcmi, card, device)
            physical = dcmi.physical_id(card, device)
        except VendorError:
            return None
        ecc = optional(lambda: dcmi.ecc_info(card, device, memory_type), None)
        unhealthy = (
            ecc is not None and ecc.enabled and ecc.single_bit_errors + ecc.double_bit_errors > 0
        )
        self._chips[ident] = chip.aicore_count
        slices = logical_slices(family(chip.chip_name), self._runtime)
        status = (
            logically_sliced(slices, True, unhealthy) if slices else AcceleratorStatus(unhealthy)
        )
        return CardReading(
            id=ident,
            name=chip.chip_name,
            memory_mib=memory,
            bus_id=address,
            physical_indexes=(physical, card, device),
            status=status,
            memory_used_mib=used,
        )

    @staticmethod
    def _memory(dcmi: Dcmi, card: int, device: int) -> tuple[int, int, int]:
        """(total MB, used MB, the memory type its ECC counters belong to)."""
        hbm = optional(lambda: dcmi.hbm_info(card, device), None)
        if hbm is not None and hbm.total_mb > 0:
            return hbm.total_mb, hbm.used_mb, DEVICE_TYPE_HBM
        try:
            info = dcmi.memory_info(card, device)
        except VendorError:
            if hbm is None:
                raise
            return hbm.total_mb, hbm.used_mb, DEVICE_TYPE_HBM
        return info.total_mb, max(info.total_mb - info.available_mb, 0), DEVICE_TYPE_DDR

    def group_facts(self, interface: Dcmi, card: CardReading) -> GroupFacts:
        return GroupFacts(
            cores=self._chips.get(card.id, 0),
            driver_version=optional(interface.driver_version, "").strip(),
            runtime_version=self._runtime,
            family=family(card.name),
        )
