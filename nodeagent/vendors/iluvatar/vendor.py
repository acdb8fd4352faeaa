"""Iluvatar's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.vendors.iluvatar.detect import ILUVATAR, IluvatarDetector
from nodeagent.vendors.iluvatar.grants import Iluvatar
from nodeagent.vendors.iluvatar.simulate import SIMULATOR
from nodeagent.vendors.interface import Vendor

VENDOR = Vendor(
    name=ILUVATAR,
    detector=library_detector(ILUVATAR, IluvatarDetector),
    responder=Iluvatar(),
    simulator=SIMULATOR,
)
