"""A simulated NVML: the `Nvml` surface answered from a hardware profile.

It behaves like `pynvml` where the detector can tell: the same constants, the same structures
(pynvml's own ctypes types, filled in), the same exceptions (`pynvml.NVMLError(code)`, which
pynvml maps to its `NVMLError_<Name>` subclasses), calls before `nvmlInit` refused as
uninitialised, unsupported queries refused as `NOT_SUPPORTED`. So the real detector runs
unchanged on top of it, in tests and in the demo.
"""

from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from nodeagent.detect.sysfs import listed_numbers, pci_address
from nodeagent.simulate.mig import GpuState, MigHandle, MigMaterialization
from nodeagent.simulate.profile import Card, MigProfile, Profile
from nodeagent.vendors.common.nvml import (
    GpuInstanceProfileInfo,
    MemoryInfo,
    PciInfo,
    PlacementArray,
    Utilization,
)

IDLE_TEMPERATURE_CELSIUS = 33
IDLE_POWER_MILLIWATTS = 30_000


@dataclass(frozen=True)
class Handle:
    """A device handle; only this simulator's handles are accepted."""

    number: int


class SimulatedNvml(MigMaterialization):
    """NVML over a `Profile`. `passes` counts `nvmlDeviceGetCount` calls (see profile faults);
    MIG instances live in `MigMaterialization`: they start empty, as after a driver reload, or
    from `state_file`, which then keeps them across processes as a driver does."""

    def __init__(self, profile: Profile, state_file: Path | None = None) -> None:
        self._nv: Any = importlib.import_module("pynvml")
        nv = self._nv
        self.profile = profile
        self.passes = 0
        self._initialized = False
        self.NVMLError: type[Exception] = nv.NVMLError
        self.NVML_FEATURE_ENABLED: int = nv.NVML_FEATURE_ENABLED
        self.NVML_DEVICE_MIG_ENABLE: int = nv.NVML_DEVICE_MIG_ENABLE
        self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        self.NVML_VOLATILE_ECC: int = nv.NVML_VOLATILE_ECC
        self.NVML_MEMORY_LOCATION_DRAM: int = nv.NVML_MEMORY_LOCATION_DRAM
        self.NVML_GPU_INSTANCE_PROFILE_COUNT: int = nv.NVML_GPU_INSTANCE_PROFILE_COUNT
        self.NVML_TEMPERATURE_GPU: int = nv.NVML_TEMPERATURE_GPU
        self.nvmlMemory_v2: int = nv.nvmlMemory_v2
        self.NVML_P2P_CAPS_INDEX_NVLINK: int = nv.NVML_P2P_CAPS_INDEX_NVLINK
        self.NVML_P2P_STATUS_OK: int = nv.NVML_P2P_STATUS_OK
        self.NVML_ERROR_IN_USE: int = nv.NVML_ERROR_IN_USE
        self.NVML_ERROR_NOT_FOUND: int = nv.NVML_ERROR_NOT_FOUND
        self.NVML_COMPUTE_INSTANCE_PROFILE_COUNT: int = nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        self.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED: int = (
            nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        )
        self.c_nvmlGpuInstance_t: Any = nv.c_nvmlGpuInstance_t
        self.c_nvmlComputeInstance_t: Any = nv.c_nvmlComputeInstance_t
        self.c_nvmlGpuInstancePlacement_t: Any = nv.c_nvmlGpuInstancePlacement_t
        self._serial = 0
        self._gpus: dict[int, dict[int, GpuState]] = {}
        self._failures: dict[str, str] = {}
        self._state_file = state_file
        self._load_instances()

    def _error(self, name: str) -> Exception:
        error: Exception = self._nv.NVMLError(getattr(self._nv, f"NVML_ERROR_{name}"))
        return error

    def _require_init(self) -> None:
        if not self._initialized:
            raise self._error("UNINITIALIZED")

    def _faulty(self, kind: str, card: int | None = None) -> bool:
        return any(
            fault.kind == kind and fault.card == card and fault.active(self.passes)
            for fault in self.profile.faults
        )

    def _card(self, handle: object) -> Card:
        self._require_init()
        if not isinstance(handle, Handle) or not 0 <= handle.number < len(self.profile.cards):
            raise self._error("INVALID_ARGUMENT")
        return self.profile.cards[handle.number]

    def _card_number(self, handle: object) -> int:
        self._card(handle)
        assert isinstance(handle, Handle)
        return handle.number

    def profile_cards(self) -> tuple[Card, ...]:
        return self.profile.cards

    # System

    def nvmlInit(self) -> None:
        if not self.profile.driver_loaded:
            raise self._error("LIBRARY_NOT_FOUND")
        self._initialized = True

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.profile.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._require_init()
        return self.profile.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        self.passes += 1
        if self._faulty("panic"):
            raise RuntimeError(f"simulated fault in pass {self.passes}")
        if self._faulty("count-error"):
            raise self._error("UNKNOWN")
        return len(self.profile.cards)

    # Identity

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> object:
        self._require_init()
        if not 0 <= index < len(self.profile.cards):
            raise self._error("INVALID_ARGUMENT")
        if self._faulty("lost", index):
            raise self._error("GPU_IS_LOST")
        return Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes, /) -> object:
        self._require_init()
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for number, card in enumerate(self.profile.cards):
            if card.uuid == wanted:
                return Handle(number)
        raise self._error("NOT_FOUND")

    def nvmlDeviceGetUUID(self, handle: object, /) -> str:
        if isinstance(handle, MigHandle):
            self._require_init()
            return self._mig(handle).uuid
        return self._card(handle).uuid

    def nvmlDeviceGetName(self, handle: object, /) -> str:
        return self._card(handle).model.name

    def nvmlDeviceGetMinorNumber(self, handle: object, /) -> int:
        return self._card(handle).minor

    def nvmlDeviceGetPciInfo(self, handle: object, /) -> PciInfo:
        card = self._card(handle)
        info = self._nv.nvmlPciInfo_t()
        info.busId = card.bus_id.encode()
        info.busIdLegacy = card.bus_id.encode()[:15]
        domain, bus, rest = pci_address(card.bus_id).split(":")
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest[:2], 16)
        return cast(PciInfo, info)

    # Memory and health

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None, /) -> MemoryInfo:
        card = self._card(handle)
        if version:
            info = self._nv.c_nvmlMemory_v2_t()
            info.version = version
        else:
            info = self._nv.c_nvmlMemory_t()
        info.total = card.model.memory_mib << 20
        info.used = 0
        info.free = info.total
        return cast(MemoryInfo, info)

    def nvmlDeviceGetMemoryBusWidth(self, handle: object, /) -> int:
        width = self._card(handle).model.memory_bus_width
        if not width:
            raise self._error("NOT_SUPPORTED")
        return width

    def nvmlDeviceGetEccMode(self, handle: object, /) -> list[int]:
        enabled = int(self._card(handle).model.ecc)
        return [enabled, enabled]

    def nvmlDeviceGetMemoryErrorCounter(
        self, handle: object, error_type: int, counter_type: int, location_type: int, /
    ) -> int:
        card = self._card(handle)
        assert isinstance(handle, Handle)
        if self._faulty("unhealthy", handle.number):
            return 1
        if not card.model.ecc:
            raise self._error("NOT_SUPPORTED")
        return 0

    # Capabilities

    def nvmlDeviceGetCudaComputeCapability(self, handle: object, /) -> tuple[int, int]:
        return self._card(handle).model.compute_capability

    def nvmlDeviceGetNumGpuCores(self, handle: object, /) -> int:
        cores = self._card(handle).model.cores
        if not cores:
            raise self._error("NOT_SUPPORTED")
        return cores

    # MIG

    def nvmlDeviceGetMigMode(self, handle: object, /) -> list[int]:
        card = self._card(handle)
        if not card.model.mig_capable:
            raise self._error("NOT_SUPPORTED")
        mode = self.NVML_DEVICE_MIG_ENABLE if card.mig else 0
        return [mode, mode]

    def _mig_profile(self, card: Card, match: str, value: int) -> MigProfile:
        for entry in card.model.mig_profiles:
            if getattr(entry, match) == value:
                return entry
        raise self._error("NOT_SUPPORTED" if card.model.mig_capable else "INVALID_ARGUMENT")

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: object, profile: int, version: int = 2, /
    ) -> GpuInstanceProfileInfo:
        card = self._card(handle)
        if version == 2 and self.profile.legacy_profile_info:
            raise self._error("FUNCTION_NOT_FOUND")
        entry = self._mig_profile(card, "profile", profile)
        if version == 1:
            legacy = self._nv.c_nvmlGpuInstanceProfileInfo_t()
            legacy.id, legacy.sliceCount = entry.id, entry.slices
            legacy.instanceCount, legacy.memorySizeMB = entry.instances, entry.memory_mb
            return cast(GpuInstanceProfileInfo, legacy)
        info = self._nv.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id = entry.id
        info.sliceCount = entry.slices
        info.instanceCount = entry.instances
        info.memorySizeMB = entry.memory_mb
        info.name = entry.name.encode()
        return cast(GpuInstanceProfileInfo, info)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        handle: object,
        profile_id: int,
        placements: PlacementArray | None,
        count: ctypes._Pointer[ctypes.c_uint],
        /,
    ) -> int:
        entry = self._mig_profile(self._card(handle), "id", profile_id)
        if placements is not None:
            if count.contents.value < len(entry.starts):
                raise self._error("INSUFFICIENT_SIZE")
            for slot, start in zip(placements, entry.starts, strict=False):
                slot.start, slot.size = start, entry.size
        count.contents.value = len(entry.starts)
        return 0

    # Monitoring

    def nvmlDeviceGetUtilizationRates(self, handle: object, /) -> Utilization:
        self._card(handle)
        return cast(Utilization, self._nv.c_nvmlUtilization_t(gpu=0, memory=0))

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int, /) -> int:
        self._card(handle)
        return IDLE_TEMPERATURE_CELSIUS

    def nvmlDeviceGetPowerUsage(self, handle: object, /) -> int:
        self._card(handle)
        return IDLE_POWER_MILLIWATTS

    def nvmlDeviceGetCpuAffinity(self, handle: object, cpuSetSize: int, /) -> list[int]:
        """The CPUs near the card as NVML's 64-bit words, as the driver reads them from sysfs:
        its NUMA node's CPUs, or every CPU of the host where the card is on no node (the
        kernel's answer for `NUMA_NO_NODE`). A profile without NUMA nodes has no answer."""
        card = self._card(handle)
        numa = self.profile.numa or {}
        if not numa:
            raise self._error("NOT_SUPPORTED")
        lists = [numa[card.numa_node]] if card.numa_node in numa else list(numa.values())
        words = [0] * cpuSetSize
        for cpu in (cpu for cpus in lists for cpu in listed_numbers(cpus)):
            if cpu < 64 * cpuSetSize:
                words[cpu // 64] |= 1 << cpu % 64
        return words

    def nvmlDeviceGetP2PStatus(self, first: object, second: object, index: int, /) -> int:
        """Peer-to-peer between two cards: over NVLink only where the profile puts both on one
        fabric (`directLinks`); every other capability (read, write, atomics over PCIe) is
        reported supported, as on a host whose chipset allows P2P."""
        a, b = self._card_number(first), self._card_number(second)
        if a == b:
            raise self._error("INVALID_ARGUMENT")
        if index != self._nv.NVML_P2P_CAPS_INDEX_NVLINK:
            return int(self._nv.NVML_P2P_STATUS_OK)
        joined = any(a in domain and b in domain for domain in self.profile.direct_links)
        status = "OK" if joined else "NOT_SUPPORTED"
        return int(getattr(self._nv, f"NVML_P2P_STATUS_{status}"))
