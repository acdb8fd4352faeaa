"""Simulated hosts of the manufacturers whose library is NVML-shaped (Iluvatar's IXML, T-Head's
HGML): a profile carries the recording the library answers from, in the shape the detector
tests replay (`nodeagent/simulate/recorded.py`).

```yaml
manufacturer: thead
description: 2 x PPU-ZW810E
numa: {"0": "0-47"}
recording:
  driver_version: "1.5.2"
  runtime_version: 1050
  cards:
    - {uuid: GPU-..., name: PPU-ZW810E, bus: "00000000:4A:00.0", memory: [103079215104, 0],
       minor: 0, capability: [1, 5], cores: 8192, ecc: 0, mig_mode: 0, numaNode: 0}
```

T-Head cards are reached through their device nodes, so that host also has `/dev/alixpu`,
`/dev/alixpu_ctl` and `/dev/alixpu_ppu<position>` carrying the card's minor number.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from chain import fields
from nodeagent.detect.sysfs import Sysfs, pci_address
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.thead import CONTROL_NODES, card_node
from nodeagent.simulate.amd import write_pci_sysfs
from nodeagent.simulate.recorded import RecordedNvmlLike

PCI_VENDORS = {"iluvatar": "0x1e3e", "thead": "0x1ded"}
ACCELERATOR_CLASS = "0x120000"


def recording_of(body: fields.Obj) -> dict[str, Any]:
    """The profile's recording, checked for what every simulated library needs."""
    recording = dict(fields.child(body, "recording", "$", required=True))
    fields.string(recording, "driver_version", "recording", required=True)
    fields.integer(recording, "runtime_version", "recording", required=True)
    for card, where in fields.items(recording, "cards", "recording", required=True):
        fields.string(card, "bus", where, required=True)
        fields.string(card, "uuid", where, required=True)
    return recording


def thead_nodes(cards: list[Mapping[str, Any]]) -> SimulatedNodes:
    minors = {path: number for number, path in enumerate(CONTROL_NODES)}
    for position, card in enumerate(cards):
        if isinstance(card.get("minor"), int):
            minors[card_node(position)] = card["minor"]
    return SimulatedNodes(minors)


@contextmanager
def simulated_nvmlike_node(
    manufacturer: str, body: fields.Obj
) -> Iterator[tuple[RecordedNvmlLike, Sysfs, SimulatedNodes | None]]:
    recording = recording_of(body)
    cards: list[Mapping[str, Any]] = recording["cards"]
    numa = {int(node): str(cpus) for node, cpus in fields.child(body, "numa", "$").items()}
    placed = [(pci_address(card["bus"]), int(card.get("numaNode", 0))) for card in cards]
    with tempfile.TemporaryDirectory(prefix=f"gpustack-sim-{manufacturer}-") as folder:
        vendor = PCI_VENDORS[manufacturer]
        sysfs = write_pci_sysfs(Path(folder), vendor, ACCELERATOR_CLASS, placed, numa or None)
        nodes = thead_nodes(cards) if manufacturer == "thead" else None
        yield RecordedNvmlLike(recording), sysfs, nodes
