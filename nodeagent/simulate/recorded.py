"""Vendor libraries answering from a recording: what a simulated host's detectors read, and
what the detector tests replay (IXML/HGML, DCMI, CNDev, ROCm SMI, MXSML and MTML).

A recording is the document `tests/unit/nodeagent/vendor/<manufacturer>/*.json` holds and a
shipped profile's `recording:` carries: the driver's versions and a list of cards, each with the
answers its queries give. An answer `"refused"` (or a missing one) fails the query with a vendor
error code, as a driver that cannot answer does."""

from __future__ import annotations

from typing import Any

from chain.partitions import Placement
from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, VendorError
from nodeagent.vendors.ascend.dcmi import API_V2, ChipInfo, EccInfo, HbmInfo, MemoryInfo
from nodeagent.vendors.cambricon.cndev import MluMemory
from nodeagent.vendors.common.nvmlike import InstanceProfile
from nodeagent.vendors.metax.mxsml import MxDeviceInfo, MxMemory
from nodeagent.vendors.mthreads.mtml import MtMemory

HANDLE_BASE = 0x5000
REFUSED = -8005
"""The code a refused query fails with (any non-zero code reads the same)."""


def refuse(call: str) -> VendorError:
    return VendorError(call, REFUSED)


class Recording:
    """A library's devices, each answering from its entry of the recording by position;
    `count_refused` fails the device count."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.count_refused = False

    def _answer(self, position: int, key: str) -> Any:
        answer = self.entries[position].get(key, "refused")
        if answer == "refused":
            raise refuse(key)
        return answer

    def device_count(self) -> int:
        if self.count_refused:
            raise refuse("count")
        return len(self.entries)


class RecordedNvmlLike(Recording):
    """IXML or HGML (`NvmlLike`): handles are `HANDLE_BASE + position`."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.cards: list[dict[str, Any]] = recording["cards"]
        super().__init__(self.cards)
        self._driver: str = recording["driver_version"]
        self._runtime: int = recording["runtime_version"]

    def _answer(self, handle: int, key: str) -> Any:
        return super()._answer(handle - HANDLE_BASE, key)

    def driver_version(self) -> str:
        return self._driver

    def runtime_version(self) -> int:
        return self._runtime

    def handle(self, index: int) -> int:
        if self.cards[index].get("handle") == "refused":
            raise refuse("handle")
        return HANDLE_BASE + index

    def uuid(self, handle: int) -> str:
        return str(self._answer(handle, "uuid"))

    def name(self, handle: int) -> str:
        return str(self._answer(handle, "name"))

    def bus_id(self, handle: int) -> str:
        return str(self._answer(handle, "bus"))

    def memory(self, handle: int) -> tuple[int, int]:
        total, used = self._answer(handle, "memory")
        return int(total), int(used)

    def minor_number(self, handle: int) -> int:
        return int(self._answer(handle, "minor"))

    def compute_capability(self, handle: int) -> tuple[int, int]:
        major, minor = self._answer(handle, "capability")
        return int(major), int(minor)

    def core_count(self, handle: int) -> int:
        return int(self._answer(handle, "cores"))

    def uncorrected_dram_errors(self, handle: int) -> int:
        return int(self._answer(handle, "ecc"))

    def health(self, handle: int) -> int:
        return int(self._answer(handle, "health"))

    def mig_mode(self, handle: int) -> int:
        return int(self._answer(handle, "mig_mode"))

    def _profile(self, handle: int, key: str, value: int) -> dict[str, Any]:
        for entry in self._answer(handle, "profiles"):
            if entry[key] == value:
                found: dict[str, Any] = entry
                return found
        raise refuse("profile")

    def instance_profile(self, handle: int, profile: int) -> InstanceProfile:
        entry = self._profile(handle, "profile", profile)
        fields = ("id", "slice_count", "instance_count", "memory_mb", "name")
        return InstanceProfile(**{name: entry[name] for name in fields})

    def placements(self, handle: int, profile_id: int) -> tuple[Placement, ...]:
        slots = self._profile(handle, "id", profile_id)["placements"]
        if slots == "refused":
            raise refuse("placements")
        return tuple(Placement(start, length) for start, length in slots)


