"""The part of NVML the NVIDIA detector and monitor use, as a typed surface.

The detector never imports `pynvml` itself: it is handed an object with this surface, by default
the real module (`load_nvml`), in tests and the demo the simulated backend
(`nodeagent.simulate.SimulatedNvml`). Both raise `pynvml.NVMLError` subclasses, so the detector's
error handling is exercised for real. `pynvml` ships no type information; this Protocol is what
mypy checks the detector against, and `load_nvml` is the one place that trusts the module to match.

Placements come back through C out-parameters: a `c_uint` count pointer and a caller-allocated
array of `{start, size}` structs, exactly as the NVML C call takes them.
"""

from __future__ import annotations

import ctypes
import importlib
from collections.abc import Sequence
from typing import Any, Protocol, cast


class PlacementStruct(ctypes.Structure):
    """`nvmlGpuInstancePlacement_t`; same layout as pynvml's, so either may fill it."""

    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


PlacementArray = ctypes.Array[PlacementStruct]


class MemoryInfo(Protocol):
    @property
    def total(self) -> int: ...

    @property
    def used(self) -> int: ...


class PciInfo(Protocol):
    @property
    def busId(self) -> str | bytes: ...


class Utilization(Protocol):
    @property
    def gpu(self) -> int: ...


class GpuInstanceProfileInfo(Protocol):
    """Version 2 of the struct; version 1 (drivers before the `...V` call) has no `name`."""

    @property
    def id(self) -> int: ...

    @property
    def sliceCount(self) -> int: ...

    @property
    def instanceCount(self) -> int: ...

    @property
    def memorySizeMB(self) -> int: ...

    @property
    def name(self) -> str | bytes: ...


class Nvml(Protocol):
    """Functions and constants of `pynvml` the chain calls (names as pynvml spells them)."""

    @property
    def NVMLError(self) -> type[Exception]: ...

    @property
    def NVML_FEATURE_ENABLED(self) -> int: ...

    @property
    def NVML_DEVICE_MIG_ENABLE(self) -> int: ...

    @property
    def NVML_MEMORY_ERROR_TYPE_UNCORRECTED(self) -> int: ...

    @property
    def NVML_VOLATILE_ECC(self) -> int: ...

    @property
    def NVML_MEMORY_LOCATION_DRAM(self) -> int: ...

    @property
    def NVML_GPU_INSTANCE_PROFILE_COUNT(self) -> int: ...

    @property
    def NVML_TEMPERATURE_GPU(self) -> int: ...

    @property
    def nvmlMemory_v2(self) -> int: ...

    @property
    def NVML_P2P_CAPS_INDEX_NVLINK(self) -> int: ...

    @property
    def NVML_P2P_STATUS_OK(self) -> int: ...

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlSystemGetDriverVersion(self) -> str: ...

    def nvmlSystemGetCudaDriverVersion(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object: ...

    def nvmlDeviceGetUUID(self, handle: object, /) -> str: ...

    def nvmlDeviceGetPciInfo(self, handle: object, /) -> PciInfo: ...

    def nvmlDeviceGetName(self, handle: object, /) -> str: ...

    def nvmlDeviceGetMemoryInfo(
        self, handle: object, version: int | None = None, /
    ) -> MemoryInfo: ...

    def nvmlDeviceGetMemoryBusWidth(self, handle: object, /) -> int: ...

    def nvmlDeviceGetEccMode(self, handle: object, /) -> list[int]: ...

    def nvmlDeviceGetMemoryErrorCounter(
        self, handle: object, error_type: int, counter_type: int, location_type: int, /
    ) -> int: ...

    def nvmlDeviceGetCudaComputeCapability(self, handle: object, /) -> tuple[int, int]: ...

    def nvmlDeviceGetNumGpuCores(self, handle: object, /) -> int: ...

    def nvmlDeviceGetMinorNumber(self, handle: object, /) -> int: ...

    def nvmlDeviceGetMigMode(self, handle: object, /) -> list[int]: ...

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: object, profile: int, version: int = 2, /
    ) -> GpuInstanceProfileInfo: ...

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        handle: object,
        profile_id: int,
        placements: PlacementArray | None,
        count: ctypes._Pointer[ctypes.c_uint],
        /,
    ) -> int: ...

    def nvmlDeviceGetUtilizationRates(self, handle: object, /) -> Utilization: ...

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int, /) -> int: ...

    def nvmlDeviceGetPowerUsage(self, handle: object, /) -> int: ...

    def nvmlDeviceGetP2PStatus(self, first: object, second: object, index: int, /) -> int: ...

    def nvmlDeviceGetCpuAffinity(self, handle: object, cpuSetSize: int, /) -> Sequence[int]: ...


def load_nvml() -> Nvml | None:
    """The real `pynvml` module, or None when nvidia-ml-py is not installed.

    Importing pynvml loads no driver library (that happens in `nvmlInit`), so this succeeds on
    any machine with the package; a missing driver shows up later as an `NVMLError`.
    """
    try:
        module: Any = importlib.import_module("pynvml")
    except ImportError:
        return None
    return cast(Nvml, module)
