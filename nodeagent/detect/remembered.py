"""One manufacturer's detection with its memory: the PCI pre-check and the remembered result.

Two outcomes look alike and must not be confused:
- a pass that **ran** and found nothing: the cards are gone (pulled, driver unloaded). The
  remembered result is dropped, so a pulled card is never resurrected from memory;
- a pass that **failed** (the detector raised): nothing is known. The last result is reported
  again, marked unmeasured, so a flaky driver call does not take every card off the node and
  every Pod's ledger row with it. The loop re-detects soon after an unmeasured pass.

Results are frozen dataclasses, so "report the remembered result" hands out the same immutable
value; no copy is needed to keep a caller from changing what we remember.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from chain.devices import DevicesGroup
from nodeagent.detect.base import CardKey, CardMetrics, Detector, card_keys
from nodeagent.detect.sysfs import Sysfs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DetectionPass:
    """What one detection pass of one manufacturer produced."""

    manufacturer: str
    groups: tuple[DevicesGroup, ...] = ()
    measured: bool = True
    """False when the pass failed and `groups` is the last good result (or nothing)."""
    error: str = ""

    @property
    def detected(self) -> bool:
        """Some card of this manufacturer is on the node."""
        return any(group.accelerators for group in self.groups)

    def card_keys(self) -> frozenset[CardKey]:
        return card_keys(self.groups)


class ManufacturerDetection:
    """A detector behind the PCI pre-check, holding its last successful result."""

    def __init__(
        self,
        detector: Detector,
        sysfs: Sysfs,
        pci_vendor: str,
        class_prefixes: Sequence[str],
    ) -> None:
        self.detector = detector
        self.sysfs = sysfs
        self.pci_vendor = pci_vendor
        self.class_prefixes = tuple(class_prefixes)
        self._remembered: tuple[DevicesGroup, ...] = ()

    @property
    def manufacturer(self) -> str:
        return self.detector.manufacturer

    def on_bus(self, no_pci_check: bool) -> bool:
        """False when the pre-check runs and finds none of this manufacturer's devices."""
        if no_pci_check or self.sysfs.is_wsl():
            return True
        return self.sysfs.has_device(self.pci_vendor, self.class_prefixes)

    def why_none(self, no_pci_check: bool = False) -> str:
        """Why the last pass found no card, for a person reading the agent's log."""
        if not self.on_bus(no_pci_check):
            prefixes = "/".join(self.class_prefixes)
            return (
                f"no PCI device of vendor {self.pci_vendor} (class {prefixes}) under /sys/bus/pci;"
                " is this a node with the manufacturer's cards?"
            )
        problem = getattr(self.detector, "problem", None)
        return str(problem) if problem else "its library answered, and listed no card"

    def detect(self, no_pci_check: bool = False) -> DetectionPass:
        try:
            groups = self.detector.detect() if self.on_bus(no_pci_check) else ()
        except Exception as error:  # the panic guard: any failure is "could not measure"
            log.warning(
                "%s: detection failed, keeping the last result: %s", self.manufacturer, error
            )
            return DetectionPass(
                self.manufacturer, self._remembered, measured=False, error=str(error)
            )
        self._remembered = groups
        return DetectionPass(self.manufacturer, groups)

    def monitor(self, no_pci_check: bool = False) -> tuple[CardMetrics, ...] | None:
        """Current card metrics, or None when the monitor could not measure."""
        try:
            return self.detector.monitor() if self.on_bus(no_pci_check) else ()
        except Exception as error:
            log.warning("%s: monitoring failed: %s", self.manufacturer, error)
            return None
