"""Huawei DCMI (`libdcmi.so`) through ctypes, behind the narrow surface the Ascend detector uses.

Ascend drivers serve one of two mutually exclusive DCMI generations: V1 (every driver up to
910B/310P) addresses a device as (card, device-in-card); V2 (the A5/950 generation) has no card
level and numbers devices flat. The detector tries V1 first and falls back to V2. Under V2 each
device is presented as a card holding exactly one device, so `(card, 0)` addresses it and the
detector needs no second code path. Queries V2 has no counterpart for (driver version, the
detailed memory info) raise `VendorError`, which the detector treats as "not reported".

Within a generation, each query asks the newer entry point first (`..._v2`) and falls back to the
older one an older driver only has.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodeagent.detect.vendor import (
    FUNCTION_NOT_FOUND,
    Library,
    VendorError,
    env_home,
    environ_or,
    library_candidates,
    load_library,
    text,
)

API_V1 = 1
API_V2 = 2
NPU_TYPE = 0
"""`enum dcmi_unit_type`: NPU = 0, MCU = 1, CPU = 2."""
VDIE = 1
DDIE = 2
"""`enum dcmi_die_type`: the virtual die identifies a chip; V2 names the DDie as the A5's id."""
DEVICE_TYPE_DDR = 0
DEVICE_TYPE_HBM = 2
"""`enum dcmi_device_type`, the memory an ECC query reads."""
MAX_CARDS = 64
NAME_LENGTH = 32
VERSION_LENGTH = 256


@dataclass(frozen=True)
class ChipInfo:
    chip_type: str
    """`Ascend`."""
    chip_name: str
    """`910B3`, `310P3`, `950PR`, ..."""
    chip_version: str
    aicore_count: int


@dataclass(frozen=True)
class HbmInfo:
    total_mb: int
    used_mb: int


@dataclass(frozen=True)
class MemoryInfo:
    total_mb: int
    available_mb: int


@dataclass(frozen=True)
class EccInfo:
    enabled: bool
    single_bit_errors: int
    double_bit_errors: int


class Dcmi(Protocol):
    """What the Ascend detector asks DCMI. Failures raise `VendorError`."""

    @property
    def api(self) -> int:
        """The generation that initialised: `API_V1` or `API_V2`."""
        ...

    def card_list(self) -> list[int]: ...

    def device_count(self, card: int) -> int: ...

    def device_type(self, card: int, device: int) -> int: ...

    def die_id(self, card: int, device: int) -> tuple[int, ...]: ...

    def bus_id(self, card: int, device: int) -> str: ...

    def chip_info(self, card: int, device: int) -> ChipInfo: ...

    def hbm_info(self, card: int, device: int) -> HbmInfo: ...

    def memory_info(self, card: int, device: int) -> MemoryInfo: ...

    def ecc_info(self, card: int, device: int, memory_type: int) -> EccInfo: ...

    def physical_id(self, card: int, device: int) -> int: ...

    def driver_version(self) -> str: ...


class _ChipInfo(ctypes.Structure):
    _fields_ = (
        ("chip_type", ctypes.c_ubyte * NAME_LENGTH),
        ("chip_name", ctypes.c_ubyte * NAME_LENGTH),
        ("chip_ver", ctypes.c_ubyte * NAME_LENGTH),
        ("aicore_cnt", ctypes.c_uint),
    )


class _ChipInfoV2(ctypes.Structure):
    _fields_ = (*_ChipInfo._fields_, ("npu_name", ctypes.c_ubyte * NAME_LENGTH))


class _PcieInfo(ctypes.Structure):
    """`struct dcmi_pcie_info` (V1 drivers without the `_v2` query): no domain."""

    _fields_ = tuple(
        (name, ctypes.c_uint)
        for name in (
            "deviceid",
            "venderid",
            "subvenderid",
            "subdeviceid",
            "bdf_deviceid",
            "bdf_busid",
            "bdf_funcid",
        )
    )


