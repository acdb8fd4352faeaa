"""AMD's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.amd.detect import AMD, AmdDetector
from nodeagent.vendors.amd.grants import Amd
from nodeagent.vendors.amd.preflight import HOST_READER
from nodeagent.vendors.amd.simulate import SIMULATOR
from nodeagent.vendors.interface import Vendor

VENDOR = Vendor(
    name=AMD,
    detector=library_detector(AMD, AmdDetector),
    responder=Amd(),
    simulator=SIMULATOR,
    host_reader=HOST_READER,
)
