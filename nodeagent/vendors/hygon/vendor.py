"""Hygon's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from typing import cast

from nodeagent.detect.base import library_detector
from nodeagent.plugin.mig import MigNvml
from nodeagent.vendors.hygon.detect import HYGON, HygonDetector
from nodeagent.vendors.hygon.dmi import open_dmi
from nodeagent.vendors.hygon.driver import REGISTRY, DmiMig, HygonNaming
from nodeagent.vendors.hygon.grants import Hygon
from nodeagent.vendors.hygon.simulate import SIMULATOR
from nodeagent.vendors.interface import AgentPod, Vendor


def _partition_library() -> MigNvml | None:
    """DMI's partition calls (None on a host without the Multi-Instance driver)."""
    dmi = open_dmi()
    return cast(MigNvml, DmiMig(dmi)) if dmi is not None else None


VENDOR = Vendor(
    name=HYGON,
    detector=library_detector(HYGON, HygonDetector),
    responder=Hygon(),
    partition_naming=HygonNaming(),
    simulator=SIMULATOR,
    partition_library=_partition_library,
    # DMI writes and removes the partitions' registry files there (`driver.py`).
    agent=AgentPod(
        mounts=(("dmi-mig-config", REGISTRY, False, "DirectoryOrCreate"),),
        note=f"""\
#   Hygon's agent also mounts {REGISTRY} writable: its partitions' registry files
#   live there.
""",
    ),
)
