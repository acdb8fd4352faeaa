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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from chain.devices import DevicesGroup
from chain.manufacturers import ManufacturerTable
from chain.settings import StartupEnv
from nodeagent.detect.sysfs import Sysfs
from nodeagent.vendors.common.nvml import Nvml


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


@dataclass(frozen=True)
class DetectorSetup:
    """What every detector may need. In simulation `nvml` replaces the NVML library and
    `injected` hands other detectors theirs (manufacturer -> constructor keywords, e.g.
    `{"amd": {"smi": ...}}`)."""

    table: ManufacturerTable
    env: StartupEnv
    sysfs: Sysfs
    nvml: Nvml | None = None
    injected: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def library_detector(
    name: str, kind: Callable[..., Detector], **library: Callable[[DetectorSetup], object]
) -> Callable[[DetectorSetup], Detector]:
    """A detector over the vendor interface of the host (opened on the first pass), or over
    the simulated one the setup carries (`library` picks NVML; `injected` the others)."""

    def build(setup: DetectorSetup) -> Detector:
        return kind(
            sysfs=setup.sysfs,
            maker=setup.table[name],
            group_id_with_memory=setup.env.devices_group_id_with_memory,
            **{keyword: pick(setup) for keyword, pick in library.items()},
            **setup.injected.get(name, {}),
        )

    return build
