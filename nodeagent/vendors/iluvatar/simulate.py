"""A simulated Iluvatar host from a profile's IXML recording
(`nodeagent/simulate/recorded_host.py`)."""

from __future__ import annotations

from nodeagent.simulate.recorded import RecordedNvmlLike
from nodeagent.simulate.recorded_host import Recorded, RecordedSimulator, nvmlike_cards
from nodeagent.vendors.iluvatar.detect import ILUVATAR

SIMULATOR = RecordedSimulator(Recorded(ILUVATAR, "interface", RecordedNvmlLike, nvmlike_cards))