class RecordedDcmi:
    """DCMI (`Dcmi`), and the container-share flag the Ascend responder turns on
    (`ContainerShare`), kept in memory: every device starts with it off. A V2 recording (`api`
    2) declares no such flag, as `DcmiLibrary` does not."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.api: int = recording["api"]
        self._driver: str = recording["driver_version"]
        self.cards: dict[int, Any] = {
            entry["card"]: entry["devices"] for entry in recording["cards"]
        }
        """DCMI card id -> its devices' answers, or `"refused"` (no device count)."""
        self.listing_refused = False
        self.shared: set[tuple[int, int]] = set()
        """The (card, device) pairs whose container-share flag is on."""

    def _device(self, card: int, device: int, key: str) -> Any:
        answer = self.cards[card][device][key]
        if answer == "refused":
            raise refuse(key)
        return answer

    def card_list(self) -> list[int]:
        if self.listing_refused:
            raise refuse("card list")
        return list(self.cards)

    def device_count(self, card: int) -> int:
        devices = self.cards[card]
        if devices == "refused":
            raise refuse("device count")
        return len(devices)

    def device_type(self, card: int, device: int) -> int:
        kind: int = self._device(card, device, "type")
        return kind

    def die_id(self, card: int, device: int) -> tuple[int, ...]:
        return tuple(self._device(card, device, "die"))

    def bus_id(self, card: int, device: int) -> str:
        return str(self._device(card, device, "bus"))

    def chip_info(self, card: int, device: int) -> ChipInfo:
        return ChipInfo(**self._device(card, device, "chip"))

    def hbm_info(self, card: int, device: int) -> HbmInfo:
        return HbmInfo(**self._device(card, device, "hbm"))

    def memory_info(self, card: int, device: int) -> MemoryInfo:
        return MemoryInfo(**self._device(card, device, "memory"))

    def ecc_info(self, card: int, device: int, memory_type: int) -> EccInfo:
        counters = self._device(card, device, "ecc")
        if str(memory_type) not in counters:
            raise refuse("ecc")
        return EccInfo(**counters[str(memory_type)])

    def physical_id(self, card: int, device: int) -> int:
        physical: int = self._device(card, device, "physical_id")
        return physical

    def driver_version(self) -> str:
        if self._driver == "refused":
            raise refuse("driver version")
        return self._driver

    def mainboard_id(self, card: int, device: int) -> int:
        """A V2 recording's `mainboard_id` (0 when not recorded: a training board, whose
        product the super pod names); V1 has no reader, as `DcmiLibrary`."""
        if self.api != API_V2:
            raise VendorError("dcmi get mainboard id", FUNCTION_NOT_FOUND)
        found: int = self.cards[card][device].get("mainboard_id", 0)
        return found

    def super_pod_type(self, card: int, device: int) -> int:
        found: int = self._device(card, device, "super_pod_type")
        return found

    def _share_target(self, card: int, device: int, call: str) -> tuple[int, int]:
        if self.api == API_V2:
            raise VendorError(call, FUNCTION_NOT_FOUND)
        devices = self.cards.get(card)
        if not isinstance(devices, list) or not 0 <= device < len(devices):
            raise refuse(call)
        return card, device

    def share_enabled(self, card: int, device: int) -> bool:
        return self._share_target(card, device, "dcmi get device share enable") in self.shared

    def enable_share(self, card: int, device: int) -> None:
        self.shared.add(self._share_target(card, device, "dcmi set device share enable"))


