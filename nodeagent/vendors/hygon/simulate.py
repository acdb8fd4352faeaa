"""A simulated Hygon host in Multi-Instance mode: DMI's calls and the driver's registry files.

`SimulatedDmi` answers the `Dmi` protocol (`nodeagent.vendors.hygon.dmi`) for the cards of a Hygon
recording, each offering the recording's `dmi.profiles`: the detector reads the mode and the
profiles through it, and the partition maker (`DmiMig`) makes and unmakes instances through it.
Making a compute instance writes its registry file (`ci/dev<index>gi<gi>ci0.conf`, a fresh
`mig_uuid` each time, as measured upstream) under `registry`, a folder of its own standing in for
the host's `/etc/dmi_mig_config`; unmaking it removes the file. `RegistryNodes` shows that folder
to the responder at the host path.

Rules kept from the driver: a GPU instance goes only where its profile may start and onto free
slices (23 otherwise); the only compute instance is the one spanning its GPU instance; a GPU
instance holding one cannot be destroyed (IN_USE), nor can a compute instance while `busy`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from chain import fields
from chain.manufacturers import manufacturers
from chain.partitions import Placement
from nodeagent.detect.vendor import VendorError
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.recorded_host import (
    Placed,
    Recorded,
    RecordedHost,
    RecordedSimulator,
    drm_nodes,
    entries,
    entry_drm,
    entry_numa,
    numbered_drm,
)
from nodeagent.vendors.common.kfd_topology import KFD_NODES, render_properties
from nodeagent.vendors.hygon.detect import DRIVER_DIRS, DRIVER_VERSION_FILES, HYGON
from nodeagent.vendors.hygon.dmi import IN_USE, MAX_WIDTH, MIG_ENABLE, DmiInstance, DmiProfile
from nodeagent.vendors.hygon.driver import REGISTRY, DmiMig, registry_file
from nodeagent.vendors.hygon.grants import CONTROL_NODES
from nodeagent.vendors.hygon.recorded import RecordedRsmi
from nodeagent.vendors.hygon.rsmi import bus_id_of

INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
INSUFFICIENT_RESOURCES = 23
COMPUTE_PROFILE_BASE = 10
"""Compute instance profile ids: base + width index (ids of their own, as on the driver)."""
_CARD, _GPU, _COMPUTE = 0x1000, 0x100000, 0x200000


@dataclass
class _Gpu:
    id: int
    profile: DmiProfile
    placement: Placement
    computed: bool = False
    busy: bool = False


@dataclass
class SimulatedDmi:
    buses: Sequence[str]
    """The cards' domain-qualified PCI addresses, in the library's index order."""
    profiles: Sequence[DmiProfile]
    registry: Path
    slots: Mapping[int, tuple[Placement, ...]] = field(default_factory=dict)
    """Each profile id's legal placements on an empty card."""
    mode: int = MIG_ENABLE
    _gpus: dict[int, dict[int, _Gpu]] = field(default_factory=dict)
    _serial: int = 0

    # --- handles ----------------------------------------------------------------------------

    def _card(self, device: int) -> int:
        index = device - _CARD
        if not 0 <= index < len(self.buses):
            raise VendorError("device handle", INVALID_ARGUMENT)
        return index

    def _gpu(self, handle: int, base: int = _GPU) -> tuple[int, _Gpu]:
        card, gpu_id = divmod(handle - base, 256)
        found = self._gpus.get(card, {}).get(gpu_id)
        if found is None:
            raise VendorError("instance handle", INVALID_ARGUMENT)
        return card, found

    # --- the node and its cards ---------------------------------------------------------------

    def system_mig_mode(self) -> int:
        return self.mode

    def device_count(self) -> int:
        return len(self.buses)

    def handle_by_bus(self, bus_id: str) -> int:
        if len(bus_id) != 12:
            raise VendorError("nvmlDeviceGetHandleByPciBusId", INVALID_ARGUMENT)
        if bus_id not in self.buses:
            raise VendorError("nvmlDeviceGetHandleByPciBusId", NOT_FOUND)
        return _CARD + list(self.buses).index(bus_id)

    def index(self, device: int) -> int:
        return self._card(device)

    def profile(self, device: int, width: int) -> DmiProfile:
        self._card(device)
        for entry in self.profiles:
            if entry.slices == width:
                return entry
        raise VendorError("nvmlDeviceGetGpuInstanceProfileInfo", INVALID_ARGUMENT)

    def _by_id(self, profile_id: int) -> DmiProfile:
        for entry in self.profiles:
            if entry.id == profile_id:
                return entry
        raise VendorError("profile id", INVALID_ARGUMENT)

    def placements(self, device: int, profile_id: int) -> tuple[Placement, ...]:
        self._card(device)
        self._by_id(profile_id)
        return self.placements_of(profile_id)

    def placements_of(self, profile_id: int) -> tuple[Placement, ...]:
        return self.slots.get(profile_id, ())

    # --- GPU instances -----------------------------------------------------------------------

    def create_gpu_instance(self, device: int, profile_id: int, placement: Placement) -> int:
        card = self._card(device)
        profile = self._by_id(profile_id)
        if placement not in self.placements_of(profile_id):
            raise VendorError("nvmlDeviceCreateGpuInstanceWithPlacement", INVALID_ARGUMENT)
        gpus = self._gpus.setdefault(card, {})
        if any(gpu.placement.overlaps(placement) for gpu in gpus.values()):
            raise VendorError("nvmlDeviceCreateGpuInstanceWithPlacement", INSUFFICIENT_RESOURCES)
        gpu_id = next(n for n in range(1, 256) if n not in gpus)
        gpus[gpu_id] = _Gpu(gpu_id, profile, placement)
        return _GPU + card * 256 + gpu_id

    def gpu_instances(self, device: int, profile_id: int) -> list[int]:
        card = self._card(device)
        return [
            _GPU + card * 256 + gpu.id
            for gpu in sorted(self._gpus.get(card, {}).values(), key=lambda g: g.id)
            if gpu.profile.id == profile_id
        ]

    def gpu_instance_info(self, gpu_instance: int) -> DmiInstance:
        _, gpu = self._gpu(gpu_instance)
        return DmiInstance(gpu.id, gpu.profile.id, gpu.placement)

    def destroy_gpu_instance(self, gpu_instance: int) -> None:
        card, gpu = self._gpu(gpu_instance)
        if gpu.computed:
            raise VendorError("nvmlGpuInstanceDestroy", IN_USE)
        del self._gpus[card][gpu.id]

    # --- compute instances -------------------------------------------------------------------

    def compute_profile(self, gpu_instance: int, width: int) -> tuple[int, int]:
        _, gpu = self._gpu(gpu_instance)
        if not 1 <= width <= min(gpu.profile.slices, MAX_WIDTH):
            raise VendorError("nvmlGpuInstanceGetComputeInstanceProfileInfo", NOT_SUPPORTED)
        return COMPUTE_PROFILE_BASE + width - 1, gpu.profile.slices // width

    def _file(self, card: int, gpu: _Gpu) -> Path:
        return Path(registry_file(str(self.registry), card, gpu.id, 0))

    def create_compute_instance(self, gpu_instance: int, profile_id: int) -> int:
        card, gpu = self._gpu(gpu_instance)
        if gpu.computed or profile_id != COMPUTE_PROFILE_BASE + gpu.profile.slices - 1:
            raise VendorError("nvmlGpuInstanceCreateComputeInstance", INSUFFICIENT_RESOURCES)
        self._serial += 1
        identity = uuid.uuid5(uuid.NAMESPACE_URL, f"{self.buses[card]}/{gpu.id}/{self._serial}")
        text = (
            f"pci: {self.buses[card]}\nid: {gpu.id}\nprofile_id: {gpu.profile.id}\n"
            f"pci: {self.buses[card]}\ngi_id: {gpu.id}\nid: 0\nprofile_id: {profile_id}\n"
            f"mig_uuid: {identity}\n"
        )
        path = self._file(card, gpu)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        gpu.computed = True
        return _COMPUTE + card * 256 + gpu.id

    def compute_instances(self, gpu_instance: int, profile_id: int) -> list[int]:
        card, gpu = self._gpu(gpu_instance)
        whole = COMPUTE_PROFILE_BASE + gpu.profile.slices - 1
        return [_COMPUTE + card * 256 + gpu.id] if gpu.computed and profile_id == whole else []

    def compute_instance_id(self, compute_instance: int) -> int:
        _, gpu = self._gpu(compute_instance, _COMPUTE)
        if not gpu.computed:
            raise VendorError("nvmlComputeInstanceGetInfo", INVALID_ARGUMENT)
        return 0

    def destroy_compute_instance(self, compute_instance: int) -> None:
        card, gpu = self._gpu(compute_instance, _COMPUTE)
        if not gpu.computed:
            raise VendorError("nvmlComputeInstanceDestroy", INVALID_ARGUMENT)
        if gpu.busy:
            raise VendorError("nvmlComputeInstanceDestroy", IN_USE)
        self._file(card, gpu).unlink(missing_ok=True)
        gpu.computed = False

    # --- test hooks --------------------------------------------------------------------------

    def instances(self) -> list[tuple[str, int, Placement]]:
        """(card bus, GPU instance id, placement) of every live GPU instance."""
        return [
            (self.buses[card], gpu.id, gpu.placement)
            for card, gpus in sorted(self._gpus.items())
            for gpu in sorted(gpus.values(), key=lambda g: g.id)
        ]


