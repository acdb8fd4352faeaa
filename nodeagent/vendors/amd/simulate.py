"""Simulated AMD hardware: a profile answered through the `amdsmi` binding's surface, a sysfs
tree with the cards' DRM nodes, and the `/dev` nodes the device plugin injects.

A profile names `manufacturer: amd` (the YAML beside the NVIDIA ones):

```yaml
manufacturer: amd
description: 2 x AMD Instinct MI300X
rocmVersion: "6.4.1"            # what amdsmi_get_rocm_version answers
driverVersion: "6.10.5"         # the amdgpu driver
numa: {"0": "0-47"}
models:
  mi300x: {marketName: AMD Instinct MI300X, deviceId: "0x74a1", computeUnits: 304,
           gfx: gfx942, vramMib: 196592, shaderEngines: 32, xcc: 8}   # the KFD topology
cards:
  - {model: mi300x, bdf: "0000:05:00.0", serial: "0x5B4C6E3A7D2F1A09", drm: [1, 128],
     numaNode: 0}                 # optional: uncorrectable: N (UMC ECC errors)
```
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chain import fields
from nodeagent.detect.sysfs import Sysfs
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.simulate.base import SimulatedHost, Simulator
from nodeagent.simulate.sysfs import write_pci_sysfs
from nodeagent.vendors.amd.detect import AMD
from nodeagent.vendors.common.kfd_topology import KFD_NODES, render_properties

AMD_VENDOR = "0x1002"
DISPLAY_CLASS = "0x038000"
DRM_DIR = "sys/module/amdgpu/drivers/pci:amdgpu"
KFD = "/dev/kfd"


@dataclass(frozen=True)
class AmdModel:
    market_name: str
    device_id: str
    compute_units: int
    gfx: str
    vram_mib: int
    shader_engines: int = 0
    xcc: int = 0


@dataclass(frozen=True)
class AmdCard:
    model: AmdModel
    bdf: str
    serial: str
    drm: tuple[int, int]
    numa_node: int = -1
    uncorrectable: int = 0


@dataclass(frozen=True)
class AmdProfile:
    name: str
    cards: tuple[AmdCard, ...]
    rocm_version: str = ""
    driver_version: str = ""
    numa: Mapping[int, str] | None = None
    description: str = ""

    def device_nodes(self) -> SimulatedNodes:
        """`/dev/kfd` and each card's DRM nodes, numbered as the profile says, and each card's
        KFD topology node (one SIMD array per shader engine, four SIMDs per CU)."""
        minors = {KFD: 0}
        files = {}
        for number, card in enumerate(self.cards, start=1):
            minors[f"/dev/dri/card{card.drm[0]}"] = card.drm[0]
            minors[f"/dev/dri/renderD{card.drm[1]}"] = card.drm[1]
            files[f"{KFD_NODES}/{number}/properties"] = render_properties(
                {
                    "simd_count": 4 * card.model.compute_units,
                    "array_count": card.model.shader_engines,
                    "simd_arrays_per_engine": 1,
                    "simd_per_cu": 4,
                    "drm_render_minor": card.drm[1],
                    "num_xcc": card.model.xcc,
                }
            )
        return SimulatedNodes(minors, files)


def parse_amd_profile(name: str, body: fields.Obj) -> AmdProfile:
    models = {}
    for key, raw in fields.child(body, "models", "$").items():
        where = f"models.{key}"
        model = fields.as_object(raw, where)
        models[key] = AmdModel(
            market_name=fields.string(model, "marketName", where, required=True),
            device_id=fields.string(model, "deviceId", where, required=True),
            compute_units=fields.integer(model, "computeUnits", where, required=True),
            gfx=fields.string(model, "gfx", where, required=True),
            vram_mib=fields.integer(model, "vramMib", where, required=True),
            shader_engines=fields.integer(model, "shaderEngines", where),
            xcc=fields.integer(model, "xcc", where),
        )
    cards = []
    for card, where in fields.items(body, "cards", "$", required=True):
        key = fields.string(card, "model", where, required=True)
        if key not in models:
            raise ValueError(f"{where}.model: no model {key!r}")
        drm = fields.integers(card, "drm", where)
        if drm is None or len(drm) != 2:
            raise ValueError(f"{where}.drm: expected [card, renderD]")
        cards.append(
            AmdCard(
                model=models[key],
                bdf=fields.string(card, "bdf", where, required=True),
                serial=fields.string(card, "serial", where, required=True),
                drm=(drm[0], drm[1]),
                numa_node=fields.integer(card, "numaNode", where, minimum=-1)
                if "numaNode" in card
                else -1,
                uncorrectable=fields.integer(card, "uncorrectable", where),
            )
        )
    numa = {int(k): str(v) for k, v in fields.child(body, "numa", "$").items()}
    return AmdProfile(
        name=name,
        cards=tuple(cards),
        rocm_version=fields.string(body, "rocmVersion", "$"),
        driver_version=fields.string(body, "driverVersion", "$"),
        numa=numa or None,
        description=fields.string(body, "description", "$"),
    )


class SmiError(Exception):
    """The simulated binding's error type."""


