"""Hygon's Multi-Instance library (DMI, `libhydmi_mig.so`), through ctypes.

DMI serves Hygon's hardware partitions ("MIG"). It exports NVML's own symbol names (`nvml*`) with
structs of its own, so it is loaded with `RTLD_LOCAL` (ctypes' default) and never mixed with NVML.
Facts kept from upstream:

- the mode is node-wide (`nvmlGetSystemMigMode`, 1 = on); there is no per-card mode;
- a card is reached by its domain-qualified PCI address only (no UUID lookup; its own PCI query
  answers an empty string), and the library's index of it names the registry files;
- GPU and compute instance profiles are asked by *width* (slice count - 1, 0..3), and each
  answer carries the profile id the other calls take (the two are unrelated: 0 -> 3, 1 -> 1,
  3 -> 0 on the measured card, which offers no 3-slice profile);
- placements go by pointer; a GPU instance still holding a compute instance cannot be destroyed
  (IN_USE), so teardown is compute instance first;
- the codes 2 (invalid argument), 3 (not supported) and 6 (not found) mean "nothing there".

There is no init call: loading the library is the whole of it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from chain.partitions import Placement
from nodeagent.detect.vendor import Library, VendorError, load_library, text

MIG_ENABLE = 1
ABSENT = frozenset({2, 3, 6})
"""Invalid argument, not supported, not found: the library saying "nothing there"."""
IN_USE = 19
MAX_WIDTH = 4
NAME_LENGTH = 256
MAX_LISTED = 32
LIBRARY_NAMES = ("libhydmi_mig.so.1", "libhydmi_mig.so")
LIBRARY_DIRS = ("/opt/hyhal/lib", "/opt/dtk/lib")


@dataclass(frozen=True)
class DmiProfile:
    """A GPU instance profile: its id, how many instances fit, and its size."""

    id: int
    count: int
    cu_count: int
    slices: int
    memory_mib: int
    name: str


@dataclass(frozen=True)
class DmiInstance:
    """A live GPU instance: its id, its profile's id and where it sits."""

    id: int
    profile_id: int
    placement: Placement


class Dmi(Protocol):
    """What the Hygon detector and partition maker ask; failures raise `VendorError`."""

    def system_mig_mode(self) -> int: ...

    def device_count(self) -> int: ...

    def handle_by_bus(self, bus_id: str) -> int: ...

    def index(self, device: int) -> int: ...

    def profile(self, device: int, width: int) -> DmiProfile:
        """The GPU instance profile `width` slices wide (1..4)."""
        ...

    def placements(self, device: int, profile_id: int) -> tuple[Placement, ...]: ...

    def create_gpu_instance(self, device: int, profile_id: int, placement: Placement) -> int: ...

    def gpu_instances(self, device: int, profile_id: int) -> list[int]: ...

    def gpu_instance_info(self, gpu_instance: int) -> DmiInstance: ...

    def compute_profile(self, gpu_instance: int, width: int) -> tuple[int, int]:
        """The compute instance profile `width` slices wide: (id, how many fit)."""
        ...

    def create_compute_instance(self, gpu_instance: int, profile_id: int) -> int: ...

    def compute_instances(self, gpu_instance: int, profile_id: int) -> list[int]: ...

    def compute_instance_id(self, compute_instance: int) -> int: ...

    def destroy_compute_instance(self, compute_instance: int) -> None: ...

    def destroy_gpu_instance(self, gpu_instance: int) -> None: ...


class _Profile(ctypes.Structure):
    _fields_ = (
        ("id", ctypes.c_uint),
        ("gi_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("memory_size_MB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * NAME_LENGTH),
    )


class _ComputeProfile(ctypes.Structure):
    _fields_ = (
        ("id", ctypes.c_uint),
        ("ci_count_max", ctypes.c_uint),
        ("cu_count", ctypes.c_uint),
        ("gpu_slice_count", ctypes.c_uint),
        ("name", ctypes.c_char * NAME_LENGTH),
    )


class _Placement(ctypes.Structure):
    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


