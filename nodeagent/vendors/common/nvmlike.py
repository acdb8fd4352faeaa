"""Libraries shaped like NVML, through ctypes: Iluvatar's IXML and T-Head's HGML.

Both copy NVML's C API: the same calls, structs and return codes (0 = success), IXML under NVML's
own names (`nvmlDeviceGetName` in `libixml.so`), HGML renamed (`hgmlDeviceGetName`) with a few
calls of its own (`hgmlSystemGetHggcDriverVersion`). `IXML_SYMBOLS` and `HGML_SYMBOLS` say which
name each concept has in each library; a concept the library lacks raises `VendorError`.
Where NVML has versioned variants (`..._v2`), the newest the library exports is called.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from chain.partitions import Placement
from nodeagent.detect.vendor import (
    FUNCTION_NOT_FOUND,
    Library,
    VendorError,
    load_library,
    text,
)

MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
MEMORY_LOCATION_DRAM = 2
DEVICE_MIG_ENABLE = 1
STRING_LENGTH = 96


# The NVML family's shared readings: NVIDIA, Iluvatar and T-Head report CUDA-style versions.


def runtime_version(cuda: int) -> str:
    """NVML's CUDA driver version (12040) as `major.minor` (`12.4`); empty when unknown."""
    if cuda <= 0:
        return ""
    return f"{cuda // 1000}.{cuda % 1000 // 10}"


def compute_capability(major: int, minor: int) -> str:
    return f"{major}.{minor}" if major else ""


@dataclass(frozen=True)
class InstanceProfile:
    """A GPU instance profile (`...GpuInstanceProfileInfo_v2_t`)."""

    id: int
    slice_count: int
    instance_count: int
    memory_mb: int
    name: str


class NvmlLike(Protocol):
    """What the Iluvatar and T-Head detectors ask. Failures raise `VendorError`."""

    def device_count(self) -> int: ...

    def driver_version(self) -> str: ...

    def runtime_version(self) -> int:
        """CUDA (IXML) or HGGC (HGML) driver version as NVML encodes it (12040 = 12.4)."""
        ...

    def handle(self, index: int) -> int: ...

    def uuid(self, handle: int) -> str: ...

    def name(self, handle: int) -> str: ...

    def bus_id(self, handle: int) -> str: ...

    def memory(self, handle: int) -> tuple[int, int]:
        """(total, used) bytes."""
        ...

    def minor_number(self, handle: int) -> int: ...

    def compute_capability(self, handle: int) -> tuple[int, int]: ...

    def core_count(self, handle: int) -> int: ...

    def uncorrected_dram_errors(self, handle: int) -> int: ...

    def health(self, handle: int) -> int:
        """IXML's health bitmask; 0 is healthy."""
        ...

    def mig_mode(self, handle: int) -> int: ...

    def instance_profile(self, handle: int, profile: int) -> InstanceProfile: ...

    def placements(self, handle: int, profile_id: int) -> tuple[Placement, ...]: ...


def _nvml_names(prefix: str) -> dict[str, tuple[str, ...]]:
    def named(*calls: str) -> tuple[str, ...]:
        return tuple(prefix + call for call in calls)

    return {
        "init": named("Init_v2", "Init"),
        "count": named("DeviceGetCount_v2", "DeviceGetCount"),
        "driver": named("SystemGetDriverVersion"),
        "handle": named("DeviceGetHandleByIndex_v2", "DeviceGetHandleByIndex"),
        "uuid": named("DeviceGetUUID"),
        "name": named("DeviceGetName"),
        "pci": named("DeviceGetPciInfo_v3", "DeviceGetPciInfo_v2", "DeviceGetPciInfo"),
        "memory_v2": named("DeviceGetMemoryInfo_v2"),
        "memory": named("DeviceGetMemoryInfo"),
        "minor": named("DeviceGetMinorNumber"),
        "ecc": named("DeviceGetMemoryErrorCounter"),
        "mig": named("DeviceGetMigMode"),
        "profile": named("DeviceGetGpuInstanceProfileInfoV"),
        "placements": named("DeviceGetGpuInstancePossiblePlacements_v2"),
    }


IXML_SYMBOLS: Mapping[str, tuple[str, ...]] = {
    **_nvml_names("nvml"),
    "runtime": ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
    "capability": ("nvmlDeviceGetCudaComputeCapability",),
    "health": ("ixmlDeviceGetHealth",),
}
HGML_SYMBOLS: Mapping[str, tuple[str, ...]] = {
    **_nvml_names("hgml"),
    "runtime": ("hgmlSystemGetHggcDriverVersion_v2", "hgmlSystemGetHggcDriverVersion"),
    "capability": ("hgmlDeviceGetHggcComputeCapability",),
    "cores": ("hgmlDeviceGetNumGpuCores",),
}


class _PciInfo(ctypes.Structure):
    _fields_ = (
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    )


class _Memory(ctypes.Structure):
    _fields_ = (
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    )


class _MemoryV2(ctypes.Structure):
    _fields_ = (
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    )


class _ProfileInfoV2(ctypes.Structure):
    _fields_ = (
        *(
            (name, ctypes.c_uint)
            for name in (
                "version",
                "id",
                "isP2pSupported",
                "sliceCount",
                "instanceCount",
                "multiprocessorCount",
                "copyEngineCount",
                "decoderCount",
                "encoderCount",
                "jpegCount",
                "ofaCount",
            )
        ),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * STRING_LENGTH),
    )


class _Placement(ctypes.Structure):
    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


def struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """NVML's versioned-struct stamp: the size in the low bits, the version in the top byte."""
    return ctypes.sizeof(struct) | (version << 24)


class NvmlLikeLibrary:
    """`NvmlLike` over a loaded IXML or HGML."""

    def __init__(self, library: Library, symbols: Mapping[str, Sequence[str]]) -> None:
        self._lib = library
        self._symbols = symbols

    def _call(self, concept: str, *args: object) -> None:
        names = self._symbols.get(concept, ())
        if not names:
            raise VendorError(concept, FUNCTION_NOT_FOUND)
        self._lib.first(names, *args)

    def initialise(self) -> None:
        self._call("init")

    def has(self, concept: str) -> bool:
        return any(self._lib.has(name) for name in self._symbols.get(concept, ()))

    def _string(self, concept: str, *args: object) -> str:
        buffer = ctypes.create_string_buffer(STRING_LENGTH)
        self._call(concept, *args, buffer, ctypes.c_uint(STRING_LENGTH))
        return text(buffer.value)

    def device_count(self) -> int:
        count = ctypes.c_uint(0)
        self._call("count", ctypes.byref(count))
        return count.value

    def driver_version(self) -> str:
        return self._string("driver")

    def runtime_version(self) -> int:
        version = ctypes.c_int(0)
        self._call("runtime", ctypes.byref(version))
        return version.value

    def handle(self, index: int) -> int:
        handle = ctypes.c_void_p(None)
        self._call("handle", ctypes.c_uint(index), ctypes.byref(handle))
        if not handle.value:
            raise VendorError("device handle", -1)
        return handle.value

    def uuid(self, handle: int) -> str:
        return self._string("uuid", ctypes.c_void_p(handle))

    def name(self, handle: int) -> str:
        return self._string("name", ctypes.c_void_p(handle))

    def bus_id(self, handle: int) -> str:
        info = _PciInfo()
        self._call("pci", ctypes.c_void_p(handle), ctypes.byref(info))
        return text(info.busId) or text(info.busIdLegacy)

    def memory(self, handle: int) -> tuple[int, int]:
        if self.has("memory_v2"):
            newer = _MemoryV2(version=struct_version(_MemoryV2, 2))
            try:
                self._call("memory_v2", ctypes.c_void_p(handle), ctypes.byref(newer))
                return int(newer.total), int(newer.used)
            except VendorError:
                pass  # the driver knows only the first version of the struct
        older = _Memory()
        self._call("memory", ctypes.c_void_p(handle), ctypes.byref(older))
        return int(older.total), int(older.used)

    def minor_number(self, handle: int) -> int:
        minor = ctypes.c_uint(0)
        self._call("minor", ctypes.c_void_p(handle), ctypes.byref(minor))
        return minor.value

    def compute_capability(self, handle: int) -> tuple[int, int]:
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        self._call("capability", ctypes.c_void_p(handle), ctypes.byref(major), ctypes.byref(minor))
        return major.value, minor.value

    def core_count(self, handle: int) -> int:
        cores = ctypes.c_uint(0)
        self._call("cores", ctypes.c_void_p(handle), ctypes.byref(cores))
        return cores.value

    def uncorrected_dram_errors(self, handle: int) -> int:
        count = ctypes.c_ulonglong(0)
        self._call(
            "ecc",
            ctypes.c_void_p(handle),
            ctypes.c_int(MEMORY_ERROR_TYPE_UNCORRECTED),
            ctypes.c_int(VOLATILE_ECC),
            ctypes.c_int(MEMORY_LOCATION_DRAM),
            ctypes.byref(count),
        )
        return count.value

    def health(self, handle: int) -> int:
        health = ctypes.c_ulonglong(0)
        self._call("health", ctypes.c_void_p(handle), ctypes.byref(health))
        return health.value

    def mig_mode(self, handle: int) -> int:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self._call("mig", ctypes.c_void_p(handle), ctypes.byref(current), ctypes.byref(pending))
        return current.value

    def instance_profile(self, handle: int, profile: int) -> InstanceProfile:
        info = _ProfileInfoV2(version=struct_version(_ProfileInfoV2, 2))
        self._call("profile", ctypes.c_void_p(handle), ctypes.c_uint(profile), ctypes.byref(info))
        return InstanceProfile(
            id=int(info.id),
            slice_count=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            memory_mb=int(info.memorySizeMB),
            name=text(info.name),
        )

    def placements(self, handle: int, profile_id: int) -> tuple[Placement, ...]:
        count = ctypes.c_uint(0)
        self._call(
            "placements",
            ctypes.c_void_p(handle),
            ctypes.c_uint(profile_id),
            None,
            ctypes.byref(count),
        )
        if count.value == 0:
            return ()
        slots = (_Placement * count.value)()
        self._call(
            "placements",
            ctypes.c_void_p(handle),
            ctypes.c_uint(profile_id),
            slots,
            ctypes.byref(count),
        )
        found = {Placement(int(slot.start), int(slot.size)) for slot in slots[: count.value]}
        return tuple(sorted(found, key=lambda slot: (slot.start, slot.length)))


def open_nvmlike(
    candidates: Iterable[str], symbols: Mapping[str, Sequence[str]]
) -> NvmlLikeLibrary | None:
    """The initialised library, or None (not installed, or no driver to initialise against)."""
    cdll = load_library(candidates)
    if cdll is None:
        return None
    library = NvmlLikeLibrary(Library(cdll), symbols)
    try:
        library.initialise()
    except VendorError:
        return None
    return library
