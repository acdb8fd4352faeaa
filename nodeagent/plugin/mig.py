"""MIG partitions made real through NVML (docs/design/node-agent.md, "Partitioned (MIG)",
"Allocate").

A partitioned grant names a card, a profile and a slot (`Placement`); `Partitioner.create`
makes a GPU instance of the profile at that slot and one compute instance spanning it, and
returns the MIG device UUID the container is shown. The NVML handle is pynvml on a node and the
simulator (`nodeagent.simulate`) in tests: the same calls, names and error codes.

Ownership lives on disk, one marker per instance under the operator's state dir
(`<mig dir>/<card uuid>/<slot start>.json`: Pod UID, container, profile, slot, MIG UUID). It is
written *before* the instance is made, so an instance without a marker was never ours (or a
crash hit between the two, which the reclaimer's orphan debounce covers), and it outlives a
restart of the agent: a retried Allocate finds its instance again, the visibility server can
check that a partition-backed owner is still live, and the reclaimer knows whose Pod an instance
served.

A failure while making an instance tears down what was made (compute instance, then GPU
instance) and the marker, so a refused grant leaves the card as it was.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from chain.partitions import Placement
from nodeagent.vendors.common.nvml import Nvml
from nodeagent.vendors.common.nvml_mig import (
    GRAPHICS_PROFILES,
    memory_slices,
    profile_info,
    profile_name,
)

log = logging.getLogger(__name__)

OPERATOR_MIG_DIR = "/var/lib/gpustack/operator/mig"


class MigNvml(Nvml, Protocol):
    """The NVML calls that make, list and unmake MIG instances (pynvml names)."""

    @property
    def NVML_COMPUTE_INSTANCE_PROFILE_COUNT(self) -> int: ...

    @property
    def NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED(self) -> int: ...

    @property
    def NVML_ERROR_IN_USE(self) -> int: ...

    @property
    def c_nvmlGpuInstance_t(self) -> Any: ...

    @property
    def c_nvmlComputeInstance_t(self) -> Any: ...

    @property
    def c_nvmlGpuInstancePlacement_t(self) -> Any: ...

    def nvmlDeviceGetHandleByUUID(self, uuid: str, /) -> object: ...

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: object, profile_id: int, placement: Any, /
    ) -> Any: ...

    def nvmlDeviceGetGpuInstances(
        self, handle: object, profile_id: int, instances: Any, count: Any, /
    ) -> int: ...

    def nvmlGpuInstanceGetInfo(self, gpu_instance: Any, /) -> Any: ...

    def nvmlGpuInstanceDestroy(self, gpu_instance: Any, /) -> int: ...

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpu_instance: Any, profile: int, eng_profile: int, version: int = 2, /
    ) -> Any: ...

    def nvmlGpuInstanceCreateComputeInstance(
        self, gpu_instance: Any, profile_id: int, /
    ) -> Any: ...

    def nvmlGpuInstanceGetComputeInstances(
        self, gpu_instance: Any, profile_id: int, instances: Any, count: Any, /
    ) -> int: ...

    def nvmlComputeInstanceGetInfo(self, compute_instance: Any, /) -> Any: ...

    def nvmlComputeInstanceDestroy(self, compute_instance: Any, /) -> int: ...

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object, /) -> int: ...

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int, /) -> object: ...

    def nvmlDeviceGetGpuInstanceId(self, handle: object, /) -> int: ...

    def nvmlDeviceGetComputeInstanceId(self, handle: object, /) -> int: ...

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object, /) -> list[Any]: ...


class PartitionError(Exception):
    """A partition could not be made or unmade (the NVML error is chained)."""


def in_use(nvml: MigNvml, error: BaseException) -> bool:
    """Whether an NVML error says the instance is busy (`NVML_ERROR_IN_USE`)."""
    cause = error.__cause__ if isinstance(error, PartitionError) else error
    return getattr(cause, "value", None) == nvml.NVML_ERROR_IN_USE


# --- profile names -----------------------------------------------------------------------------


class ProfileNaming(Protocol):
    """How one manufacturer's driver names its GPU instance profiles: the profile indexes to
    probe, and the spelling a grant asks for (`vendor_profile_name`) for the profile at an
    index, or None when that profile is never offered; and whether it finds a card by its PCI
    address (`by_bus`) rather than its UUID."""

    by_bus: bool

    def count(self, nvml: MigNvml) -> int: ...

    def name(self, index: int, info: Any, card_mib: int) -> str | None: ...


class NvmlNaming:
    """NVML's own profile indexes; graphics profiles are not offered; the name is the one the
    detector published (`1g.10gb`), rebuilt the same way from the profile's geometry."""

    by_bus = False

    def count(self, nvml: MigNvml) -> int:
        return int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)

    def name(self, index: int, info: Any, card_mib: int) -> str | None:
        if index in GRAPHICS_PROFILES:
            return None
        slices = memory_slices(int(info.memorySizeMB), card_mib)
        return profile_name(info, slices, card_mib)