class _InitFlags:
    INIT_AMD_GPUS = 2


class _GpuBlock:
    UMC = 1


class SimulatedAmdSmi:
    """The `amdsmi` surface the AMD detector calls, answering from a profile."""

    AmdSmiException = SmiError
    AmdSmiInitFlags = _InitFlags
    AmdSmiGpuBlock = _GpuBlock

    def __init__(self, profile: AmdProfile) -> None:
        self.profile = profile

    def _card(self, handle: Any) -> AmdCard:
        if not isinstance(handle, int) or not 0 <= handle < len(self.profile.cards):
            raise SmiError(f"no processor handle {handle!r}")
        return self.profile.cards[handle]

    def amdsmi_init(self, flag: Any = 0, /) -> None:
        return None

    def amdsmi_get_processor_handles(self) -> list[Any]:
        return list(range(len(self.profile.cards)))

    def amdsmi_get_gpu_asic_info(self, handle: Any, /) -> dict[str, Any]:
        card = self._card(handle)
        return {
            "market_name": card.model.market_name,
            "vendor_id": AMD_VENDOR,
            "device_id": card.model.device_id,
            "asic_serial": card.serial,
            "num_compute_units": card.model.compute_units,
            "target_graphics_version": card.model.gfx,
        }

    def amdsmi_get_gpu_device_bdf(self, handle: Any, /) -> str:
        return self._card(handle).bdf

    def amdsmi_get_gpu_vram_usage(self, handle: Any, /) -> dict[str, Any]:
        return {"vram_total": self._card(handle).model.vram_mib, "vram_used": 0}

    def amdsmi_get_gpu_ecc_count(self, handle: Any, block: Any, /) -> dict[str, Any]:
        errors = self._card(handle).uncorrectable
        return {"correctable_count": 0, "uncorrectable_count": errors, "deferred_count": 0}

    def amdsmi_get_gpu_driver_info(self, handle: Any, /) -> dict[str, Any]:
        self._card(handle)
        return {"driver_name": "amdgpu", "driver_version": self.profile.driver_version}

    def amdsmi_get_rocm_version(self) -> Any:
        if not self.profile.rocm_version:
            raise SmiError("no ROCm installed")
        return (True, self.profile.rocm_version)


def write_amd_sysfs(profile: AmdProfile, root: Path) -> Sysfs:
    """The cards on the PCI bus with their NUMA node and their DRM nodes under the driver's
    binding directory."""
    for card in profile.cards:
        drm = root / DRM_DIR / card.bdf / "drm"
        for entry in (f"card{card.drm[0]}", f"renderD{card.drm[1]}"):
            (drm / entry).mkdir(parents=True, exist_ok=True)
    placed = ((card.bdf, card.numa_node) for card in profile.cards)
    return write_pci_sysfs(root, AMD_VENDOR, DISPLAY_CLASS, placed, profile.numa)


@contextmanager
def simulated_amd_node(profile: AmdProfile) -> Iterator[tuple[SimulatedAmdSmi, Sysfs]]:
    with tempfile.TemporaryDirectory(prefix="gpustack-sim-amd-") as folder:
        yield SimulatedAmdSmi(profile), write_amd_sysfs(profile, Path(folder))


@contextmanager
def _host(profile: AmdProfile) -> Iterator[SimulatedHost]:
    with simulated_amd_node(profile) as (smi, sysfs):
        yield SimulatedHost(
            sysfs, injected={AMD: {"smi": smi}}, device_nodes=profile.device_nodes()
        )


SIMULATOR = Simulator(parse_amd_profile, _host)
