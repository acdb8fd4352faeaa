"""A simulated Ascend host from a profile's DCMI recording (`nodeagent/simulate/recorded_host.py`);
the Ascend responder acts on the recording's container-share flag."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from chain import fields
from nodeagent.detect.sysfs import pci_address
from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.recorded_host import (
    Placed,
    Recorded,
    RecordedHost,
    RecordedSimulator,
    entries,
    entry_numa,
    plain_host,
)
from nodeagent.vendors.ascend.detect import ASCEND
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.ascend.recorded import RecordedDcmi


def ascend_cards(recording: dict[str, Any]) -> list[Placed]:
    if fields.integer(recording, "api", "recording", required=True) not in (1, 2):
        raise ValueError("recording.api: expected 1 (DCMI V1) or 2 (DCMI V2)")
    fields.string(recording, "driver_version", "recording", required=True)
    placed: list[Placed] = []
    for _, card, where in entries(recording, "cards"):
        fields.integer(card, "card", where, required=True)
        if card.get("devices") == "refused":
            continue
        for device, inner in fields.items(card, "devices", where, required=True):
            bus = fields.string(device, "bus", inner)
            if bus and bus != "refused":
                placed.append(Placed(len(placed), pci_address(bus), entry_numa(device, inner)))
    return placed


def _host(recorded: RecordedHost) -> SimulatedHost:
    share = cast(RecordedDcmi, recorded.library)
    return replace(
        plain_host(recorded, ASCEND),
        container_share=share,
        simulated_responders={ASCEND: Ascend(lambda: share)},
    )


SIMULATOR = RecordedSimulator(
    Recorded(ASCEND, "dcmi", RecordedDcmi, ascend_cards, runtime=True), _host
)
