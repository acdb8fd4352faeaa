"""Hygon DCUs through ROCm SMI (see `rsmi`), as Hygon's DTK/hyhal ships it.

Per card: unique id, PCI bus id, name and VRAM are required; a card missing any is skipped.

Facts kept from upstream:
- the id is `GPU-<unique id>` in lowercase hex;
- memory is the VRAM total in bytes, as MiB; uncorrectable UMC ECC errors make a card unhealthy;
- the driver version is the kernel module's (`/sys/module/hycu/version`, else `hydcu`); the
  runtime version the ROCm/DTK install's `.info/version`;
- `computeCapability` is the gfx target (below 2000 the number reads in decimal, above in hex);
- `physicalIndexes` are the card's DRM nodes `[card<N>, renderD<M>]`;
- every card takes 4 logical slices without cores overcommit (`vdev.conf` gives each slice a
  disjoint CU mask), unless the node is in Multi-Instance mode: its cards then offer their
  partition profiles only (`hygon_mig`, read through DMI).

Judgment calls:
- the name is RSMI's device name (upstream asks the PCI id database and HSA first);
- RSMI initialised for all GPUs also lists AMD cards on a mixed node, so a device whose PCI vendor
  is readable and not Hygon's is left to the AMD detector;
- cores and family are not read (upstream takes both from HSA; in Multi-Instance mode it counts
  the widest profile's CUs times its count).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from chain.manufacturers import Manufacturer
from nodeagent.detect.partitions import agree_within_groups
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    GroupFacts,
    VendorDetector,
    VendorError,
    bus_address,
    drm_nodes,
    env_home,
    environ_or,
    leading_version,
    library_candidates,
    optional,
    read_first,
)
from nodeagent.vendors.hygon.dmi import Dmi, open_dmi
from nodeagent.vendors.hygon.partitions import Mode, card_status, read_mode
from nodeagent.vendors.hygon.rsmi import Rsmi, bus_id_of, open_rsmi

HYGON = "hygon"
DRIVER_DIRS = (
    "sys/module/hycu/drivers/pci:hycu",
    "sys/module/hydcu/drivers/pci:hydcu",
)
DRIVER_VERSION_FILES = ("sys/module/hycu/version", "sys/module/hydcu/version")
ROCM_HOMES = ("ROCM_HOME", "ROCM_PATH")
LIBRARY_DIRS = ("/opt/hyhal/lib", "/opt/dtk/rocm_smi/lib", "/opt/dtk/.hyhal/rocm_smi/lib")
VERSION_FILES = (".info/version", ".info/version-rocm", ".info/version-dev", ".info/version-libs")


def graphics_target(version: int) -> str:
    if version <= 0:
        return ""
    return f"gfx{version}" if version < 2000 else f"gfx{version:x}"


def rocm_home(environ: Mapping[str, str]) -> Path:
    return Path(env_home(environ, ROCM_HOMES, "/opt/rocm"))


def rsmi_candidates(environ: Mapping[str, str]) -> list[str]:
    home = rocm_home(environ)
    folders = [environ["ROCM_SMI_LIB_PATH"]] if environ.get("ROCM_SMI_LIB_PATH") else []
    folders += [*LIBRARY_DIRS, str(home / "lib"), str(home / "rocm_smi/lib")]
    return library_candidates("librocm_smi64.so", folders)


def dtk_version(home: Path) -> str:
    """The ROCm/DTK version from the install's `.info` files (or its parent's)."""
    paths = [folder / name for folder in (home, home.parent) for name in VERSION_FILES]
    return leading_version(read_first(paths))


class HygonDetector(VendorDetector[Rsmi]):
    manufacturer = HYGON

    def __init__(
        self,
        rsmi: Rsmi | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], Rsmi | None] | None = None,
        environ: Mapping[str, str] | None = None,
        runtime_version: Callable[[], str] | None = None,
        dmi: Dmi | None = None,
        dmi_opener: Callable[[], Dmi | None] | None = None,
    ) -> None:
        """`dmi` (else `dmi_opener`, else the host's library, opened once) reads the node's
        Multi-Instance mode and the cards' partition profiles."""
        env = environ_or(environ)
        super().__init__(
            rsmi,
            opener or (lambda: open_rsmi(rsmi_candidates(env))),
            sysfs,
            maker,
            group_id_with_memory,
        )
        self._runtime_version = runtime_version or (lambda: dtk_version(rocm_home(env)))
        self._indexes: dict[str, int] = {}
        self._dmi = dmi
        self._open_dmi = dmi_opener or open_dmi
        self._dmi_opened = dmi is not None
        self._mode = Mode(False)

    def dmi(self) -> Dmi | None:
        if not self._dmi_opened:
            self._dmi = self._open_dmi()
            self._dmi_opened = True
        return self._dmi

    def read_cards(self, interface: Rsmi) -> list[CardReading]:
        try:
            count = interface.device_count()
        except VendorError:
            return []
        self._indexes = {}
        self._mode = read_mode(self.dmi())  # node-wide, read once a pass
        cards = []
        for index in range(count):
            card = self._card(interface, index)
            if card is not None:
                self._indexes[card.id] = index
                cards.append(card)
        return agree_within_groups(cards)

    def _card(self, rsmi: Rsmi, index: int) -> CardReading | None:
        vendor = optional(lambda: rsmi.vendor_id(index), -1)
        if vendor >= 0 and f"{vendor:04x}" != self._maker.pci_vendor.lower():
            return None
        try:
            ident = f"GPU-{rsmi.unique_id(index):x}"
            address = bus_address(bus_id_of(rsmi.pci_id(index)))
            name = rsmi.name(index)
            memory = rsmi.memory_total(index) >> 20
        except VendorError:
            return None
        unhealthy = optional(lambda: rsmi.uncorrectable_errors(index), 0) > 0
        return CardReading(
            id=ident,
            name=name,
            memory_mib=memory,
            bus_id=address,
            physical_indexes=drm_nodes(self._sysfs, address, DRIVER_DIRS),
            status=card_status(self._mode, self.dmi(), address, self._maker, unhealthy),
            memory_used_mib=optional(lambda: rsmi.memory_used(index), 0) >> 20,
        )

    def group_facts(self, interface: Rsmi, card: CardReading) -> GroupFacts:
        index = self._indexes[card.id]
        driver = read_first(self._sysfs.root / path for path in DRIVER_VERSION_FILES)
        return GroupFacts(
            driver_version=driver,
            runtime_version=self._runtime_version(),
            compute_capability=graphics_target(
                optional(lambda: interface.target_graphics_version(index), 0)
            ),
        )
