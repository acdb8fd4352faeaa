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
from nodeagent.simulate.base import HostOpener, SimulatedHost
from nodeagent.simulate.sysfs import write_pci_sysfs

ACCELERATOR_CLASS = "0x120000"
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

    manufacturer: str
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
    recording: Mapping[str, Any] = field(default_factory=dict)
    placed: Sequence[Placed] = ()
    root: Path = Path("/")
    """The simulated host's root, where a simulator may write more of the host."""


def entry_numa(entry: fields.Obj, where: str) -> int:
    return fields.integer(entry, "numaNode", where, minimum=-1) if "numaNode" in entry else 0


def entry_drm(entry: fields.Obj, where: str) -> tuple[int, int] | None:
    drm = fields.integers(entry, "drm", where)
    if drm is None:
        return None
    if len(drm) != 2:
        raise ValueError(f"{where}.drm: expected [card, renderD]")
    return drm[0], drm[1]


def entries(recording: fields.Obj, key: str) -> Iterator[tuple[int, fields.Obj, str]]:
    for position, (entry, where) in enumerate(fields.items(recording, key, "recording", True)):
        yield position, entry, where


def numbered_drm(placed: list[Placed]) -> list[Placed]:
    """The cards with DRM nodes, numbered `[1 + k, 128 + k]` where the profile says nothing."""
    return [
        replace(card, drm=card.drm or (FIRST_DRM_CARD + number, FIRST_RENDER_NODE + number))
        for number, card in enumerate(placed)
    ]


def nvmlike_cards(recording: dict[str, Any]) -> list[Placed]:
    fields.string(recording, "driver_version", "recording", required=True)
    fields.integer(recording, "runtime_version", "recording", required=True)
    placed: list[Placed] = []
    for position, card, where in entries(recording, "cards"):
        bus = fields.string(card, "bus", where, required=True)
        fields.string(card, "uuid", where, required=True)
        minor = card.get("minor")
        number = minor if isinstance(minor, int) else None
        placed.append(Placed(position, pci_address(bus), entry_numa(card, where), minor=number))
    return placed


def control_minors(paths: Sequence[str]) -> dict[str, int]:
    return {path: number for number, path in enumerate(paths)}


def drm_nodes(control: Sequence[str]) -> Callable[[Sequence[Placed]], SimulatedNodes]:
    """The control nodes, and each card's DRM nodes carrying their numbers."""

    def nodes(cards: Sequence[Placed]) -> SimulatedNodes:
        minors = control_minors(control)
        for card in cards:
            if card.drm is not None:
                minors[f"/dev/dri/card{card.drm[0]}"] = card.drm[0]
                minors[f"/dev/dri/renderD{card.drm[1]}"] = card.drm[1]
        return SimulatedNodes(minors)

    return nodes


def checked_recording(kind: Recorded, body: fields.Obj) -> tuple[dict[str, Any], list[Placed]]:
    """The profile's recording, checked for what the manufacturer's library and host need, and
    the PCI devices it places on the bus."""
    recording = dict(fields.child(body, "recording", "$", required=True))
    placed = kind.placed(recording)
    for key in ("runtimeVersion", "driverVersion"):
        fields.string(body, key, "$")
    return recording, placed


def recording_of(manufacturer: str, body: fields.Obj) -> tuple[dict[str, Any], list[Placed]]:
    """`checked_recording` for the manufacturer's registered recorded simulator."""
    # Imported here: the registry imports every manufacturer's package, whose simulator is
    # built on this module.
    from nodeagent.vendors.registry import SIMULATORS

    simulator = SIMULATORS.get(manufacturer)
    if not isinstance(simulator, RecordedSimulator):
        raise ValueError(f"{manufacturer!r} hardware is not simulated from a recording")
    return checked_recording(simulator.kind, body)


@contextmanager
def simulated_recorded_node(kind: Recorded, body: fields.Obj) -> Iterator[RecordedHost]:
    manufacturer = kind.manufacturer
    recording, placed = checked_recording(kind, body)
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
        yield RecordedHost(library, sysfs, keywords, nodes, positions, recording, placed, root)


def plain_host(recorded: RecordedHost, manufacturer: str) -> SimulatedHost:
    """The simulated host of a recorded manufacturer with nothing more than its library."""
    return SimulatedHost(
        recorded.sysfs, injected={manufacturer: recorded.keywords}, device_nodes=recorded.nodes
    )


@dataclass(frozen=True)
class RecordedSimulator:
    """A manufacturer simulated from a recording (`Vendor.simulator`): `finish` turns the
    recorded host into the agent's, adding what its responder or partitions act on."""

    kind: Recorded
    finish: Callable[[RecordedHost], SimulatedHost] | None = None

    def open(self, name: str, body: fields.Obj) -> HostOpener:
        checked_recording(self.kind, body)
        return lambda: self._host(body)

    @contextmanager
    def _host(self, body: fields.Obj) -> Iterator[SimulatedHost]:
        with simulated_recorded_node(self.kind, body) as recorded:
            if self.finish is None:
                yield plain_host(recorded, self.kind.manufacturer)
            else:
                yield self.finish(recorded)
