"""A simulated Cambricon host from a profile's CNDev recording
(`nodeagent/simulate/recorded_host.py`); its sMLU instances are made by a simulated driver."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from chain import fields
from nodeagent.detect.sysfs import pci_address
from nodeagent.plugin.grants import SimulatedNodes
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
from nodeagent.vendors.cambricon.detect import CAMBRICON
from nodeagent.vendors.cambricon.grants import Cambricon
from nodeagent.vendors.cambricon.recorded import RecordedCndev
from nodeagent.vendors.cambricon.smlu import SimulatedSmlu


def cambricon_cards(recording: dict[str, Any]) -> list[Placed]:
    placed: list[Placed] = []
    for position, card, where in entries(recording, "cards"):
        fields.integer(card, "handle", where, required=True)
        bus = fields.string(card, "bus", where, required=True)
        placed.append(Placed(position, pci_address(bus), entry_numa(card, where)))
    return placed


def cambricon_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    minors = {"/dev/cambricon_ctl": 0}
    for card in cards:
        minors[f"/dev/cambricon_dev{card.position}"] = card.position
        minors[f"/dev/cambricon_ipcm{card.position}"] = card.position
    return SimulatedNodes(minors)


def _host(recorded: RecordedHost) -> SimulatedHost:
    smlu = SimulatedSmlu(recorded.positions)
    return replace(
        plain_host(recorded, CAMBRICON),
        smlu=smlu,
        simulated_responders={CAMBRICON: Cambricon(lambda: smlu)},
    )


SIMULATOR = RecordedSimulator(
    Recorded(CAMBRICON, "cndev", RecordedCndev, cambricon_cards, cambricon_nodes, runtime=True),
    _host,
)