def simulated_dmi(
    buses: Sequence[str], recording: Mapping[str, Any], registry: Path
) -> SimulatedDmi:
    """The recording's `dmi:` block (`mode`, `profiles`: `{id, count, cu, slices, memoryMib,
    name, placements: [[start, length], ...]}`) over the recorded cards."""
    profiles = []
    placements: dict[int, tuple[Placement, ...]] = {}
    for entry in recording.get("profiles", ()):
        profile = DmiProfile(
            id=int(entry["id"]),
            count=int(entry["count"]),
            cu_count=int(entry["cu"]),
            slices=int(entry["slices"]),
            memory_mib=int(entry["memoryMib"]),
            name=str(entry["name"]),
        )
        profiles.append(profile)
        placements[profile.id] = tuple(Placement(int(a), int(b)) for a, b in entry["placements"])
    mode = int(recording.get("mode", MIG_ENABLE))
    return SimulatedDmi(buses, profiles, registry, placements, mode)


class RegistryNodes(SimulatedNodes):
    """A simulated host's `/dev` with the driver's registry folder (`/etc/dmi_mig_config`) read
    from the simulator's own."""

    def __init__(self, base: SimulatedNodes, registry: Path) -> None:
        super().__init__(base.minors, base.files)
        self.registry = registry

    def _local(self, path: str) -> Path | None:
        if path == REGISTRY or path.startswith(REGISTRY + "/"):
            return self.registry / path.removeprefix(REGISTRY).lstrip("/")
        return None

    def read(self, path: str) -> str | None:
        local = self._local(path)
        if local is None:
            return super().read(path)
        try:
            return local.read_text()
        except OSError:
            return None

    def listing(self, path: str) -> list[str]:
        local = self._local(path)
        if local is None:
            return super().listing(path)
        try:
            return sorted(entry.name for entry in local.iterdir())
        except OSError:
            return []


