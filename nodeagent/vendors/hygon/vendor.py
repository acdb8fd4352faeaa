"""Hygon's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.hygon.detect import HYGON, HygonDetector
from nodeagent.vendors.hygon.driver import HygonNaming
from nodeagent.vendors.hygon.grants import Hygon
from nodeagent.vendors.hygon.simulate import SIMULATOR
from nodeagent.vendors.interface import Vendor

VENDOR = Vendor(
    name=HYGON,
    detector=library_detector(HYGON, HygonDetector),
    responder=Hygon(),
    partition_naming=HygonNaming(),
    simulator=SIMULATOR,
)
