"""A simulated MThreads host from a profile's MTML recording
(`nodeagent/simulate/recorded_host.py`)."""

from __future__ import annotations

from typing import Any

from chain import fields
from nodeagent.detect.sysfs import pci_address
from nodeagent.simulate.recorded_host import (
    Placed,
    Recorded,
    RecordedSimulator,
    entries,
    entry_numa,
)
from nodeagent.vendors.mthreads.detect import MTHREADS
from nodeagent.vendors.mthreads.recorded import RecordedMtml


def mthreads_cards(recording: dict[str, Any]) -> list[Placed]:
    fields.string(recording, "driver_version", "recording", required=True)
    placed: list[Placed] = []
    for position, device, where in entries(recording, "devices"):
        bus = fields.string(device, "bus", where)
        if bus and bus != "refused":
            placed.append(Placed(position, pci_address(bus), entry_numa(device, where)))
    return placed


SIMULATOR = RecordedSimulator(Recorded(MTHREADS, "mtml", RecordedMtml, mthreads_cards))