class _PcieInfoAll(ctypes.Structure):
    _fields_ = (
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    )


class _DieId(ctypes.Structure):
    _fields_ = (("soc_die", ctypes.c_uint * 5),)


class _HbmInfo(ctypes.Structure):
    """Sizes in MB."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    )


class _MemoryInfoV3(ctypes.Structure):
    """`struct dcmi_get_memory_info_stru`, sizes in MB."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("memory_available", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 60),
    )


class _MemoryInfoV1(ctypes.Structure):
    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("utiliza", ctypes.c_uint),
    )


class _EccInfo(ctypes.Structure):
    _fields_ = (
        ("enable_flag", ctypes.c_int),
        ("single_bit_error_cnt", ctypes.c_uint),
        ("double_bit_error_cnt", ctypes.c_uint),
        ("total_single_bit_error_cnt", ctypes.c_uint),
        ("total_double_bit_error_cnt", ctypes.c_uint),
        ("single_bit_isolated_pages_cnt", ctypes.c_uint),
        ("double_bit_isolated_pages_cnt", ctypes.c_uint),
    )


MAIN_CMD_CHIP_INF = 12
CHIP_INF_SUB_CMD_SUPER_POD = 1


class _SuperPodInfo(ctypes.Structure):
    """`struct dcmi_spod_info`, 48 bytes; the A5's product type is the byte at offset 20."""

    _fields_ = (
        ("sdid", ctypes.c_uint),
        ("scale_type", ctypes.c_uint),
        ("super_pod_id", ctypes.c_uint),
        ("server_id", ctypes.c_uint),
        ("chassis_id", ctypes.c_uint),
        ("super_pod_type", ctypes.c_ubyte),
        ("reserve", ctypes.c_ubyte * 27),
    )


