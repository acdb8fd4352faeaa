"""Simulated hosts of the manufacturers whose library answers from a recording
(`nodeagent/simulate/recorded.py`): Iluvatar's IXML and T-Head's HGML (NVML-shaped), Ascend's
DCMI, Cambricon's CNDev, Hygon's ROCm SMI, MetaX's MXSML and MThreads' MTML. A profile carries
the recording in the shape the detector tests replay (`tests/unit/nodeagent/vendor/`), and the
host facts no library answers:

```yaml
manufacturer: thead
description: 2 x PPU-ZW810E
numa: {"0": "0-47"}             # NUMA node -> CPU list
runtimeVersion: "8.0.RC2"       # Ascend (CANN), Cambricon (Neuware), Hygon (DTK): the toolkit's
driverVersion: "6.3.16-V1.5.2"  # Hygon: the kernel module's (`/sys/module/hycu/version`)
recording:
  driver_version: "1.5.2"
  runtime_version: 1050
  cards:
    - {uuid: GPU-..., name: PPU-ZW810E, bus: "00000000:4A:00.0", memory: [103079215104, 0],
       minor: 0, capability: [1, 5], cores: 8192, ecc: 0, mig_mode: 0, numaNode: 0}
```

Each entry of the recording that names a bus id (a card, Ascend's devices, MetaX's `info`'s
`bus_id`, Hygon's `pci_id`) is a PCI device of the manufacturer's vendor id on the simulated bus,
on the NUMA node its optional `numaNode` names (0 by default). Hygon and MetaX cards also have
DRM nodes under their driver's binding directory, numbered by an optional `drm: [card, renderD]`
(by default `[1 + k, 128 + k]` for the k-th such card).

The device nodes the device plugin injects exist where the manufacturer's plugin injects them
itself: T-Head's `/dev/alixpu`, `/dev/alixpu_ctl` and `/dev/alixpu_ppu<position>` carrying the
card's `minor`; Cambricon's `/dev/cambricon_dev<i>` and `/dev/cambricon_ipcm<i>` per card by its
cnDev position, and `/dev/cambricon_ctl`; Hygon's `/dev/kfd`, `/dev/mkfd` and MetaX's
`/dev/mxcd`, `/dev/mxnd`, `/dev/mxgd`, each with the cards' `/dev/dri/card<N>` and
`/dev/dri/renderD<M>`. Iluvatar, Ascend and MThreads grants name their cards through variables
and need none.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chain import fields
from chain.manufacturers import manufacturers
from nodeagent.detect.sysfs import Sysfs, pci_address
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.simulate.recorded import (
    RecordedCndev,
    RecordedDcmi,
    RecordedMtml,
    RecordedMxsml,
    RecordedNvmlLike,
    RecordedRsmi,
)
from nodeagent.vendors.amd.simulate import write_pci_sysfs
from nodeagent.vendors.common.kfd_topology import KFD_NODES, render_properties
from nodeagent.vendors.hygon import detect as hygon
from nodeagent.vendors.hygon import grants as hygon_plugin
from nodeagent.vendors.hygon.rsmi import bus_id_of
from nodeagent.vendors.hygon.simulate import RegistryNodes, SimulatedDmi, simulated_dmi
from nodeagent.vendors.metax import detect as metax
from nodeagent.vendors.metax import grants as metax_plugin
from nodeagent.vendors.metax.mxsml import VIRTUALIZATION_MODE_VF
from nodeagent.vendors.thead import grants as thead_plugin

ACCELERATOR_CLASS = "0x120000"
HYGON_COMPUTE_UNITS = 120
"""A K100's compute units, for a simulated Hygon card whose recording names none."""
FIRST_DRM_CARD = 1
FIRST_RENDER_NODE = 128


@dataclass(frozen=True)
class Placed:
    """An entry of the recording on the simulated PCI bus."""

    position: int
    """Its place in the library's enumeration."""
    bus: str
    """Its address, in sysfs spelling."""
    numa_node: int = 0
    drm: tuple[int, int] | None = None
    """`(card<N>, renderD<M>)`, for the manufacturers whose cards have DRM nodes."""
    minor: int | None = None
    """The minor number of its device node, where the profile says one."""
    compute_units: int = 0
    """Its CU count as the driver's KFD topology gives it, where the profile says one."""


@dataclass(frozen=True)
class Recorded:
    """How one manufacturer's host is simulated."""

    keyword: str
    """The detector's keyword for its library."""
    library: Callable[[dict[str, Any]], object]
    placed: Callable[[dict[str, Any]], list[Placed]]
    """The recording's PCI devices; ValueError for a recording the library cannot answer from."""
    nodes: Callable[[Sequence[Placed]], SimulatedNodes] | None = None
    drm_dir: str = ""
    """Where the detector reads a card's DRM nodes (under `<dir>/<bus>/drm`)."""
    runtime: bool = False
    """The detector takes `runtime_version=` (the toolkit's version, `runtimeVersion:`)."""
    driver_version_file: str = ""
    """The sysfs file the detector reads the driver version from (`driverVersion:`)."""


