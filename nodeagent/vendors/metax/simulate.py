"""A simulated MetaX host from a profile's MXSML recording (`nodeagent/simulate/recorded_host.py`);
its `sgpu` subdevices are made by a simulated driver."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from chain import fields
from nodeagent.detect.sysfs import pci_address
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
    plain_host,
)
from nodeagent.vendors.metax.detect import DRIVER_DIRS, METAX
from nodeagent.vendors.metax.grants import CONTROL_NODES, Metax
from nodeagent.vendors.metax.mxsml import VIRTUALIZATION_MODE_VF
from nodeagent.vendors.metax.recorded import RecordedMxsml
from nodeagent.vendors.metax.sgpu import SimulatedSgpu


def metax_cards(recording: dict[str, Any]) -> list[Placed]:
    """The devices MXSML describes; a virtual function has no DRM nodes of its own."""
    for key in ("driver_version", "maca_version"):
        fields.string(recording, key, "recording", required=True)
    cards: list[Placed] = []
    functions: list[Placed] = []
    for position, device, where in entries(recording, "devices"):
        if device.get("info") == "refused":
            continue
        info = fields.child(device, "info", where, required=True)
        bus = pci_address(fields.string(info, "bus_id", f"{where}.info", required=True))
        own = Placed(position, bus, entry_numa(device, where), entry_drm(device, where))
        virtual = fields.integer(info, "mode", f"{where}.info") == VIRTUALIZATION_MODE_VF
        (functions if virtual else cards).append(own)
    return numbered_drm(cards) + functions


def _host(recorded: RecordedHost) -> SimulatedHost:
    sgpu = SimulatedSgpu()
    return replace(
        plain_host(recorded, METAX), sgpu=sgpu, simulated_responders={METAX: Metax(sgpu)}
    )


SIMULATOR = RecordedSimulator(
    Recorded(
        METAX,
        "mxsml",
        RecordedMxsml,
        metax_cards,
        drm_nodes(CONTROL_NODES),
        drm_dir=DRIVER_DIRS[1],
    ),
    _host,
)
