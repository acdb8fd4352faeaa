"""MIG materialization in the simulated NVML: GPU and compute instances, MIG devices, processes.

The calls keep pynvml's names, argument order and error codes, so the partition code in
`nodeagent.plugin.mig` runs unchanged against either. GPU and compute instance handles are what
NVML hands out: opaque C pointers (`c_nvmlGpuInstance_t`, `c_nvmlComputeInstance_t`), here
pointers that encode (card, instance ids) and are never dereferenced. That lets the listing calls
fill caller-allocated arrays exactly like the C library does. MIG device handles are dataclasses,
like the simulator's whole-card handles.

Rules kept from the driver:
- a GPU instance goes only where the profile may start (`INVALID_ARGUMENT` otherwise) and only
  onto memory slices no other instance uses (`INSUFFICIENT_RESOURCES`);
- compute instances share their GPU instance's compute slices (`INSUFFICIENT_RESOURCES` when full);
- a compute instance with a running process, or a GPU instance that still has compute
  instances, cannot be destroyed (`IN_USE`).

Test hooks (not NVML): `run_process`/`end_process` on a MIG device, `fail_next` to make the next
call of one function fail, `instances()` to see what is left on the cards.

A real driver keeps its instances when the agent restarts; the simulator keeps them in the
process unless given a state file (`STATE_ENV`), where every change is written and from which a
new process starts: then an agent restarted over the same file finds what its predecessor made,
as on a node. Without one, instances start empty, as after a driver reload.
"""

from __future__ import annotations

import ctypes
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.simulate.profile import Card, MigProfile

COMPUTE_PROFILE_SLICES = (1, 2, 3, 4, 7, 8, 6)
"""Compute slices of `NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7,8,6}_SLICE` (index = profile)."""
_TAG = 0x5A << 40
"""High bits of every simulated instance pointer, so a stray integer is not mistaken for one."""
STATE_ENV = "GPUSTACK_SIMULATED_MIG_STATE"
"""The environment variable naming the simulated driver's state file (module docstring)."""


def state_file_from_env() -> Path | None:
    """The state file `STATE_ENV` names, or None when it is unset or empty."""
    named = os.environ.get(STATE_ENV, "")
    return Path(named) if named else None


@dataclass(frozen=True)
class MigHandle:
    """A MIG device handle: one compute instance seen as a device."""

    card: int
    gpu_instance: int
    compute_instance: int


@dataclass
class ComputeState:
    id: int
    profile: int
    slices: int
    uuid: str
    processes: list[int] = field(default_factory=list)


@dataclass
class GpuState:
    id: int
    profile_id: int
    start: int
    size: int
    slices: int
    computes: dict[int, ComputeState] = field(default_factory=dict)


@dataclass(frozen=True)
class InstanceView:
    """One GPU instance as a test sees it."""

    card: str
    gpu_instance: int
    profile_id: int
    start: int
    size: int
    mig_uuids: tuple[str, ...]


