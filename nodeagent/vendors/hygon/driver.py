"""Hygon's DMI seen as the NVML calls `mig.Partitioner` makes, so Hygon partitions are made,
found again, vouched for and reclaimed by the code that does it for NVIDIA and T-Head.

What differs from NVML, and how this answers it:
- a card is found by its PCI address (`Partitioner(address=...)` hands that over where NVML
  gets a UUID);
- profiles are asked by width; the index NVML takes for a profile (0 = 1 slice) is the width
  index DMI takes, so the probe loops carry over unchanged;
- DMI serves no MIG device handles with UUIDs: a partition's identity lives in the driver's
  registry file of its compute instance (`<registry>/ci/dev<index>gi<gi>ci<ci>.conf`, line
  `mig_uuid:`), which is what containers select it by, prefixed `MIG-`; the MIG devices listed
  here are the card's compute instances, each named by its file;
- DMI serves no per-partition process list: the driver's IN_USE on destroy is the only word on
  whether a partition is busy, so no process is ever reported.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ParamSpec, TypeVar

from chain.partitions import Placement, normalize_profile_name
from nodeagent.detect.vendor import VendorError
from nodeagent.plugin.mig import MigNvml
from nodeagent.vendors.common.nvml_mig import text
from nodeagent.vendors.hygon.dmi import IN_USE, MAX_WIDTH, Dmi, absent

REGISTRY = "/etc/dmi_mig_config"
UUID_PREFIX = "MIG-"
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7

P = ParamSpec("P")
R = TypeVar("R")


class DmiError(Exception):
    """A DMI call's failure, under the name and field (`value`) pynvml's errors have."""

    def __init__(self, code: int, call: str = "") -> None:
        super().__init__(f"{call or 'dmi'} returned {code}")
        self.value = code


class _Placement(ctypes.Structure):
    _fields_ = (("start", ctypes.c_uint), ("size", ctypes.c_uint))


@dataclass(frozen=True)
class MigDevice:
    """A compute instance seen as a device."""

    device_index: int
    gpu_instance: int
    compute_instance: int


def registry_file(registry: str, device_index: int, gpu_instance: int, compute: int) -> str:
    return f"{registry}/ci/dev{device_index}gi{gpu_instance}ci{compute}.conf"


def registry_uuid(text: str) -> str:
    """The `mig_uuid:` of a registry file (the GPU instance's fields come first and some keys
    repeat; the identity appears once)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "mig_uuid":
            return value.strip()
    return ""


