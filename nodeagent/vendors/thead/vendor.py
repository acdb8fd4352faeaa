"""T-Head's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.interface import Vendor
from nodeagent.vendors.thead.detect import THEAD, TheadDetector
from nodeagent.vendors.thead.driver import TheadNaming
from nodeagent.vendors.thead.grants import Thead
from nodeagent.vendors.thead.simulate import SIMULATOR

VENDOR = Vendor(
    name=THEAD,
    detector=library_detector(THEAD, TheadDetector),
    responder=Thead(),
    partition_naming=TheadNaming(),
    simulator=SIMULATOR,
)