class MigMaterialization:
    """The instance half of `SimulatedNvml` (which supplies the attributes below)."""

    _nv: Any
    _serial: int
    _gpus: dict[int, dict[int, GpuState]]
    _failures: dict[str, str]
    _state_file: Path | None

    def _error(self, name: str) -> Exception:
        raise NotImplementedError

    def _card(self, handle: object) -> Card:
        raise NotImplementedError

    def _mig_profile(self, card: Card, match: str, value: int) -> MigProfile:
        raise NotImplementedError

    def _card_number(self, handle: object) -> int:
        raise NotImplementedError

    # --- test hooks ------------------------------------------------------------------------

    def fail_next(self, function: str, error: str) -> None:
        """The next call of `function` raises `NVML_ERROR_<error>` (once)."""
        self._failures[function] = error

    def run_process(self, mig_uuid: str, pid: int) -> None:
        self._compute_by_uuid(mig_uuid).processes.append(pid)
        self._save_instances()

    def end_process(self, mig_uuid: str, pid: int) -> None:
        self._compute_by_uuid(mig_uuid).processes.remove(pid)
        self._save_instances()

    def instances(self) -> list[InstanceView]:
        cards = self.profile_cards()
        return [
            InstanceView(
                cards[number].uuid,
                gpu.id,
                gpu.profile_id,
                gpu.start,
                gpu.size,
                tuple(c.uuid for c in gpu.computes.values()),
            )
            for number, gpus in sorted(self._gpus.items())
            for gpu in sorted(gpus.values(), key=lambda g: g.id)
        ]

    def profile_cards(self) -> tuple[Card, ...]:
        raise NotImplementedError

    # --- the state a real driver keeps across the agent's restarts -------------------------

    def _load_instances(self) -> None:
        """The instances the state file holds, on the cards of this profile (by card UUID: a
        file written for other cards adds nothing); none when there is no file yet."""
        if self._state_file is None or not self._state_file.exists():
            return
        saved = json.loads(self._state_file.read_text(encoding="utf-8"))
        numbers = {card.uuid: number for number, card in enumerate(self.profile_cards())}
        self._serial = int(saved.get("serial", 0))
        for card_uuid, gpus in (saved.get("cards") or {}).items():
            if card_uuid not in numbers:
                continue
            states = self._gpus.setdefault(numbers[card_uuid], {})
            for gpu in gpus:
                computes = {
                    int(c["id"]): ComputeState(**{**c, "processes": list(c["processes"])})
                    for c in gpu.get("computes") or []
                }
                fields = {k: int(v) for k, v in gpu.items() if k != "computes"}
                states[fields["id"]] = GpuState(**fields, computes=computes)

    def _save_instances(self) -> None:
        """Write every instance to the state file, whole and atomically (a new file renamed
        over the old), so a process stopped at any moment leaves the last state or the one
        before."""
        if self._state_file is None:
            return
        cards = self.profile_cards()
        saved = {
            "serial": self._serial,
            "cards": {
                cards[number].uuid: [
                    {
                        **{k: v for k, v in asdict(gpu).items() if k != "computes"},
                        "computes": [asdict(c) for c in gpu.computes.values()],
                    }
                    for gpu in gpus.values()
                ]
                for number, gpus in sorted(self._gpus.items())
            },
        }
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        fresh = self._state_file.with_name(f".{self._state_file.name}.{os.getpid()}")
        fresh.write_text(json.dumps(saved, sort_keys=True), encoding="utf-8")
        os.replace(fresh, self._state_file)

    def _compute_by_uuid(self, mig_uuid: str) -> ComputeState:
        for gpus in self._gpus.values():
            for gpu in gpus.values():
                for compute in gpu.computes.values():
                    if compute.uuid == mig_uuid:
                        return compute
        raise KeyError(mig_uuid)

    def _maybe_fail(self, function: str) -> None:
        error = self._failures.pop(function, None)
        if error is not None:
            raise self._error(error)

    # --- handles ---------------------------------------------------------------------------

    def _pointer(self, kind: str, card: int, gpu: int, compute: int = 0) -> Any:
        address = _TAG | card << 24 | gpu << 12 | compute
        return ctypes.cast(ctypes.c_void_p(address), getattr(self._nv, kind))

    def _decode(self, handle: object) -> tuple[int, int, int]:
        try:
            address = ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]
        except (ctypes.ArgumentError, TypeError):
            raise self._error("INVALID_ARGUMENT") from None
        if address is None or address >> 40 != _TAG >> 40:
            raise self._error("INVALID_ARGUMENT")
        return (address >> 24) & 0xFFFF, (address >> 12) & 0xFFF, address & 0xFFF

    def _gpu(self, handle: object) -> tuple[int, GpuState]:
        card, gpu_id, _ = self._decode(handle)
        gpu = self._gpus.get(card, {}).get(gpu_id)
        if gpu is None:
            raise self._error("INVALID_ARGUMENT")
        return card, gpu

    def _compute(self, handle: object) -> tuple[int, GpuState, ComputeState]:
        card, gpu_id, compute_id = self._decode(handle)
        gpu = self._gpus.get(card, {}).get(gpu_id)
        compute = gpu.computes.get(compute_id) if gpu is not None else None
        if gpu is None or compute is None:
            raise self._error("INVALID_ARGUMENT")
        return card, gpu, compute

    # --- GPU instances ---------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: object, profile_id: int, placement: Any, /
    ) -> Any:
        card = self._card(handle)
        number = self._card_number(handle)
        if not card.mig:
            raise self._error("NOT_SUPPORTED")
        entry = self._mig_profile(card, "id", profile_id)
        self._maybe_fail("nvmlDeviceCreateGpuInstanceWithPlacement")
        if not isinstance(placement, ctypes._Pointer):  # NVML reads it through a pointer
            raise self._error("INVALID_ARGUMENT")
        start, size = int(placement.contents.start), int(placement.contents.size)
        if start not in entry.starts or size != entry.size:
            raise self._error("INVALID_ARGUMENT")
        gpus = self._gpus.setdefault(number, {})
        if any(start < g.start + g.size and g.start < start + size for g in gpus.values()):
            raise self._error("INSUFFICIENT_RESOURCES")
        gpu_id = next(n for n in range(1, 4096) if n not in gpus)
        gpus[gpu_id] = GpuState(gpu_id, profile_id, start, size, entry.slices)
        self._save_instances()
        return self._pointer("c_nvmlGpuInstance_t", number, gpu_id)

    def nvmlDeviceGetGpuInstances(
        self, handle: object, profile_id: int, instances: Any, count: Any, /
    ) -> int:
        self._card(handle)
        number = self._card_number(handle)
        found = sorted(
            g.id for g in self._gpus.get(number, {}).values() if g.profile_id == profile_id
        )
        if instances is None or len(instances) < len(found):
            count.contents.value = len(found)
            if found:
                raise self._error("INSUFFICIENT_SIZE")
            return 0
        for slot, gpu_id in enumerate(found):
            instances[slot] = self._pointer("c_nvmlGpuInstance_t", number, gpu_id)
        count.contents.value = len(found)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: object, gpu_instance_id: int, /) -> Any:
        self._card(handle)
        number = self._card_number(handle)
        if gpu_instance_id not in self._gpus.get(number, {}):
            raise self._error("NOT_FOUND")
        return self._pointer("c_nvmlGpuInstance_t", number, gpu_instance_id)

    def nvmlGpuInstanceGetInfo(self, gpu_instance: object, /) -> Any:
        _, gpu = self._gpu(gpu_instance)
        info = self._nv.c_nvmlGpuInstanceInfo_t()
        info.id, info.profileId = gpu.id, gpu.profile_id
        info.placement.start, info.placement.size = gpu.start, gpu.size
        return info

    def nvmlGpuInstanceDestroy(self, gpu_instance: object, /) -> int:
        card, gpu = self._gpu(gpu_instance)
        self._maybe_fail("nvmlGpuInstanceDestroy")
        if gpu.computes:
            raise self._error("IN_USE")
        del self._gpus[card][gpu.id]
        self._save_instances()
        return 0

    # --- compute instances -----------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: object, profile: int, eng_profile: int, version: int = 2, /
    ) -> Any:
        _, gpu = self._gpu(gpu_instance)
        if not 0 <= profile < len(COMPUTE_PROFILE_SLICES) or eng_profile != 0:
            raise self._error("INVALID_ARGUMENT")
        slices = COMPUTE_PROFILE_SLICES[profile]
        if slices > gpu.slices:
            raise self._error("NOT_SUPPORTED")
        if version == 1:
            info = self._nv.c_nvmlComputeInstanceProfileInfo_t()
        else:
            info = self._nv.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.name = f"MIG {slices}c.{gpu.slices}g".encode()
        info.id, info.sliceCount, info.instanceCount = profile, slices, gpu.slices // slices
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gpu_instance: object, profile_id: int, /) -> Any:
        card, gpu = self._gpu(gpu_instance)
        if not 0 <= profile_id < len(COMPUTE_PROFILE_SLICES):
            raise self._error("INVALID_ARGUMENT")
        self._maybe_fail("nvmlGpuInstanceCreateComputeInstance")
        slices = COMPUTE_PROFILE_SLICES[profile_id]
        if slices + sum(c.slices for c in gpu.computes.values()) > gpu.slices:
            raise self._error("INSUFFICIENT_RESOURCES")
        compute_id = next(n for n in range(4096) if n not in gpu.computes)
        self._serial += 1
        parent = self.profile_cards()[card].uuid
        name = f"{parent}/{gpu.id}/{compute_id}/{self._serial}"
        mig_uuid = f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, name)}"
        gpu.computes[compute_id] = ComputeState(compute_id, profile_id, slices, mig_uuid)
        self._save_instances()
        return self._pointer("c_nvmlComputeInstance_t", card, gpu.id, compute_id)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: object, profile_id: int, instances: Any, count: Any, /
    ) -> int:
        card, gpu = self._gpu(gpu_instance)
        found = sorted(c.id for c in gpu.computes.values() if c.profile == profile_id)
        if instances is None or len(instances) < len(found):
            count.contents.value = len(found)
            if found:
                raise self._error("INSUFFICIENT_SIZE")
            return 0
        for slot, compute_id in enumerate(found):
            instances[slot] = self._pointer("c_nvmlComputeInstance_t", card, gpu.id, compute_id)
        count.contents.value = len(found)
        return 0

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpu_instance: object, compute_instance_id: int, /
    ) -> Any:
        card, gpu = self._gpu(gpu_instance)
        if compute_instance_id not in gpu.computes:
            raise self._error("NOT_FOUND")
        return self._pointer("c_nvmlComputeInstance_t", card, gpu.id, compute_instance_id)

    def nvmlComputeInstanceGetInfo(self, compute_instance: object, /) -> Any:
        compute = self._compute(compute_instance)[2]
        info = self._nv.c_nvmlComputeInstanceInfo_t()
        info.id, info.profileId = compute.id, compute.profile
        info.placement.start, info.placement.size = 0, compute.slices
        return info

    def nvmlComputeInstanceDestroy(self, compute_instance: object, /) -> int:
        _, gpu, compute = self._compute(compute_instance)
        self._maybe_fail("nvmlComputeInstanceDestroy")
        if compute.processes:
            raise self._error("IN_USE")
        del gpu.computes[compute.id]
        self._save_instances()
        return 0

    # --- MIG devices -----------------------------------------------------------------------

    def _mig_devices(self, number: int) -> list[MigHandle]:
        return [
            MigHandle(number, gpu.id, compute.id)
            for gpu in sorted(self._gpus.get(number, {}).values(), key=lambda g: g.id)
            for compute in sorted(gpu.computes.values(), key=lambda c: c.id)
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object, /) -> int:
        card = self._card(handle)
        return max((entry.instances for entry in card.model.mig_profiles), default=0)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int, /) -> MigHandle:
        self._card(handle)
        devices = self._mig_devices(self._card_number(handle))
        if not 0 <= index < len(devices):
            raise self._error("NOT_FOUND")
        return devices[index]

    def _mig(self, handle: MigHandle) -> ComputeState:
        gpu = self._gpus.get(handle.card, {}).get(handle.gpu_instance)
        compute = gpu.computes.get(handle.compute_instance) if gpu is not None else None
        if compute is None:
            raise self._error("INVALID_ARGUMENT")
        return compute

    def nvmlDeviceGetGpuInstanceId(self, handle: object, /) -> int:
        if not isinstance(handle, MigHandle):
            raise self._error("INVALID_ARGUMENT")
        self._mig(handle)
        return handle.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: object, /) -> int:
        if not isinstance(handle, MigHandle):
            raise self._error("INVALID_ARGUMENT")
        self._mig(handle)
        return handle.compute_instance

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object, /) -> list[Any]:
        if isinstance(handle, MigHandle):
            pids = list(self._mig(handle).processes)
        else:
            number = self._card_number(handle)
            pids = [
                pid
                for gpu in self._gpus.get(number, {}).values()
                for compute in gpu.computes.values()
                for pid in compute.processes
            ]
        return [
            self._nv.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": 0}) for pid in sorted(pids)
        ]
