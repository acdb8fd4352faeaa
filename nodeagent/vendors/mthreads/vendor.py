"""MThreads' registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.interface import Vendor
from nodeagent.vendors.mthreads.detect import MTHREADS, MthreadsDetector
from nodeagent.vendors.mthreads.grants import MThreads
from nodeagent.vendors.mthreads.simulate import SIMULATOR

VENDOR = Vendor(
    name=MTHREADS,
    detector=library_detector(MTHREADS, MthreadsDetector),
    responder=MThreads(),
    simulator=SIMULATOR,
)