@dataclass(frozen=True)
class RecordedHost:
    library: object
    sysfs: Sysfs
    keywords: Mapping[str, object] = field(default_factory=dict)
    """The detector's constructor keywords (`DetectorSetup.injected`)."""
    nodes: SimulatedNodes | None = None
    positions: Mapping[str, int] = field(default_factory=dict)
    """Each card's bus id -> its place in the library's enumeration."""
    dmi: SimulatedDmi | None = None
    """A Hygon host's Multi-Instance library, when its recording has a `dmi:` block."""


def _numa(entry: fields.Obj, where: str) -> int:
    return fields.integer(entry, "numaNode", where, minimum=-1) if "numaNode" in entry else 0


def _drm(entry: fields.Obj, where: str) -> tuple[int, int] | None:
    drm = fields.integers(entry, "drm", where)
    if drm is None:
        return None
    if len(drm) != 2:
        raise ValueError(f"{where}.drm: expected [card, renderD]")
    return drm[0], drm[1]


def _entries(recording: fields.Obj, key: str) -> Iterator[tuple[int, fields.Obj, str]]:
    for position, (entry, where) in enumerate(fields.items(recording, key, "recording", True)):
        yield position, entry, where


def _numbered_drm(placed: list[Placed]) -> list[Placed]:
    """The cards with DRM nodes, numbered `[1 + k, 128 + k]` where the profile says nothing."""
    return [
        replace(card, drm=card.drm or (FIRST_DRM_CARD + number, FIRST_RENDER_NODE + number))
        for number, card in enumerate(placed)
    ]


def nvmlike_cards(recording: dict[str, Any]) -> list[Placed]:
    fields.string(recording, "driver_version", "recording", required=True)
    fields.integer(recording, "runtime_version", "recording", required=True)
    placed: list[Placed] = []
    for position, card, where in _entries(recording, "cards"):
        bus = fields.string(card, "bus", where, required=True)
        fields.string(card, "uuid", where, required=True)
        minor = card.get("minor")
        number = minor if isinstance(minor, int) else None
        placed.append(Placed(position, pci_address(bus), _numa(card, where), minor=number))
    return placed


def ascend_cards(recording: dict[str, Any]) -> list[Placed]:
    if fields.integer(recording, "api", "recording", required=True) not in (1, 2):
        raise ValueError("recording.api: expected 1 (DCMI V1) or 2 (DCMI V2)")
    fields.string(recording, "driver_version", "recording", required=True)
    placed: list[Placed] = []
    for _, card, where in _entries(recording, "cards"):
        fields.integer(card, "card", where, required=True)
        if card.get("devices") == "refused":
            continue
        for device, inner in fields.items(card, "devices", where, required=True):
            bus = fields.string(device, "bus", inner)
            if bus and bus != "refused":
                placed.append(Placed(len(placed), pci_address(bus), _numa(device, inner)))
    return placed


def cambricon_cards(recording: dict[str, Any]) -> list[Placed]:
    placed: list[Placed] = []
    for position, card, where in _entries(recording, "cards"):
        fields.integer(card, "handle", where, required=True)
        bus = fields.string(card, "bus", where, required=True)
        placed.append(Placed(position, pci_address(bus), _numa(card, where)))
    return placed


def hygon_cards(recording: dict[str, Any]) -> list[Placed]:
    """The Hygon devices: one whose vendor id names another manufacturer (an AMD card ROCm SMI
    also lists) is not Hygon's to place."""
    vendor = int(manufacturers({})["hygon"].pci_vendor, 16)
    placed: list[Placed] = []
    for position, device, where in _entries(recording, "devices"):
        address = bus_id_of(fields.integer(device, "pci_id", where, required=True))
        if device.get("vendor_id", vendor) in (vendor, "refused"):
            units = fields.integer(device, "computeUnits", where)
            found = Placed(position, address, _numa(device, where), _drm(device, where))
            placed.append(replace(found, compute_units=units))
    return _numbered_drm(placed)


def metax_cards(recording: dict[str, Any]) -> list[Placed]:
    """The devices MXSML describes; a virtual function has no DRM nodes of its own."""
    for key in ("driver_version", "maca_version"):
        fields.string(recording, key, "recording", required=True)
    cards: list[Placed] = []
    functions: list[Placed] = []
    for position, device, where in _entries(recording, "devices"):
        if device.get("info") == "refused":
            continue
        info = fields.child(device, "info", where, required=True)
        bus = pci_address(fields.string(info, "bus_id", f"{where}.info", required=True))
        own = Placed(position, bus, _numa(device, where), _drm(device, where))
        virtual = fields.integer(info, "mode", f"{where}.info") == VIRTUALIZATION_MODE_VF
        (functions if virtual else cards).append(own)
    return _numbered_drm(cards) + functions


def mthreads_cards(recording: dict[str, Any]) -> list[Placed]:
    fields.string(recording, "driver_version", "recording", required=True)
    placed: list[Placed] = []
    for position, device, where in _entries(recording, "devices"):
        bus = fields.string(device, "bus", where)
        if bus and bus != "refused":
            placed.append(Placed(position, pci_address(bus), _numa(device, where)))
    return placed