class _GpuInstanceInfo(ctypes.Structure):
    _fields_ = (
        ("device", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", _Placement),
    )


class _ComputeInstanceInfo(ctypes.Structure):
    _fields_ = (
        ("device", ctypes.c_void_p),
        ("gpu_instance", ctypes.c_void_p),
        ("id", ctypes.c_uint),
        ("profile_id", ctypes.c_uint),
        ("placement", _Placement),
    )


def _handle(value: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(value)


class DmiLibrary:
    """`Dmi` over the loaded library."""

    def __init__(self, library: Library) -> None:
        self._lib = library

    def _out_handle(self, symbol: str, *args: object) -> int:
        found = ctypes.c_void_p(None)
        self._lib.call(symbol, *args, ctypes.byref(found))
        if not found.value:
            raise VendorError(symbol, -1)
        return found.value

    def _listed(self, symbol: str, owner: int, profile_id: int) -> list[int]:
        handles = (ctypes.c_void_p * MAX_LISTED)()
        count = ctypes.c_uint(MAX_LISTED)
        self._lib.call(
            symbol, _handle(owner), ctypes.c_uint(profile_id), handles, ctypes.byref(count)
        )
        if count.value > MAX_LISTED:
            raise VendorError(symbol, 7)  # more than a listing holds: never a partial answer
        return [int(handle or 0) for handle in handles[: count.value]]

    def system_mig_mode(self) -> int:
        current, pending = ctypes.c_uint(0), ctypes.c_uint(0)
        self._lib.call("nvmlGetSystemMigMode", ctypes.byref(current), ctypes.byref(pending))
        return current.value

    def device_count(self) -> int:
        count = ctypes.c_uint(0)
        self._lib.call("nvmlDeviceGetCount", ctypes.byref(count))
        return count.value

    def handle_by_bus(self, bus_id: str) -> int:
        return self._out_handle("nvmlDeviceGetHandleByPciBusId", bus_id.encode())

    def index(self, device: int) -> int:
        found = ctypes.c_uint(0)
        self._lib.call("nvmlDeviceGetIndex", _handle(device), ctypes.byref(found))
        return found.value

    def profile(self, device: int, width: int) -> DmiProfile:
        if not 1 <= width <= MAX_WIDTH:
            raise VendorError("nvmlDeviceGetGpuInstanceProfileInfo", 2)
        info = _Profile()
        self._lib.call(
            "nvmlDeviceGetGpuInstanceProfileInfo",
            _handle(device),
            ctypes.c_uint(width - 1),
            ctypes.byref(info),
        )
        return DmiProfile(
            id=int(info.id),
            count=int(info.gi_count_max),
            cu_count=int(info.cu_count),
            slices=int(info.gpu_slice_count),
            memory_mib=int(info.memory_size_MB),
            name=text(info.name),
        )

    def placements(self, device: int, profile_id: int) -> tuple[Placement, ...]:
        slots = (_Placement * MAX_LISTED)()
        count = ctypes.c_uint(MAX_LISTED)
        self._lib.call(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            _handle(device),
            ctypes.c_uint(profile_id),
            slots,
            ctypes.byref(count),
        )
        if count.value > MAX_LISTED:
            raise VendorError("nvmlDeviceGetGpuInstancePossiblePlacements", 7)
        found = {Placement(int(s.start), int(s.size)) for s in slots[: count.value]}
        return tuple(sorted(found, key=lambda slot: (slot.start, slot.length)))

    def create_gpu_instance(self, device: int, profile_id: int, placement: Placement) -> int:
        slot = _Placement(placement.start, placement.length)
        return self._out_handle(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            _handle(device),
            ctypes.c_uint(profile_id),
            ctypes.byref(slot),
        )

    def gpu_instances(self, device: int, profile_id: int) -> list[int]:
        return self._listed("nvmlDeviceGetGpuInstances", device, profile_id)

    def gpu_instance_info(self, gpu_instance: int) -> DmiInstance:
        info = _GpuInstanceInfo()
        self._lib.call("nvmlGpuInstanceGetInfo", _handle(gpu_instance), ctypes.byref(info))
        slot = Placement(int(info.placement.start), int(info.placement.size))
        return DmiInstance(int(info.id), int(info.profile_id), slot)

    def compute_profile(self, gpu_instance: int, width: int) -> tuple[int, int]:
        info = _ComputeProfile()
        self._lib.call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            _handle(gpu_instance),
            ctypes.c_uint(width - 1),
            ctypes.c_uint(0),  # the shared engine profile, the only one
            ctypes.byref(info),
        )
        return int(info.id), int(info.ci_count_max)

    def create_compute_instance(self, gpu_instance: int, profile_id: int) -> int:
        return self._out_handle(
            "nvmlGpuInstanceCreateComputeInstance", _handle(gpu_instance), ctypes.c_uint(profile_id)
        )

    def compute_instances(self, gpu_instance: int, profile_id: int) -> list[int]:
        return self._listed("nvmlGpuInstanceGetComputeInstances", gpu_instance, profile_id)

    def compute_instance_id(self, compute_instance: int) -> int:
        info = _ComputeInstanceInfo()
        self._lib.call("nvmlComputeInstanceGetInfo", _handle(compute_instance), ctypes.byref(info))
        return int(info.id)

    def destroy_compute_instance(self, compute_instance: int) -> None:
        self._lib.call("nvmlComputeInstanceDestroy", _handle(compute_instance))

    def destroy_gpu_instance(self, gpu_instance: int) -> None:
        self._lib.call("nvmlGpuInstanceDestroy", _handle(gpu_instance))


def dmi_candidates() -> list[str]:
    """The sonames (the loader's own search: LD_LIBRARY_PATH, ld.so.cache), then the DTK's."""
    found = list(LIBRARY_NAMES)
    found += [f"{folder}/{name}" for folder in LIBRARY_DIRS for name in LIBRARY_NAMES]
    return found


def open_dmi(candidates: Iterable[str] | None = None) -> DmiLibrary | None:
    """The loaded library, or None when this host has none (no Multi-Instance driver)."""
    cdll = load_library(candidates if candidates is not None else dmi_candidates())
    return DmiLibrary(Library(cdll)) if cdll is not None else None


def absent(error: VendorError) -> bool:
    return error.code in ABSENT