class RecordedCndev(Recording):
    """CNDev (`Cndev`): each card answers under the handle its recording names."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.cards: list[dict[str, Any]] = recording["cards"]
        super().__init__(self.cards)
        self._positions = {card["handle"]: position for position, card in enumerate(self.cards)}

    def _answer(self, handle: int, key: str) -> Any:
        return super()._answer(self._positions[handle], key)

    def handle(self, index: int) -> int:
        handle: int = self.cards[index]["handle"]
        return handle

    def uuid(self, handle: int) -> str:
        return str(self._answer(handle, "uuid"))

    def bus_id(self, handle: int) -> str:
        return str(self._answer(handle, "bus"))

    def card_name(self, handle: int) -> str:
        return str(self._answer(handle, "name"))

    def memory(self, handle: int) -> MluMemory:
        return MluMemory(**self._answer(handle, "memory"))

    def health(self, handle: int) -> int:
        return int(self._answer(handle, "health"))

    def driver_version(self, handle: int) -> str:
        return str(self._answer(handle, "driver_version"))


class RecordedRsmi(Recording):
    """ROCm SMI as Hygon's DTK/hyhal ships it (`Rsmi`), devices by position."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)

    def vendor_id(self, index: int) -> int:
        return int(self._answer(index, "vendor_id"))

    def unique_id(self, index: int) -> int:
        return int(self._answer(index, "unique_id"))

    def pci_id(self, index: int) -> int:
        return int(self._answer(index, "pci_id"))

    def name(self, index: int) -> str:
        return str(self._answer(index, "name"))

    def memory_total(self, index: int) -> int:
        return int(self._answer(index, "memory_total"))

    def memory_used(self, index: int) -> int:
        return int(self._answer(index, "memory_used"))

    def uncorrectable_errors(self, index: int) -> int:
        return int(self._answer(index, "uncorrectable_errors"))

    def target_graphics_version(self, index: int) -> int:
        return int(self._answer(index, "target_graphics_version"))


class RecordedMxsml(Recording):
    """MXSML (`Mxsml`), devices by position."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)
        self._versions = {key: recording[key] for key in ("driver_version", "maca_version")}

    def _version(self, key: str) -> str:
        if self._versions[key] == "refused":
            raise refuse(key)
        return str(self._versions[key])

    def device_info(self, index: int) -> MxDeviceInfo:
        return MxDeviceInfo(**self._answer(index, "info"))

    def memory(self, index: int) -> MxMemory:
        return MxMemory(**self._answer(index, "memory"))

    def dram_uncorrectable_errors(self, index: int) -> int:
        return int(self._answer(index, "dram_ue"))

    def driver_version(self) -> str:
        return self._version("driver_version")

    def maca_version(self) -> str:
        return self._version("maca_version")


class RecordedMtml(Recording):
    """MTML (`Mtml`): device objects are positions, tracked in `open` while open."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)
        self._driver: str = recording["driver_version"]
        self.open: set[int] = set()

    def _answer(self, device: Any, key: str) -> Any:
        if device not in self.open:
            raise AssertionError("a device object used after it was freed")
        return super()._answer(device, key)

    def open_device(self, index: int) -> Any:
        if self.devices[index].get("open") == "refused":
            raise refuse("open")
        self.open.add(index)
        return index

    def close_device(self, device: Any) -> None:
        self.open.remove(device)

    def virt_role(self, device: Any) -> int:
        return int(self._answer(device, "virt_role"))

    def uuid(self, device: Any) -> str:
        return str(self._answer(device, "uuid"))

    def name(self, device: Any) -> str:
        return str(self._answer(device, "name"))

    def bus_id(self, device: Any) -> str:
        return str(self._answer(device, "bus"))

    def memory(self, device: Any) -> MtMemory:
        return MtMemory(**self._answer(device, "memory"))

    def core_count(self, device: Any) -> int:
        return int(self._answer(device, "cores"))

    def driver_version(self) -> str:
        if self._driver == "refused":
            raise refuse("driver")
        return self._driver