def _control(paths: Sequence[str]) -> dict[str, int]:
    return {path: number for number, path in enumerate(paths)}


def thead_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    minors = _control(thead_plugin.CONTROL_NODES)
    for card in cards:
        if card.minor is not None:
            minors[thead_plugin.card_node(card.position)] = card.minor
    return SimulatedNodes(minors)


def cambricon_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    minors = {"/dev/cambricon_ctl": 0}
    for card in cards:
        minors[f"/dev/cambricon_dev{card.position}"] = card.position
        minors[f"/dev/cambricon_ipcm{card.position}"] = card.position
    return SimulatedNodes(minors)


def drm_nodes(control: Sequence[str]) -> Callable[[Sequence[Placed]], SimulatedNodes]:
    """The control nodes, and each card's DRM nodes carrying their numbers."""

    def nodes(cards: Sequence[Placed]) -> SimulatedNodes:
        minors = _control(control)
        for card in cards:
            if card.drm is not None:
                minors[f"/dev/dri/card{card.drm[0]}"] = card.drm[0]
                minors[f"/dev/dri/renderD{card.drm[1]}"] = card.drm[1]
        return SimulatedNodes(minors)

    return nodes


def hygon_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    """Hygon's control and DRM nodes, and each card's KFD topology node (the CU count its
    slices are cut from: `computeUnits` of the recorded device, as a K100's 120 by default)."""
    found = drm_nodes(hygon_plugin.CONTROL_NODES)(cards)
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


RECORDED: Mapping[str, Recorded] = {
    "ascend": Recorded("dcmi", RecordedDcmi, ascend_cards, runtime=True),
    "cambricon": Recorded("cndev", RecordedCndev, cambricon_cards, cambricon_nodes, runtime=True),
    "hygon": Recorded(
        "rsmi",
        RecordedRsmi,
        hygon_cards,
        hygon_nodes,
        drm_dir=hygon.DRIVER_DIRS[0],
        runtime=True,
        driver_version_file=hygon.DRIVER_VERSION_FILES[0],
    ),
    "iluvatar": Recorded("interface", RecordedNvmlLike, nvmlike_cards),
    "metax": Recorded(
        "mxsml",
        RecordedMxsml,
        metax_cards,
        drm_nodes(metax_plugin.CONTROL_NODES),
        drm_dir=metax.DRIVER_DIRS[1],
    ),
    "mthreads": Recorded("mtml", RecordedMtml, mthreads_cards),
    "thead": Recorded("interface", RecordedNvmlLike, nvmlike_cards, thead_nodes),
}
"""The manufacturers simulated from a recording."""


def recording_of(manufacturer: str, body: fields.Obj) -> tuple[dict[str, Any], list[Placed]]:
    """The profile's recording, checked for what the manufacturer's library and host need, and
    the PCI devices it places on the bus."""
    recording = dict(fields.child(body, "recording", "$", required=True))
    placed = RECORDED[manufacturer].placed(recording)
    for key in ("runtimeVersion", "driverVersion"):
        fields.string(body, key, "$")
    return recording, placed


@contextmanager
def simulated_recorded_node(manufacturer: str, body: fields.Obj) -> Iterator[RecordedHost]:
    kind = RECORDED[manufacturer]
    recording, placed = recording_of(manufacturer, body)
    numa = {int(node): str(cpus) for node, cpus in fields.child(body, "numa", "$").items()}
    library = kind.library(recording)
    keywords: dict[str, object] = {kind.keyword: library}
    if kind.runtime:
        runtime = fields.string(body, "runtimeVersion", "$")
        keywords["runtime_version"] = lambda: runtime
    with tempfile.TemporaryDirectory(prefix=f"gpustack-sim-{manufacturer}-") as folder:
        root = Path(folder)
        for card in placed:
            if kind.drm_dir and card.drm is not None:
                drm = root / kind.drm_dir / card.bus / "drm"
                for node in (f"card{card.drm[0]}", f"renderD{card.drm[1]}"):
                    (drm / node).mkdir(parents=True)
        driver = fields.string(body, "driverVersion", "$")
        if kind.driver_version_file and driver:
            (root / kind.driver_version_file).parent.mkdir(parents=True, exist_ok=True)
            (root / kind.driver_version_file).write_text(driver + "\n", encoding="ascii")
        vendor = "0x" + manufacturers({})[manufacturer].pci_vendor
        on_bus = [(card.bus, card.numa_node) for card in placed]
        sysfs = write_pci_sysfs(root, vendor, ACCELERATOR_CLASS, on_bus, numa or None)
        nodes = kind.nodes(placed) if kind.nodes else None
        positions = {card.bus: card.position for card in placed}
        dmi = None
        if manufacturer == "hygon":  # never the host's own Multi-Instance library
            dmi, nodes = _multi_instance(recording, placed, root, nodes)
            keywords["dmi_opener"] = lambda: dmi
        yield RecordedHost(library, sysfs, keywords, nodes, positions, dmi)


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
