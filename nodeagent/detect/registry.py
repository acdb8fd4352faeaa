"""Which manufacturers the agent detects, and how each detector is built.

`--manufacturer` names the manufacturers an agent serves (`all` = every one in the table). Only
those with a detector here are detected; the others are named in the log and otherwise behave
like a manufacturer with no card. The requested list still counts in full for the first-detection
hold-back, so `all` never holds back even while only NVIDIA has a detector.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from chain.manufacturers import ManufacturerTable
from chain.settings import StartupEnv
from nodeagent.detect.base import Detector
from nodeagent.detect.held import ManufacturerDetection
from nodeagent.detect.nvidia import NVIDIA, NvidiaDetector
from nodeagent.detect.nvml import Nvml
from nodeagent.detect.sysfs import Sysfs

log = logging.getLogger(__name__)

ALL = "all"


@dataclass(frozen=True)
class DetectorSetup:
    """What every detector may need; `nvml` replaces the real library (simulation)."""

    table: ManufacturerTable
    env: StartupEnv
    sysfs: Sysfs
    nvml: Nvml | None = None


def _nvidia(setup: DetectorSetup) -> Detector:
    return NvidiaDetector(
        nvml=setup.nvml,
        sysfs=setup.sysfs,
        maker=setup.table[NVIDIA],
        group_id_with_memory=setup.env.devices_group_id_with_memory,
    )


DETECTORS: Mapping[str, Callable[[DetectorSetup], Detector]] = {NVIDIA: _nvidia}


def requested_manufacturers(flag: str, table: ManufacturerTable) -> tuple[str, ...]:
    """The manufacturers a `--manufacturer` value names (comma separated, or `all`)."""
    names = [part.strip().lower() for part in flag.split(",") if part.strip()]
    if not names or ALL in names:
        return tuple(table)
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"--manufacturer: unknown {', '.join(unknown)}; known: {', '.join(table)}")
    return tuple(dict.fromkeys(names))


def detections(names: tuple[str, ...], setup: DetectorSetup) -> list[ManufacturerDetection]:
    """One held detection per requested manufacturer that has a detector."""
    missing = [name for name in names if name not in DETECTORS]
    if missing:
        log.info("no detector for %s; they report no cards", ", ".join(missing))
    return [
        ManufacturerDetection(
            DETECTORS[name](setup),
            setup.sysfs,
            setup.table[name].pci_vendor,
            setup.env.pci_class_prefixes,
        )
        for name in names
        if name in DETECTORS
    ]
