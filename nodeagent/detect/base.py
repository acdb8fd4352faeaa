"""The detector contract every manufacturer implements.

A detector answers two questions about its manufacturer's cards on this node:
- `detect()`: the card groups (the `Devices` spec groups), read fresh from the driver;
- `monitor()`: per-card health and load, cheap enough to ask every monitor period.

The contract on failure is what keeps the ledger honest:
- no driver, a library that will not initialise, no card: an **empty** answer, never an error;
- an exception means "could not measure" (a broken driver call, a bug). The caller then keeps
  the last answer instead of concluding the cards are gone (`held.ManufacturerDetection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chain.devices import DevicesGroup


@dataclass(frozen=True)
class CardMetrics:
    """One card's load as the monitor sees it (metrics, not the ledger)."""

    manufacturer: str
    id: str
    index: int
    unhealthy: bool = False
    memory_total_mib: int = 0
    memory_used_mib: int = 0
    utilization_percent: int = 0
    temperature_celsius: int = 0
    power_watts: int = 0

    @property
    def key(self) -> CardKey:
        return CardKey(self.manufacturer, self.id, self.unhealthy)


@dataclass(frozen=True, order=True)
class CardKey:
    """What must stay equal between detection and monitoring for the detection to stand."""

    manufacturer: str
    id: str
    unhealthy: bool


def card_keys(groups: tuple[DevicesGroup, ...]) -> frozenset[CardKey]:
    return frozenset(
        CardKey(group.manufacturer, card.id, card.status.unhealthy)
        for group in groups
        for card in group.accelerators
    )


class Detector(Protocol):
    """One manufacturer's detector."""

    @property
    def manufacturer(self) -> str:
        """The manufacturer's name in the table (`nvidia`)."""
        ...

    def detect(self) -> tuple[DevicesGroup, ...]:
        """The manufacturer's card groups; empty when there are none or no driver."""
        ...

    def monitor(self) -> tuple[CardMetrics, ...]:
        """Every card's health and load; empty when there are none or no driver."""
        ...
