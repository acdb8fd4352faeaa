"""AMD GPUs through AMD SMI (its Python binding, see `amdsmi`).

Per card: ASIC info (identity, name, compute units, gfx target), PCI bus id and VRAM are
required, a card missing any of them is skipped; the ECC count and driver version are optional.

Facts kept from upstream:
- the card id is `GPU-<asic serial>`, lowercase hex without `0x`: the same string ROCm matches in
  `ROCR_VISIBLE_DEVICES`. A serial the library cannot report (`N/A`, all ones) is no identity,
  and such a card is skipped rather than given an id that would repeat on every node;
- memory is AMD SMI's `vram_total`, already MiB;
- a card with uncorrectable ECC errors in the memory controller (UMC) block is unhealthy;
- `physicalIndexes` are the card's DRM nodes `[card<N>, renderD<M>]` (absent without them);
- every card takes 128 logical slices with cores overcommit (CU masks may overlap).

Judgment calls:
- the product name is AMD SMI's market name (upstream asks the PCI id database first, then HSA,
  then libdrm; AMD SMI reads the same libdrm table); without one, the PCI device id names it;
- `computeCapability` is the gfx target (`gfx942`); `family` is left empty (upstream takes it
  from HSA's ASIC family id, which AMD SMI does not report).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    bus_address,
    drm_nodes,
    env_home,
    environ_or,
    leading_version,
    logically_sliced,
    read_first,
)
from nodeagent.vendors.amd.amdsmi import AmdSmi, open_amdsmi

AMD = "amd"
LOGICAL_SLICES = 128
DRIVER_DIRS = ("sys/module/amdgpu/drivers/pci:amdgpu",)
ROCM_HOMES = ("ROCM_HOME", "ROCM_PATH")
NOT_APPLICABLE = "n/a"


def card_id(asic_serial: object) -> str:
    """`GPU-<serial>` from AMD SMI's `0x...` serial; empty when the serial is no identity."""
    if not isinstance(asic_serial, str):
        raise ValueError(f"asic_serial: expected a string, got {asic_serial!r}")
    serial = asic_serial.strip().lower().removeprefix("0x")
    if not serial or serial == NOT_APPLICABLE or not serial.strip("f"):
        return ""
    try:
        int(serial, 16)
    except ValueError:
        raise ValueError(f"asic_serial: not a hex serial: {asic_serial!r}") from None
    return f"GPU-{serial}"


def rocm_version(reported: object, home: Path) -> str:
    """ROCm's version as AMD SMI reports it, else from the ROCm install's `.info/version`.

    The binding has answered both `"6.4.1"` and `(True, "6.4.1")` over its releases.
    """
    if isinstance(reported, tuple) and len(reported) == 2 and reported[0] is True:
        reported = reported[1]
    if isinstance(reported, str) and leading_version(reported):
        return leading_version(reported)
    return leading_version(read_first([home / ".info/version", home / ".info/version-rocm"]))


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: expected a dict, got {value!r}")
    return value


def _count(value: object, what: str) -> int:
    """An integer AMD SMI reports; `N/A` (not supported) reads as 0."""
    if isinstance(value, str) and value.strip().lower() == NOT_APPLICABLE:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: expected a count, got {value!r}")
    return value


class AmdDetector(VendorDetector[AmdSmi]):
    manufacturer = AMD

    def __init__(
        self,
        smi: AmdSmi | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], AmdSmi | None] = open_amdsmi,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(smi, opener, sysfs, maker, group_id_with_memory)
        self._rocm_home = Path(env_home(environ_or(environ), ROCM_HOMES, "/opt/rocm"))
        self._read: dict[str, tuple[Any, Mapping[str, Any]]] = {}
        """This pass's handle and ASIC info per card id, for the group facts."""

    def read_cards(self, interface: AmdSmi) -> list[CardReading]:
        try:
            handles = list(interface.amdsmi_get_processor_handles())
        except interface.AmdSmiException:
            return []
        self._read = {}
        cards = []
        for handle in handles:
            card = self._card(interface, handle)
            if card is not None:
                cards.append(card)
        return cards

    def _card(self, smi: AmdSmi, handle: Any) -> CardReading | None:
        try:
            asic = _mapping(smi.amdsmi_get_gpu_asic_info(handle), "asic info")
            bdf = smi.amdsmi_get_gpu_device_bdf(handle)
            vram = _mapping(smi.amdsmi_get_gpu_vram_usage(handle), "vram usage")
        except smi.AmdSmiException:
            return None
        ident = card_id(asic.get("asic_serial", ""))
        if not ident:
            return None
        address = bus_address(str(bdf))
        self._read[ident] = (handle, asic)
        return CardReading(
            id=ident,
            name=self._name(asic),
            memory_mib=_count(vram.get("vram_total"), "vram_total"),
            bus_id=address,
            physical_indexes=drm_nodes(self._sysfs, address, DRIVER_DIRS),
            status=logically_sliced(LOGICAL_SLICES, True, self._uncorrectable(smi, handle) > 0),
            memory_used_mib=_count(vram.get("vram_used", 0), "vram_used"),
        )

    @staticmethod
    def _name(asic: Mapping[str, Any]) -> str:
        name = str(asic.get("market_name", "")).strip()
        if name and name.lower() != NOT_APPLICABLE:
            return name
        return str(asic.get("device_id", "")).strip()

    @staticmethod
    def _uncorrectable(smi: AmdSmi, handle: Any) -> int:
        try:
            counts = smi.amdsmi_get_gpu_ecc_count(handle, smi.AmdSmiGpuBlock.UMC)
        except smi.AmdSmiException:
            return 0  # ECC not supported (consumer cards): nothing says the card is failing
        return _count(_mapping(counts, "ecc count").get("uncorrectable_count", 0), "ecc")

    def group_facts(self, interface: AmdSmi, card: CardReading) -> GroupFacts:
        smi = interface
        handle, asic = self._read[card.id]
        try:
            info = _mapping(smi.amdsmi_get_gpu_driver_info(handle), "driver info")
        except smi.AmdSmiException:
            info = {}
        try:
            reported: object = smi.amdsmi_get_rocm_version()
        except smi.AmdSmiException:
            reported = None
        target = str(asic.get("target_graphics_version", "")).strip()
        return GroupFacts(
            cores=_count(asic.get("num_compute_units", 0), "num_compute_units"),
            driver_version=str(info.get("driver_version", "")).strip(),
            runtime_version=rocm_version(reported, self._rocm_home),
            compute_capability=target if target.startswith("gfx") else "",
        )
