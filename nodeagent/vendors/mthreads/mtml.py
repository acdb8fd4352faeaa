"""Moore Threads MTML (`libmtml.so`) through ctypes, behind the surface the detector uses.

MTML hands out opaque objects: a library object from `mtmlLibraryInit`, a device object per
index (freed after use), and memory and system objects hanging off those. Every call returns
`MtmlReturn` (0 = success); a failure raises `VendorError`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from nodeagent.detect.vendor import Library, VendorError, load_library, text

VIRT_ROLE_GUEST_VIRTDEVICE = 2
"""`MtmlVirtRole`: none = 0, host virtual device = 1, guest virtual device = 2."""
MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
MEMORY_LOCATION_DRAM = 1
STRING_LENGTH = 128


@dataclass(frozen=True)
class MtMemory:
    total_bytes: int
    used_bytes: int
    uncorrected_errors: int | None
    """Uncorrected volatile DRAM ECC errors; None when the driver does not count them."""


class Mtml(Protocol):
    """What the MThreads detector asks MTML. Failures raise `VendorError`."""

    def device_count(self) -> int: ...

    def open_device(self, index: int) -> Any: ...

    def close_device(self, device: Any) -> None: ...

    def virt_role(self, device: Any) -> int: ...

    def uuid(self, device: Any) -> str: ...

    def name(self, device: Any) -> str: ...

    def bus_id(self, device: Any) -> str: ...

    def memory(self, device: Any) -> MtMemory: ...

    def core_count(self, device: Any) -> int: ...

    def driver_version(self) -> str: ...


class _PciInfo(ctypes.Structure):
    _fields_ = (
        ("sbdf", ctypes.c_char * 32),
        *(
            (name, ctypes.c_uint)
            for name in ("segment", "bus", "device", "pciDeviceId", "pciSubsystemId", "busWidth")
        ),
        ("pciMaxSpeed", ctypes.c_float),
        ("pciCurSpeed", ctypes.c_float),
        *(
            (name, ctypes.c_uint)
            for name in ("pciMaxWidth", "pciCurWidth", "pciMaxGen", "pciCurGen")
        ),
        ("rsvd", ctypes.c_int * 6),
    )


class _DeviceProperty(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint)
        for name in ("virtCap", "virtRole", "mpcCap", "mpcType", "mtLinkCap", "rsvd", "rsvd2")
    )


class MtmlLibrary:
    """`Mtml` over a loaded and initialised `libmtml.so`."""

    def __init__(self, library: Library, handle: ctypes.c_void_p) -> None:
        self._lib = library
        self._handle = handle

    def device_count(self) -> int:
        count = ctypes.c_uint(0)
        self._lib.call("mtmlLibraryCountDevice", self._handle, ctypes.byref(count))
        return count.value

    def open_device(self, index: int) -> Any:
        device = ctypes.c_void_p(None)
        self._lib.call(
            "mtmlLibraryInitDeviceByIndex", self._handle, ctypes.c_uint(index), ctypes.byref(device)
        )
        return device

    def close_device(self, device: Any) -> None:
        self._lib.call("mtmlLibraryFreeDevice", device)

    def virt_role(self, device: Any) -> int:
        prop = _DeviceProperty()
        self._lib.call("mtmlDeviceGetProperty", device, ctypes.byref(prop))
        return int(prop.virtRole)

    def _string(self, symbol: str, device: Any) -> str:
        buffer = ctypes.create_string_buffer(STRING_LENGTH)
        self._lib.call(symbol, device, buffer, ctypes.c_uint(STRING_LENGTH))
        return text(buffer.value)

    def uuid(self, device: Any) -> str:
        return self._string("mtmlDeviceGetUUID", device)

    def name(self, device: Any) -> str:
        return self._string("mtmlDeviceGetName", device)

    def bus_id(self, device: Any) -> str:
        info = _PciInfo()
        self._lib.call("mtmlDeviceGetPciInfo", device, ctypes.byref(info))
        # Upstream builds the address from the numbers; MTML reports function 0 for every GPU.
        return f"{info.segment:04x}:{info.bus:02x}:{info.device:02x}.0"

    def memory(self, device: Any) -> MtMemory:
        memory = ctypes.c_void_p(None)
        self._lib.call("mtmlDeviceInitMemory", device, ctypes.byref(memory))
        try:
            total, used = ctypes.c_ulonglong(0), ctypes.c_ulonglong(0)
            self._lib.call("mtmlMemoryGetTotal", memory, ctypes.byref(total))
            try:
                self._lib.call("mtmlMemoryGetUsed", memory, ctypes.byref(used))
            except VendorError:
                used.value = 0
            errors: int | None = None
            count = ctypes.c_ulonglong(0)
            try:
                self._lib.call(
                    "mtmlMemoryGetEccErrorCounter",
                    memory,
                    ctypes.c_int(MEMORY_ERROR_TYPE_UNCORRECTED),
                    ctypes.c_int(VOLATILE_ECC),
                    ctypes.c_int(MEMORY_LOCATION_DRAM),
                    ctypes.byref(count),
                )
                errors = count.value
            except VendorError:
                errors = None
            return MtMemory(total.value, used.value, errors)
        finally:
            self._lib.call("mtmlDeviceFreeMemory", memory)

    def core_count(self, device: Any) -> int:
        cores = ctypes.c_uint(0)
        self._lib.call("mtmlDeviceCountGpuCores", device, ctypes.byref(cores))
        return cores.value

    def driver_version(self) -> str:
        system = ctypes.c_void_p(None)
        self._lib.call("mtmlLibraryInitSystem", self._handle, ctypes.byref(system))
        try:
            buffer = ctypes.create_string_buffer(STRING_LENGTH)
            self._lib.call(
                "mtmlSystemGetDriverVersion", system, buffer, ctypes.c_uint(STRING_LENGTH)
            )
            return text(buffer.value)
        finally:
            self._lib.call("mtmlLibraryFreeSystem", system)


def open_mtml(candidates: Iterable[str] = ("libmtml.so",)) -> MtmlLibrary | None:
    """The initialised library, or None (not installed, or no driver to initialise against)."""
    cdll = load_library(candidates)
    if cdll is None:
        return None
    library = Library(cdll)
    handle = ctypes.c_void_p(None)
    try:
        library.call("mtmlLibraryInit", ctypes.byref(handle))
    except VendorError:
        return None
    return MtmlLibrary(library, handle)