# --- ownership markers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """Who a MIG instance was made for."""

    pod_uid: str
    container: str
    card: str
    profile: str
    start: int
    length: int
    mig_uuid: str = ""

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.length)


class Markers:
    """Ownership markers under one directory (injectable: tests use a temp dir)."""

    def __init__(self, root: str = OPERATOR_MIG_DIR) -> None:
        self.root = Path(root)

    def _path(self, card: str, start: int) -> Path:
        return self.root / card / f"{start}.json"

    def write(self, marker: Marker) -> None:
        path = self._path(marker.card, marker.start)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(marker), sort_keys=True), encoding="utf-8")
        os.replace(partial, path)  # a crash leaves the old marker or the new one, never half

    def read(self, card: str, start: int) -> Marker | None:
        try:
            raw = json.loads(self._path(card, start).read_text(encoding="utf-8"))
            return Marker(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def remove(self, card: str, start: int) -> None:
        self._path(card, start).unlink(missing_ok=True)

    def all(self) -> Iterator[Marker]:
        for path in sorted(self.root.glob("*/*.json")):
            stem = path.stem
            if stem.isdigit() and (found := self.read(path.parent.name, int(stem))) is not None:
                yield found


# --- what is on a card --------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """One GPU instance on a card, with its compute instances."""

    card: str
    gpu_instance: int
    profile_id: int
    placement: Placement
    compute_instances: int
    mig_uuids: tuple[str, ...]
    busy: bool
    """A process runs on one of its MIG devices."""
    compute_ids: tuple[int, ...] = ()
    """The compute instances that have a MIG device, in the order of `mig_uuids`."""


def _array(kind: Any, size: int) -> Any:
    return (kind * max(size, 1))()


def _gpu_instances(nvml: MigNvml, device: object, profiles: int) -> list[Any]:
    """Every GPU instance on the card, of any of the first `profiles` profile indexes (all of
    them: an instance of a profile never offered still occupies its slots)."""
    handles: list[Any] = []
    seen: set[int] = set()
    for index in range(profiles):
        info = profile_info(nvml, device, index)
        if info is None or int(info.id) in seen:
            continue
        seen.add(int(info.id))
        slots = _array(nvml.c_nvmlGpuInstance_t, int(info.instanceCount))
        count = ctypes.c_uint(len(slots))
        nvml.nvmlDeviceGetGpuInstances(device, int(info.id), slots, ctypes.pointer(count))
        handles.extend(slots[: count.value])
    return handles


def _compute_instances(nvml: MigNvml, gpu: Any) -> list[Any]:
    handles: list[Any] = []
    seen: set[int] = set()
    for index in range(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu, index, nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except nvml.NVMLError:
            continue
        if int(info.id) in seen:
            continue
        seen.add(int(info.id))
        slots = _array(nvml.c_nvmlComputeInstance_t, int(info.instanceCount))
        count = ctypes.c_uint(len(slots))
        nvml.nvmlGpuInstanceGetComputeInstances(gpu, int(info.id), slots, ctypes.pointer(count))
        handles.extend(slots[: count.value])
    return handles


def _mig_devices(nvml: MigNvml, device: object) -> dict[tuple[int, int], object]:
    """MIG device handles by (GPU instance id, compute instance id)."""
    found: dict[tuple[int, int], object] = {}
    for index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(device)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(device, index)
        except nvml.NVMLError:
            continue  # no MIG device at this index
        key = (nvml.nvmlDeviceGetGpuInstanceId(mig), nvml.nvmlDeviceGetComputeInstanceId(mig))
        found[key] = mig
    return found


def card_instances(
    nvml: MigNvml, card: str, profiles: int | None = None, address: str | None = None
) -> list[Instance]:
    """Every GPU instance on the card, by slot; `profiles`: the profile indexes the driver
    numbers (NVML's count when not given); `address`: how the library finds the card (its
    UUID when not given)."""
    device = nvml.nvmlDeviceGetHandleByUUID(address or card)
    migs = _mig_devices(nvml, device)
    count = profiles if profiles is not None else int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
    found = []
    for gpu in _gpu_instances(nvml, device, count):
        info = nvml.nvmlGpuInstanceGetInfo(gpu)
        gpu_id = int(info.id)
        computes = [
            int(nvml.nvmlComputeInstanceGetInfo(c).id) for c in _compute_instances(nvml, gpu)
        ]
        addressed = [c for c in sorted(computes) if (gpu_id, c) in migs]
        devices = [migs[(gpu_id, c)] for c in addressed]
        found.append(
            Instance(
                card=card,
                gpu_instance=gpu_id,
                profile_id=int(info.profileId),
                placement=Placement(int(info.placement.start), int(info.placement.size)),
                compute_instances=len(computes),
                mig_uuids=tuple(nvml.nvmlDeviceGetUUID(m) for m in devices),
                busy=any(nvml.nvmlDeviceGetComputeRunningProcesses(m) for m in devices),
                compute_ids=tuple(addressed),
            )
        )
    return sorted(found, key=lambda instance: instance.placement.start)


# --- making and unmaking ------------------------------------------------------------------------


@dataclass(frozen=True)
class Made:
    """A partition ready for its container: its MIG device, and the instance ids a
    manufacturer that injects the partition's capability nodes (T-Head) addresses it by."""

    mig_uuid: str
    new: bool
    """Made by this call (False: a retry found the instance made for the same container)."""
    card: str = ""
    gpu_instance: int = 0
    compute_instance: int = 0


class Partitioner:
    """Makes and unmakes one node's MIG partitions; one lock per card, so two grants (or a
    grant and the reclaimer) never cut the same card at once while other cards proceed."""

    def __init__(
        self,
        nvml: MigNvml,
        markers: Markers,
        naming: ProfileNaming | None = None,
        address: Callable[[str], str] | None = None,
    ) -> None:
        """`address` turns a card's id into what the library finds it by (Hygon's DMI knows
        cards by PCI address only); the id itself by default (NVML, HGML)."""
        self.nvml = nvml
        self.markers = markers
        self.naming = naming or NvmlNaming()
        self.address: Callable[[str], str] = address or (lambda card: card)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._initialized = False

    def card_lock(self, card: str) -> threading.Lock:
        with self._guard:
            if not self._initialized:
                self.nvml.nvmlInit()  # reference counted in NVML; the detector holds its own
                self._initialized = True
            return self._locks.setdefault(card, threading.Lock())

    @property
    def profiles(self) -> int:
        """The profile indexes this driver numbers."""
        return self.naming.count(self.nvml)

    def instances(self, card: str) -> list[Instance]:
        return card_instances(self.nvml, card, self.profiles, self.address(card))

    def _profile_id(self, device: object, profile: str, card_mib: int) -> int:
        """The creation id of the profile the grant names (the probe index and the id the
        later calls take differ on some drivers, so the id is read, never computed)."""
        for index in range(self.profiles):
            info = profile_info(self.nvml, device, index)
            if info is not None and self.naming.name(index, info, card_mib) == profile:
                return int(info.id)
        raise PartitionError(f"the card offers no MIG profile {profile}")

    def _whole_compute_profile(self, gpu: Any) -> int:
        """The compute instance profile spanning the whole GPU instance."""
        profiles = []
        for index in range(self.nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu, index, self.nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
                )
            except self.nvml.NVMLError:
                continue
            profiles.append((int(info.sliceCount), int(info.id)))
        if not profiles:
            raise PartitionError("the GPU instance offers no compute instance profile")
        return max(profiles)[1]

    def create(
        self,
        card: str,
        profile: str,
        placement: Placement,
        owner: tuple[str, str],
        card_mib: int,
        live: frozenset[str] | None = None,
    ) -> Made:
        """Make (or find again, for the same owner) the partition and its MIG device.

        `profile` is the driver's spelling; `owner` is (Pod UID, container). With `live` (the
        node's Pod UIDs), an idle instance left in the way by a Pod that is gone is unmade
        first: the ledger already freed its slot, the reclaimer just has not swept yet."""
        with self.card_lock(card):
            try:
                return self._create(card, profile, placement, owner, card_mib, live)
            except self.nvml.NVMLError as error:
                raise PartitionError(f"cannot make {profile} on {card}: {error}") from error

    def _create(
        self,
        card: str,
        profile: str,
        placement: Placement,
        owner: tuple[str, str],
        card_mib: int,
        live: frozenset[str] | None,
    ) -> Made:
        nvml = self.nvml
        marker = self.markers.read(card, placement.start)
        for instance in self.instances(card):
            if not instance.placement.overlaps(placement):
                continue
            mine = marker is not None and (marker.pod_uid, marker.container) == owner
            if mine and instance.placement == placement and len(instance.mig_uuids) == 1:
                return Made(  # a retry: already made
                    instance.mig_uuids[0],
                    False,
                    card,
                    instance.gpu_instance,
                    instance.compute_ids[0],
                )
            left = self.markers.read(card, instance.placement.start)
            if live is None or left is None or left.pod_uid in live or instance.busy:
                raise PartitionError(
                    f"slot {placement.start} of {card} overlaps the instance at slot "
                    f"{instance.placement.start}"
                )
            self._destroy(card, instance.placement)  # a gone Pod's, not yet reclaimed
            marker = None
        device = nvml.nvmlDeviceGetHandleByUUID(self.address(card))
        profile_id = self._profile_id(device, profile, card_mib)
        intent = Marker(owner[0], owner[1], card, profile, placement.start, placement.length)
        self.markers.write(intent)
        slot = nvml.c_nvmlGpuInstancePlacement_t()
        slot.start, slot.size = placement.start, placement.length
        made: list[tuple[str, Any]] = []
        try:
            # The C call takes the placement by pointer; pynvml passes its argument through.
            gpu = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                device, profile_id, ctypes.pointer(slot)
            )
            made.append(("gpu", gpu))
            compute = nvml.nvmlGpuInstanceCreateComputeInstance(
                gpu, self._whole_compute_profile(gpu)
            )
            made.append(("compute", compute))
            key = (
                int(nvml.nvmlGpuInstanceGetInfo(gpu).id),
                int(nvml.nvmlComputeInstanceGetInfo(compute).id),
            )
            mig = _mig_devices(nvml, device).get(key)
            if mig is None:
                raise PartitionError(f"no MIG device appeared for instance {key} on {card}")
            mig_uuid = nvml.nvmlDeviceGetUUID(mig)
            self.markers.write(Marker(**{**asdict(intent), "mig_uuid": mig_uuid}))
            return Made(mig_uuid, True, card, *key)
        except BaseException:
            self._undo(made)
            self.markers.remove(card, placement.start)
            raise

    def _undo(self, made: list[tuple[str, Any]]) -> None:
        for kind, handle in reversed(made):  # compute instance first, then its GPU instance
            try:
                if kind == "compute":
                    self.nvml.nvmlComputeInstanceDestroy(handle)
                else:
                    self.nvml.nvmlGpuInstanceDestroy(handle)
            except self.nvml.NVMLError as error:
                log.error("rolling back a half-made partition: %s %s", kind, error)

    def destroy(self, card: str, placement: Placement) -> bool:
        """Unmake the instance at the slot (compute instances, then the GPU instance) and drop
        its marker; False when there was none. PartitionError (IN_USE chained) when busy."""
        with self.card_lock(card):
            try:
                return self._destroy(card, placement)
            except self.nvml.NVMLError as error:
                raise PartitionError(f"cannot unmake slot {placement.start} of {card}") from error

    def _destroy(self, card: str, placement: Placement) -> bool:
        nvml = self.nvml
        device = nvml.nvmlDeviceGetHandleByUUID(self.address(card))
        for gpu in _gpu_instances(nvml, device, self.profiles):
            info = nvml.nvmlGpuInstanceGetInfo(gpu)
            if int(info.placement.start) != placement.start:
                continue
            for compute in _compute_instances(nvml, gpu):
                nvml.nvmlComputeInstanceDestroy(compute)
            nvml.nvmlGpuInstanceDestroy(gpu)
            self.markers.remove(card, placement.start)
            return True
        self.markers.remove(card, placement.start)
        return False

    def live_partition(self, pod_uid: str, container: str) -> Made | None:
        """The partition made for the container and still on its card, if any (the liveness
        check behind a partition-backed visibility grant)."""
        for marker in self.markers.all():
            if (marker.pod_uid, marker.container) != (pod_uid, container) or not marker.mig_uuid:
                continue
            with self.card_lock(marker.card):
                try:
                    present = self.instances(marker.card)
                except self.nvml.NVMLError:
                    return None
            for instance in present:
                if marker.mig_uuid in instance.mig_uuids:
                    at = instance.mig_uuids.index(marker.mig_uuid)
                    compute = instance.compute_ids[at]
                    return Made(marker.mig_uuid, False, marker.card, instance.gpu_instance, compute)
        return None