HYGON_COMPUTE_UNITS = 120
"""A K100's compute units, for a simulated Hygon card whose recording names none."""


def hygon_cards(recording: dict[str, Any]) -> list[Placed]:
    """The Hygon devices: one whose vendor id names another manufacturer (an AMD card ROCm SMI
    also lists) is not Hygon's to place."""
    vendor = int(manufacturers({})["hygon"].pci_vendor, 16)
    placed: list[Placed] = []
    for position, device, where in entries(recording, "devices"):
        address = bus_id_of(fields.integer(device, "pci_id", where, required=True))
        if device.get("vendor_id", vendor) in (vendor, "refused"):
            units = fields.integer(device, "computeUnits", where)
            found = Placed(position, address, entry_numa(device, where), entry_drm(device, where))
            placed.append(replace(found, compute_units=units))
    return numbered_drm(placed)


def hygon_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    """Hygon's control and DRM nodes, and each card's KFD topology node (the CU count its
    slices are cut from: `computeUnits` of the recorded device, as a K100's 120 by default)."""
    found = drm_nodes(CONTROL_NODES)(cards)
    for number, card in enumerate(cards, start=1):
        if card.drm is None:
            continue
        found.files[f"{KFD_NODES}/{number}/properties"] = render_properties(
            {
                "simd_count": 4 * (card.compute_units or HYGON_COMPUTE_UNITS),
                "simd_per_cu": 4,
                "drm_render_minor": card.drm[1],
            }
        )
    return found


def _multi_instance(
    recording: Mapping[str, Any],
    placed: Sequence[Placed],
    root: Path,
    nodes: SimulatedNodes | None,
) -> tuple[SimulatedDmi | None, SimulatedNodes | None]:
    """A Hygon recording's `dmi:` block as the host's DMI, its registry under `root`, shown to
    the responder through the host's nodes; (None, nodes) without one."""
    block = recording.get("dmi")
    if not isinstance(block, Mapping):
        return None, nodes
    registry = root / "dmi_mig_config"
    (registry / "ci").mkdir(parents=True)
    dmi = simulated_dmi([card.bus for card in placed], block, registry)
    return dmi, RegistryNodes(nodes or SimulatedNodes({}), registry)


def _host(recorded: RecordedHost) -> SimulatedHost:
    """The recorded host, with its Multi-Instance library when the recording has a `dmi:`
    block (never the host's own)."""
    dmi, nodes = _multi_instance(recorded.recording, recorded.placed, recorded.root, recorded.nodes)
    keywords = {**recorded.keywords, "dmi_opener": lambda: dmi}
    mig = cast(MigNvml, DmiMig(dmi, str(dmi.registry))) if dmi is not None else None
    return SimulatedHost(
        recorded.sysfs,
        injected={HYGON: keywords},
        device_nodes=nodes,
        dmi=mig,
        partitions={HYGON: mig} if mig is not None else {},
    )


SIMULATOR = RecordedSimulator(
    Recorded(
        HYGON,
        "rsmi",
        RecordedRsmi,
        hygon_cards,
        hygon_nodes,
        drm_dir=DRIVER_DIRS[0],
        runtime=True,
        driver_version_file=DRIVER_VERSION_FILES[0],
    ),
    _host,
)
