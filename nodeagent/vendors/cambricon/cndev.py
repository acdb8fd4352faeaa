"""Cambricon CNDev (`libcndev.so`) through ctypes, behind the surface the detector uses.

Devices are addressed by a handle from `cndevGetDeviceHandleByIndex`. Versioned structs carry
the layout the caller speaks in their first field (`CNDEV_VERSION_6`); the `...V2` structs carry
none. Every call returns 0 on success; a failure raises `VendorError`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nodeagent.detect.vendor import (
    Library,
    VendorError,
    env_home,
    environ_or,
    library_candidates,
    load_library,
    text,
)

VERSION_6 = 6
UUID_PREFIX = "MLU-"


@dataclass(frozen=True)
class MluMemory:
    total_mib: int
    used_mib: int


class Cndev(Protocol):
    """What the Cambricon detector asks CNDev. Failures raise `VendorError`."""

    def device_count(self) -> int: ...

    def handle(self, index: int) -> int: ...

    def uuid(self, handle: int) -> str:
        """`MLU-<uuid>`."""
        ...

    def bus_id(self, handle: int) -> str: ...

    def card_name(self, handle: int) -> str: ...

    def memory(self, handle: int) -> MluMemory: ...

    def health(self, handle: int) -> int:
        """1 healthy, 0 unhealthy."""
        ...

    def driver_version(self, handle: int) -> str:
        """`<major>.<minor>`."""
        ...


class _CardInfo(ctypes.Structure):
    _fields_ = (("version", ctypes.c_int), ("number", ctypes.c_uint))


class _Uuid(ctypes.Structure):
    _fields_ = (
        ("version", ctypes.c_int),
        ("uuid", ctypes.c_ubyte * 37),
        ("ncsUUID64", ctypes.c_uint64),
    )


class _MemoryInfoV2(ctypes.Structure):
    """Sizes in MiB."""

    _fields_ = (
        ("physicalMemoryTotal", ctypes.c_int64),
        ("physicalMemoryUsed", ctypes.c_int64),
        ("reservedMemory", ctypes.c_int64),
        ("virtualMemoryTotal", ctypes.c_int64),
        ("virtualMemoryUsed", ctypes.c_int64),
        ("globalMemory", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 16),
    )


class _VersionInfo(ctypes.Structure):
    _fields_ = (
        ("version", ctypes.c_int),
        *(
            (name, ctypes.c_uint)
            for name in (
                "mcuMajorVersion",
                "mcuMinorVersion",
                "mcuBuildVersion",
                "driverMajorVersion",
                "driverMinorVersion",
                "driverBuildVersion",
            )
        ),
    )


class _PcieInfoV2(ctypes.Structure):
    _fields_ = (
        ("subsystemId", ctypes.c_uint),
        ("deviceId", ctypes.c_uint),
        ("vendor", ctypes.c_uint16),
        ("subsystemVendor", ctypes.c_uint16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("function", ctypes.c_uint),
        ("moduleId", ctypes.c_uint16),
        ("slotId", ctypes.c_uint16),
        ("reserved", ctypes.c_uint * 8),
    )


class _DiagErrorDetail(ctypes.Structure):
    _fields_ = (
        ("msg", ctypes.c_char * 512),
        *((name, ctypes.c_uint) for name in ("id", "bdf", "code", "category", "severity")),
    )


class _IncidentInfo(ctypes.Structure):
    _fields_ = (("system", ctypes.c_uint), ("health", ctypes.c_uint), ("error", _DiagErrorDetail))


class _HealthStateV2(ctypes.Structure):
    _fields_ = (
        ("health", ctypes.c_int),
        ("deviceState", ctypes.c_uint),
        ("driverState", ctypes.c_uint),
        ("overallHealth", ctypes.c_uint),
        ("count", ctypes.c_uint),
        ("incidents", _IncidentInfo * 64),
        ("reserved", ctypes.c_uint * 8),
    )


class _HealthState(ctypes.Structure):
    _fields_ = (
        ("version", ctypes.c_int),
        ("health", ctypes.c_int),
        ("deviceState", ctypes.c_uint),
        ("driverState", ctypes.c_uint),
    )


class CndevLibrary:
    """`Cndev` over a loaded `libcndev.so`."""

    def __init__(self, library: Library) -> None:
        self._lib = library

    @property
    def library(self) -> Library:
        """The loaded library, for the sMLU calls the allocator makes (`smlu.py`)."""
        return self._lib

    def device_count(self) -> int:
        info = _CardInfo(version=VERSION_6)
        self._lib.call("cndevGetDeviceCount", ctypes.byref(info))
        return int(info.number)

    def handle(self, index: int) -> int:
        handle = ctypes.c_int(0)
        self._lib.call("cndevGetDeviceHandleByIndex", ctypes.c_int(index), ctypes.byref(handle))
        return handle.value

    def uuid(self, handle: int) -> str:
        info = _Uuid(version=VERSION_6)
        self._lib.call("cndevGetUUID", ctypes.byref(info), ctypes.c_int(handle))
        return UUID_PREFIX + text(bytes(info.uuid))

    def bus_id(self, handle: int) -> str:
        info = _PcieInfoV2()
        self._lib.call("cndevGetPCIeInfoV2", ctypes.byref(info), ctypes.c_int(handle))
        return f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.{info.function}"

    def card_name(self, handle: int) -> str:
        raw = self._lib.value(
            "cndevGetCardNameStringByDevId", ctypes.c_int(handle), restype=ctypes.c_char_p
        )
        if not raw:
            raise VendorError("cndevGetCardNameStringByDevId", -1)
        return text(raw)

    def memory(self, handle: int) -> MluMemory:
        info = _MemoryInfoV2()
        self._lib.call("cndevGetMemoryUsageV2", ctypes.byref(info), ctypes.c_int(handle))
        return MluMemory(int(info.physicalMemoryTotal), int(info.physicalMemoryUsed))

    def health(self, handle: int) -> int:
        if self._lib.has("cndevGetCardHealthStateV2"):
            newer = _HealthStateV2()
            self._lib.call("cndevGetCardHealthStateV2", ctypes.byref(newer), ctypes.c_int(handle))
            return int(newer.health)
        older = _HealthState(version=VERSION_6)
        self._lib.call("cndevGetCardHealthState", ctypes.byref(older), ctypes.c_int(handle))
        return int(older.health)

    def driver_version(self, handle: int) -> str:
        info = _VersionInfo(version=VERSION_6)
        self._lib.call("cndevGetVersionInfo", ctypes.byref(info), ctypes.c_int(handle))
        return f"{info.driverMajorVersion}.{info.driverMinorVersion}"


def neuware_home(environ: Mapping[str, str] | None = None) -> Path:
    return Path(env_home(environ_or(environ), ("NEUWARE_HOME",), "/usr/local/neuware"))


def open_cndev(environ: Mapping[str, str] | None = None) -> CndevLibrary | None:
    home = neuware_home(environ)
    cdll = load_library(library_candidates("libcndev.so", [home / "lib64", home / "lib"]))
    if cdll is None:
        return None
    library = Library(cdll)
    try:
        library.call("cndevInit", ctypes.c_int(0))
    except VendorError:
        return None
    return CndevLibrary(library)