def _bus_id(domain: int, bus: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def _chip(info: _ChipInfo | _ChipInfoV2) -> ChipInfo:
    return ChipInfo(
        text(bytes(info.chip_type)),
        text(bytes(info.chip_name)),
        text(bytes(info.chip_ver)),
        int(info.aicore_cnt),
    )


class DcmiLibrary:
    """`Dcmi` over the real `libdcmi.so`, in the generation that initialised."""

    def __init__(self, library: Library, api: int) -> None:
        self._lib = library
        self._api = api

    @property
    def api(self) -> int:
        return self._api

    def _v2(self) -> bool:
        return self._api == API_V2

    @staticmethod
    def _flat(card: int, device: int) -> Any:
        """The V2 device id of a `(card, 0)` address; no other address exists under V2."""
        if device != 0:
            raise VendorError("dcmiv2 device address", -8001)
        return ctypes.c_int(card)

    def _at(self, card: int, device: int) -> tuple[Any, ...]:
        if self._v2():
            return (self._flat(card, device),)
        return (ctypes.c_int(card), ctypes.c_int(device))

    def card_list(self) -> list[int]:
        cards = (ctypes.c_int * MAX_CARDS)()
        count = ctypes.c_int(0)
        if self._v2():
            self._lib.call("dcmiv2_get_device_list", cards, ctypes.byref(count), MAX_CARDS)
        else:
            self._lib.call("dcmi_get_card_list", ctypes.byref(count), cards, MAX_CARDS)
        if not 0 <= count.value <= MAX_CARDS:
            raise ValueError(f"DCMI reported {count.value} cards for a list of {MAX_CARDS}")
        return [int(card) for card in cards[: count.value]]

    def device_count(self, card: int) -> int:
        if self._v2():
            self.device_type(card, 0)  # refuses a device id this driver does not know
            return 1
        count = ctypes.c_int(0)
        self._lib.call("dcmi_get_device_num_in_card", ctypes.c_int(card), ctypes.byref(count))
        return count.value

    def device_type(self, card: int, device: int) -> int:
        kind = ctypes.c_int(0)
        symbol = "dcmiv2_get_device_type" if self._v2() else "dcmi_get_device_type"
        self._lib.call(symbol, *self._at(card, device), ctypes.byref(kind))
        return kind.value

    def die_id(self, card: int, device: int) -> tuple[int, ...]:
        die = _DieId()
        if self._v2():
            try:
                self._lib.call(
                    "dcmiv2_get_device_die_id", self._flat(card, device), VDIE, ctypes.byref(die)
                )
            except VendorError:
                self._lib.call(
                    "dcmiv2_get_device_die_id", self._flat(card, device), DDIE, ctypes.byref(die)
                )
        elif self._lib.has("dcmi_get_device_die_v2"):
            self._lib.call(
                "dcmi_get_device_die_v2", *self._at(card, device), VDIE, ctypes.byref(die)
            )
        else:
            self._lib.call("dcmi_get_device_die", *self._at(card, device), ctypes.byref(die))
        return tuple(int(word) for word in die.soc_die)

    def bus_id(self, card: int, device: int) -> str:
        full = _PcieInfoAll()
        if self._v2():
            self._lib.call(
                "dcmiv2_get_device_pcie_info", self._flat(card, device), ctypes.byref(full)
            )
        elif self._lib.has("dcmi_get_device_pcie_info_v2"):
            self._lib.call(
                "dcmi_get_device_pcie_info_v2", *self._at(card, device), ctypes.byref(full)
            )
        else:
            old = _PcieInfo()
            self._lib.call("dcmi_get_device_pcie_info", *self._at(card, device), ctypes.byref(old))
            return _bus_id(0, old.bdf_busid, old.bdf_deviceid, old.bdf_funcid)
        return _bus_id(full.domain, full.bdf_busid, full.bdf_deviceid, full.bdf_funcid)

    def chip_info(self, card: int, device: int) -> ChipInfo:
        newer = _ChipInfoV2()
        if self._v2():
            self._lib.call(
                "dcmiv2_get_device_chip_info", self._flat(card, device), ctypes.byref(newer)
            )
        elif self._lib.has("dcmi_get_device_chip_info_v2"):
            self._lib.call(
                "dcmi_get_device_chip_info_v2", *self._at(card, device), ctypes.byref(newer)
            )
        else:
            older = _ChipInfo()
            self._lib.call(
                "dcmi_get_device_chip_info", *self._at(card, device), ctypes.byref(older)
            )
            return _chip(older)
        return _chip(newer)

    def hbm_info(self, card: int, device: int) -> HbmInfo:
        info = _HbmInfo()
        symbol = "dcmiv2_get_device_hbm_info" if self._v2() else "dcmi_get_device_hbm_info"
        self._lib.call(symbol, *self._at(card, device), ctypes.byref(info))
        return HbmInfo(int(info.memory_size), int(info.memory_usage))

    def memory_info(self, card: int, device: int) -> MemoryInfo:
        if self._v2():
            raise VendorError("dcmiv2 memory info", FUNCTION_NOT_FOUND)
        if self._lib.has("dcmi_get_device_memory_info_v3"):
            info = _MemoryInfoV3()
            self._lib.call(
                "dcmi_get_device_memory_info_v3", *self._at(card, device), ctypes.byref(info)
            )
            return MemoryInfo(int(info.memory_size), int(info.memory_available))
        old = _MemoryInfoV1()
        self._lib.call("dcmi_get_memory_info", *self._at(card, device), ctypes.byref(old))
        return MemoryInfo(int(old.memory_size), 0)

    def ecc_info(self, card: int, device: int, memory_type: int) -> EccInfo:
        info = _EccInfo()
        symbol = "dcmiv2_get_device_ecc_info" if self._v2() else "dcmi_get_device_ecc_info"
        self._lib.call(symbol, *self._at(card, device), memory_type, ctypes.byref(info))
        return EccInfo(
            info.enable_flag > 0, int(info.single_bit_error_cnt), int(info.double_bit_error_cnt)
        )

    def physical_id(self, card: int, device: int) -> int:
        physical = ctypes.c_uint(0)
        if self._v2():
            self._lib.call(
                "dcmiv2_get_chip_phy_id_by_dev_id", ctypes.c_uint(card), ctypes.byref(physical)
            )
            return physical.value
        logic = ctypes.c_int(0)
        self._lib.call("dcmi_get_device_logic_id", ctypes.byref(logic), *self._at(card, device))
        self._lib.call(
            "dcmi_get_device_phyid_from_logicid", ctypes.c_uint(logic.value), ctypes.byref(physical)
        )
        return physical.value

    def driver_version(self) -> str:
        if self._v2():
            raise VendorError("dcmiv2 driver version", FUNCTION_NOT_FOUND)
        buffer = ctypes.create_string_buffer(VERSION_LENGTH)
        self._lib.call("dcmi_get_driver_version", buffer, VERSION_LENGTH)
        return text(buffer.value)

    def mainboard_id(self, card: int, device: int) -> int:
        """The id of the mainboard the device sits on (an A5 inference card's carrier board).
        Only V2 answers it (`dcmiv2_get_mainboard_id`); a V1 driver raises
        `FUNCTION_NOT_FOUND`, as upstream binds no V1 reader."""
        if not self._v2():
            raise VendorError("dcmi get mainboard id", FUNCTION_NOT_FOUND)
        found = ctypes.c_uint(0)
        self._lib.call("dcmiv2_get_mainboard_id", self._flat(card, device), ctypes.byref(found))
        return found.value

    def super_pod_type(self, card: int, device: int) -> int:
        """The product type of the super pod the device sits in (`super_pod_type` of the chip
        information's super-pod record, main command 12, sub command 1)."""
        info = _SuperPodInfo()
        size = ctypes.c_uint(ctypes.sizeof(info))
        symbol = "dcmiv2_get_device_info" if self._v2() else "dcmi_get_device_info"
        self._lib.call(
            symbol,
            *self._at(card, device),
            ctypes.c_int(MAIN_CMD_CHIP_INF),
            ctypes.c_uint(CHIP_INF_SUB_CMD_SUPER_POD),
            ctypes.byref(info),
            ctypes.byref(size),
        )
        return int(info.super_pod_type)

    def share_enabled(self, card: int, device: int) -> bool:
        """The device's container-share flag. V2 declares no such flag: `VendorError` with
        `FUNCTION_NOT_FOUND`, as for a V1 driver built without the entry point."""
        if self._v2():
            raise VendorError("dcmi get device share enable", FUNCTION_NOT_FOUND)
        flag = ctypes.c_int(0)
        self._lib.call("dcmi_get_device_share_enable", *self._at(card, device), ctypes.byref(flag))
        return flag.value != 0

    def enable_share(self, card: int, device: int) -> None:
        """Turn the container-share flag on (it stays on until the host reboots)."""
        if self._v2():
            raise VendorError("dcmi set device share enable", FUNCTION_NOT_FOUND)
        self._lib.call("dcmi_set_device_share_enable", *self._at(card, device), ctypes.c_int(1))


def dcmi_candidates(environ: Mapping[str, str] | None = None) -> list[str]:
    home = Path(env_home(environ_or(environ), ("CANN_HOME",), "/usr/local/Ascend"))
    return library_candidates("libdcmi.so", [home / "driver/lib64/driver"])


def initialise(library: Library) -> DcmiLibrary | None:
    """V1 if its init answers, else V2; None when neither generation initialises."""
    for api, symbol in ((API_V1, "dcmi_init"), (API_V2, "dcmiv2_init")):
        if not library.has(symbol):
            continue
        try:
            library.call(symbol)
        except VendorError:
            continue
        return DcmiLibrary(library, api)
    return None


def open_dcmi(environ: Mapping[str, str] | None = None) -> DcmiLibrary | None:
    cdll = load_library(dcmi_candidates(environ))
    return initialise(Library(cdll)) if cdll is not None else None
