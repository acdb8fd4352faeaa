"""MetaX MXSML (`libmxsml.so`) through ctypes, behind the surface the MetaX detector uses.

Devices are addressed by their MXSML index. Calls return `mxSmlReturn_t` (0 = success) except
`mxSmlGetDeviceCount`, which returns the count itself. A failure raises `VendorError`.
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

VERSION_DRIVER = 1
"""`mxSmlVersionUnit_t`: BIOS = 0, driver = 1."""
VIRTUALIZATION_MODE_VF = 2
"""`mxSmlDeviceVirtualizationMode_t`: none = 0, PF = 1, VF = 2."""
VERSION_LENGTH = 128


@dataclass(frozen=True)
class MxDeviceInfo:
    bus_id: str
    uuid: str
    name: str
    mode: int


@dataclass(frozen=True)
class MxMemory:
    vram_total_kib: int
    vram_used_kib: int


class Mxsml(Protocol):
    """What the MetaX detector asks MXSML. Failures raise `VendorError`."""

    def device_count(self) -> int: ...

    def device_info(self, index: int) -> MxDeviceInfo: ...

    def memory(self, index: int) -> MxMemory: ...

    def dram_uncorrectable_errors(self, index: int) -> int: ...

    def driver_version(self) -> str: ...

    def maca_version(self) -> str: ...


class _DeviceInfo(ctypes.Structure):
    _fields_ = (
        ("deviceId", ctypes.c_uint),
        ("type", ctypes.c_uint),
        ("bdfId", ctypes.c_char * 32),
        ("gpuId", ctypes.c_uint),
        ("nodeId", ctypes.c_uint),
        ("uuid", ctypes.c_char * 96),
        ("brand", ctypes.c_uint),
        ("mode", ctypes.c_uint),
        ("deviceName", ctypes.c_char * 32),
    )


class _MemoryInfo(ctypes.Structure):
    """Sizes in KiB."""

    _fields_ = tuple(
        (name, ctypes.c_long)
        for name in ("visVramTotal", "visVramUse", "vramTotal", "vramUse", "xttTotal", "xttUse")
    )


class _EccErrorCount(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint) for name in ("sramCE", "sramUE", "dramCE", "dramUE", "retiredPage")
    )


class MxsmlLibrary:
    """`Mxsml` over a loaded `libmxsml.so`."""

    def __init__(self, library: Library) -> None:
        self._lib = library

    def device_count(self) -> int:
        return int(self._lib.value("mxSmlGetDeviceCount", restype=ctypes.c_uint))

    def device_info(self, index: int) -> MxDeviceInfo:
        info = _DeviceInfo()
        self._lib.call("mxSmlGetDeviceInfo", ctypes.c_uint(index), ctypes.byref(info))
        return MxDeviceInfo(
            text(info.bdfId), text(info.uuid), text(info.deviceName), int(info.mode)
        )

    def memory(self, index: int) -> MxMemory:
        info = _MemoryInfo()
        self._lib.call("mxSmlGetMemoryInfo", ctypes.c_uint(index), ctypes.byref(info))
        return MxMemory(int(info.vramTotal), int(info.vramUse))

    def dram_uncorrectable_errors(self, index: int) -> int:
        counts = _EccErrorCount()
        self._lib.call("mxSmlGetTotalEccErrors", ctypes.c_uint(index), ctypes.byref(counts))
        return int(counts.dramUE)

    def _version(self, symbol: str, *args: object) -> str:
        buffer = ctypes.create_string_buffer(VERSION_LENGTH)
        length = ctypes.c_uint(VERSION_LENGTH)
        self._lib.call(symbol, *args, buffer, ctypes.byref(length))
        return text(buffer.value)

    def driver_version(self) -> str:
        return self._version(
            "mxSmlGetDeviceVersion", ctypes.c_uint(0), ctypes.c_uint(VERSION_DRIVER)
        )

    def maca_version(self) -> str:
        return self._version("mxSmlGetMacaVersion")


def maca_home(environ: Mapping[str, str] | None = None) -> Path:
    return Path(env_home(environ_or(environ), ("MACA_HOME",), "/opt/maca"))


def open_mxsml(environ: Mapping[str, str] | None = None) -> MxsmlLibrary | None:
    home = maca_home(environ)
    folders = [Path("/opt/mxdriver/lib"), Path("/opt/mxn100/lib"), home / "lib64", home / "lib"]
    cdll = load_library(library_candidates("libmxsml.so", folders))
    if cdll is None:
        return None
    library = Library(cdll)
    try:
        library.call("mxSmlInit")
    except VendorError:
        return None
    return MxsmlLibrary(library)
