"""T-Head's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

import os

from nodeagent.detect.base import library_detector
from nodeagent.plugin.mig import MigNvml
from nodeagent.vendors.interface import Vendor
from nodeagent.vendors.thead.detect import THEAD, TheadDetector
from nodeagent.vendors.thead.driver import TheadNaming, open_hgml_mig
from nodeagent.vendors.thead.grants import Thead
from nodeagent.vendors.thead.simulate import SIMULATOR


def _partition_library() -> MigNvml | None:
    """HGML, looked for where the detector looks (`PPU_HOME` from the agent's environment)."""
    return open_hgml_mig(os.environ)


VENDOR = Vendor(
    name=THEAD,
    detector=library_detector(THEAD, TheadDetector),
    responder=Thead(),
    partition_naming=TheadNaming(),
    simulator=SIMULATOR,
    partition_library=_partition_library,
)
