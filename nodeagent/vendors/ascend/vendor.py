"""Ascend's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.ascend.detect import ASCEND, AscendDetector
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.ascend.preflight import HOST_READER, dry_responder
from nodeagent.vendors.ascend.simulate import SIMULATOR
from nodeagent.vendors.interface import Vendor

VENDOR = Vendor(
    name=ASCEND,
    detector=library_detector(ASCEND, AscendDetector),
    responder=Ascend(),
    simulator=SIMULATOR,
    host_reader=HOST_READER,
    dry_responder=dry_responder,
)
