"""The detect loop: detect, publish, report, then monitor until something calls for a re-detect.

Detection is expensive (driver enumeration, MIG profile queries) and its result is written to
the API; monitoring is cheap. So each round detects once, publishes the set of manufacturers
found (the allocators start and stop on it), reports the NodeFeature and Devices, then monitors
every period and only re-detects when:
- some manufacturer could not be measured by the detection (try again next period);
- the cards the monitor sees, with their health, differ from what was detected (ignoring a
  manufacturer the monitor could not measure);
- reporting failed (the next monitor round forces a re-detect, and with it a new report);
- `redetect_every` monitor rounds passed (about 10 minutes at the 15 s default).

A card switched into or out of MIG mode is not seen by the monitor; it takes a restart.

First-detection hold-back: an agent started for exactly one manufacturer (`--manufacturer
nvidia`) publishes nothing until that manufacturer's first detection finds cards, because its
driver may still be loading and an empty first report would tell the cluster the node has no
cards. `--no-fast-failed` turns this off and publishes the empty result.

Time is injected (`sleep`, `stop`) so tests drive rounds without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chain.devices import DevicesGroup
from nodeagent.detect.base import CardKey
from nodeagent.detect.remembered import DetectionPass, ManufacturerDetection
from nodeagent.metrics import DETECTION_PASSES

log = logging.getLogger(__name__)

MONITOR_PERIOD_SECONDS = 15.0
REDETECT_EVERY_MONITOR_ROUNDS = 40


@dataclass(frozen=True)
class DetectionRound:
    """One detection pass over every manufacturer the agent serves."""

    passes: tuple[DetectionPass, ...]

    @property
    def groups(self) -> tuple[DevicesGroup, ...]:
        return tuple(group for entry in self.passes for group in entry.groups)

    @property
    def detected(self) -> frozenset[str]:
        """Manufacturers with at least one card (measured now or held from before)."""
        return frozenset(entry.manufacturer for entry in self.passes if entry.detected)

    @property
    def unmeasured(self) -> frozenset[str]:
        return frozenset(entry.manufacturer for entry in self.passes if not entry.measured)

    @property
    def measured(self) -> frozenset[str]:
        """Manufacturers whose pass ran (with or without cards)."""
        return frozenset(entry.manufacturer for entry in self.passes if entry.measured)

    def card_keys(self) -> frozenset[CardKey]:
        return frozenset(key for entry in self.passes for key in entry.card_keys())


class HeldBack(Exception):
    """The one expected manufacturer has not been detected yet."""


class DetectLoop:
    def __init__(
        self,
        detections: Sequence[ManufacturerDetection],
        expected: Sequence[str],
        publish: Callable[[frozenset[str]], None],
        report: Callable[[DetectionRound], None],
        *,
        no_fast_failed: bool = False,
        no_pci_check: bool = False,
        period: float = MONITOR_PERIOD_SECONDS,
        redetect_every: int = REDETECT_EVERY_MONITOR_ROUNDS,
        sleep: Callable[[float], None] = time.sleep,
        report_due: Callable[[], bool] = lambda: False,
        held_back: Callable[[str], None] = lambda message: None,
    ) -> None:
        """`expected` are the manufacturers the agent was started for (`--manufacturer`, with
        `all` spelled out), whether or not each has a detector."""
        self.detections = tuple(detections)
        self.expected = tuple(expected)
        self.publish = publish
        self.report = report
        self.no_pci_check = no_pci_check
        self.period = period
        self.redetect_every = redetect_every
        self.sleep = sleep
        # Something outside detection wants a fresh report (the Node's labels changed).
        self.report_due = report_due
        # Told the hold-back's message each round it holds back (an Event on the Node).
        self.held_back = held_back
        self.holding_back = not no_fast_failed and len(self.expected) == 1

    def detect(self) -> DetectionRound:
        """One detection round; HeldBack while the hold-back is on and nothing was found."""
        current = DetectionRound(
            tuple(entry.detect(self.no_pci_check) for entry in self.detections)
        )
        for found in current.passes:
            result = "measured" if found.measured else "failed"
            DETECTION_PASSES.labels(found.manufacturer, result).inc()
        if self.holding_back:
            if not current.detected:
                maker = self.expected[0]
                entry = next((e for e in self.detections if e.manufacturer == maker), None)
                cause = entry.why_none(self.no_pci_check) if entry else "no detector for it"
                raise HeldBack(f"manufacturer {maker} is expected but not detected: {cause}")
            self.holding_back = False
        return current

    def monitor_differs(self, detected: frozenset[CardKey]) -> bool:
        """True when the monitor sees other cards (or other health) than the detection did."""
        seen: set[CardKey] = set()
        unmeasured: set[str] = set()
        for entry in self.detections:
            metrics = entry.monitor(self.no_pci_check)
            if metrics is None:
                unmeasured.add(entry.manufacturer)
            else:
                seen.update(card.key for card in metrics)
        expected = {key for key in detected if key.manufacturer not in unmeasured}
        return expected != seen

    def run_round(self, stop: Callable[[], bool]) -> None:
        """Detect, publish, report, then monitor until a re-detect is due (or `stop()`)."""
        try:
            current = self.detect()
        except HeldBack as held:
            log.error("%s", held)
            try:
                self.held_back(str(held))
            except Exception as error:  # an Event must never stop detection
                log.warning("recording the hold-back failed: %s", error)
            self.sleep(self.period)
            return
        self.publish(current.detected)
        detected: frozenset[CardKey] | None = current.card_keys()
        try:
            self.report(current)
        except Exception as error:
            log.error("reporting devices failed, re-detecting: %s", error)
            detected = None
        if current.unmeasured:
            self.sleep(self.period)
            return
        for _ in range(self.redetect_every):
            self.sleep(self.period)
            if stop() or detected is None or self.report_due():
                return
            if self.monitor_differs(detected):
                return

    def run(self, stop: Callable[[], bool]) -> None:
        """Rounds until `stop()` says so; never exits on its own."""
        while not stop():
            self.run_round(stop)