class DmiMig:
    """The `MigNvml` calls over DMI (`nodeagent.vendors.hygon.dmi`) and its registry directory."""

    NVML_GPU_INSTANCE_PROFILE_COUNT = MAX_WIDTH
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = MAX_WIDTH
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    NVML_ERROR_IN_USE = IN_USE
    NVMLError = DmiError
    c_nvmlGpuInstance_t = ctypes.c_void_p
    c_nvmlComputeInstance_t = ctypes.c_void_p
    c_nvmlGpuInstancePlacement_t = _Placement

    def __init__(self, dmi: Dmi, registry: str = REGISTRY) -> None:
        self.dmi = dmi
        self.registry = registry

    @staticmethod
    def _call(function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except VendorError as error:
            raise DmiError(error.code, error.call) from error

    def nvmlInit(self) -> None:
        """Loading the library was its initialisation."""

    def nvmlDeviceGetHandleByUUID(self, address: str, /) -> int:
        return self._call(self.dmi.handle_by_bus, address)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: int, index: int, version: int = 2, /
    ) -> Any:
        found = self._call(self.dmi.profile, handle, index + 1)
        return SimpleNamespace(
            id=found.id,
            sliceCount=found.slices,
            instanceCount=found.count,
            memorySizeMB=found.memory_mib,
            name=found.name.encode(),
        )

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: int, profile_id: int, placement: Any, /
    ) -> int:
        slot = placement.contents
        where = Placement(int(slot.start), int(slot.size))
        return self._call(self.dmi.create_gpu_instance, handle, profile_id, where)

    @staticmethod
    def _fill(found: list[int], instances: Any, count: Any) -> int:
        """NVML's listing contract: too small an array gets the count and INSUFFICIENT_SIZE."""
        if instances is None or len(instances) < len(found):
            count.contents.value = len(found)
            if found:
                raise DmiError(INSUFFICIENT_SIZE)
            return 0
        for slot, handle in enumerate(found):
            instances[slot] = handle
        count.contents.value = len(found)
        return 0

    def nvmlDeviceGetGpuInstances(
        self, handle: int, profile_id: int, instances: Any, count: Any, /
    ) -> int:
        return self._fill(self._call(self.dmi.gpu_instances, handle, profile_id), instances, count)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: int, /) -> Any:
        info = self._call(self.dmi.gpu_instance_info, gpu_instance)
        slot = SimpleNamespace(start=info.placement.start, size=info.placement.length)
        return SimpleNamespace(id=info.id, profileId=info.profile_id, placement=slot)

    def nvmlGpuInstanceDestroy(self, gpu_instance: int, /) -> int:
        self._call(self.dmi.destroy_gpu_instance, gpu_instance)
        return 0

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: int, profile: int, eng_profile: int, version: int = 2, /
    ) -> Any:
        found, fit = self._call(self.dmi.compute_profile, gpu_instance, profile + 1)
        return SimpleNamespace(id=found, sliceCount=profile + 1, instanceCount=fit)

    def nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: int, profile_id: int, /) -> int:
        return self._call(self.dmi.create_compute_instance, gpu_instance, profile_id)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: int, profile_id: int, instances: Any, count: Any, /
    ) -> int:
        found = self._call(self.dmi.compute_instances, gpu_instance, profile_id)
        return self._fill(found, instances, count)

    def nvmlComputeInstanceGetInfo(self, compute_instance: int, /) -> Any:
        return SimpleNamespace(id=self._call(self.dmi.compute_instance_id, compute_instance))

    def nvmlComputeInstanceDestroy(self, compute_instance: int, /) -> int:
        self._call(self.dmi.destroy_compute_instance, compute_instance)
        return 0

    # --- partitions as devices ----------------------------------------------------------------

    def _optional(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return function(*args, **kwargs)
        except VendorError as error:
            if absent(error):
                return None
            raise DmiError(error.code, error.call) from error

    def _compute_devices(self, handle: int) -> list[MigDevice]:
        """Every compute instance on the card, in GPU instance then compute instance order."""
        index = self._call(self.dmi.index, handle)
        found = []
        for width in range(1, MAX_WIDTH + 1):
            profile = self._optional(self.dmi.profile, handle, width)
            if profile is None:
                continue
            for gpu in self._call(self.dmi.gpu_instances, handle, profile.id):
                gpu_id = self._call(self.dmi.gpu_instance_info, gpu).id
                for width_inside in range(1, MAX_WIDTH + 1):
                    inside = self._optional(self.dmi.compute_profile, gpu, width_inside)
                    if inside is None:
                        continue
                    for compute in self._call(self.dmi.compute_instances, gpu, inside[0]):
                        compute_id = self._call(self.dmi.compute_instance_id, compute)
                        found.append(MigDevice(index, gpu_id, compute_id))
        return sorted(found, key=lambda d: (d.gpu_instance, d.compute_instance))

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int, /) -> int:
        return len(self._compute_devices(handle))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int, /) -> MigDevice:
        devices = self._compute_devices(handle)
        if not 0 <= index < len(devices):
            raise DmiError(NOT_FOUND, "mig device by index")
        return devices[index]

    def nvmlDeviceGetGpuInstanceId(self, handle: MigDevice, /) -> int:
        return handle.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: MigDevice, /) -> int:
        return handle.compute_instance

    def nvmlDeviceGetUUID(self, handle: MigDevice, /) -> str:
        """`MIG-<mig_uuid>` of the compute instance's registry file; NOT_FOUND without one (the
        container could not select the partition)."""
        path = registry_file(
            self.registry, handle.device_index, handle.gpu_instance, handle.compute_instance
        )
        try:
            found = registry_uuid(Path(path).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            found = ""
        if not found:
            raise DmiError(NOT_FOUND, f"registry file {path}")
        return UUID_PREFIX + found

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object, /) -> list[Any]:
        return []


class HygonNaming:
    """DMI is asked by width (1 to 4 slices, indexes 0..3) and names a profile `MIG 2g.15gb`;
    the key's spelling is its last word, as the detector published it. It knows cards by PCI
    address only."""

    by_bus = True

    def count(self, nvml: MigNvml) -> int:
        return 4

    def name(self, index: int, info: Any, card_mib: int) -> str | None:
        return normalize_profile_name(text(info.name)) or None
