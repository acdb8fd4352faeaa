"""Which manufacturers the agent detects, and how each detector is built.

`--manufacturer` names the manufacturers an agent serves (`all` = every one in the table). Every
manufacturer of the table has a detector; one without its driver on the node detects no card.
A manufacturer added to the table without a detector is named in the log and otherwise behaves
like one with no card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from chain.manufacturers import ManufacturerTable
from nodeagent.detect.base import Detector, DetectorSetup
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.vendors.registry import ByManufacturer

__all__ = ["DETECTORS", "DetectorSetup", "detections", "requested_manufacturers"]

log = logging.getLogger(__name__)

ALL = "all"

DETECTORS: Mapping[str, Callable[[DetectorSetup], Detector]] = ByManufacturer(
    lambda vendor: vendor.detector
)
"""Each registered manufacturer's detector builder (nodeagent/vendors/registry.py)."""


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
