"""The node agent's Prometheus metrics, served at `/metrics` beside its probes (port 8081).

- `gpustack_allocate_seconds{resource,outcome}`: how long Allocate took, by outcome
  (`granted`, `refused`, `late`: past its deadline, `failed`: anything else);
- `gpustack_allocate_refusals_total{resource,code}`: refusals by gRPC code (`FailedPrecondition`
  for a cross-mode hold or a full card, `InvalidArgument`, `ResourceExhausted`, `Internal`);
- `gpustack_allocation_record_refusals_total{reason}`: allocation-record writes the API server
  refused for that Pod (`Forbidden`, `Invalid`, `BadRequest`: an admission policy, a malformed
  Pod), every refused try; the Pod also gets one `AllocationRecordRefused` Event;
- `gpustack_allocation_record_failures_total{reason}`: record writes that failed transiently
  (`Conflict`, `TooManyRequests`, `ServerError`, `Timeout`, `Unreachable`, ...), retried;
- `gpustack_allocation_records_pending{state}`: Pods whose latest record has not landed yet:
  `queued` (its first write to come), `retrying` (failed transiently), `refused`;
- `gpustack_detection_passes_total{manufacturer,result}`: detection passes, `measured` or
  `failed` (a pass that could not measure keeps the last result);
- the ledger as last written (or, without device plugins, the cards as last reported), read at
  scrape time so a card that left takes its series with it:
  `gpustack_cards{manufacturer,group,health}`,
  `gpustack_card_allocated_units{manufacturer,group,card,mode}` (of 1,600,000 a card),
  `gpustack_card_free_units{manufacturer,group,card}` and
  `gpustack_card_slices{manufacturer,group,card}` (logical slices held).

One registry per process (`REGISTRY`), not the library's global one: the agent's metrics are
exactly these, and tests read them without the process collectors' noise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from chain.devices import Devices
from chain.ledger import Mode
from chain.units import RESOURCE_MAX_UNITS

REGISTRY = CollectorRegistry(auto_describe=True)

ALLOCATE_SECONDS = Histogram(
    "gpustack_allocate_seconds",
    "Time an Allocate call took, by device-plugin resource and outcome.",
    ["resource", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
ALLOCATE_REFUSALS = Counter(
    "gpustack_allocate_refusals",
    "Allocate calls refused, by device-plugin resource and gRPC status code.",
    ["resource", "code"],
    registry=REGISTRY,
)
RECORD_REFUSALS = Counter(
    "gpustack_allocation_record_refusals",
    "Allocation-record writes the API server refused for that Pod, by reason.",
    ["reason"],
    registry=REGISTRY,
)
RECORD_FAILURES = Counter(
    "gpustack_allocation_record_failures",
    "Allocation-record writes that failed transiently and are retried, by reason.",
    ["reason"],
    registry=REGISTRY,
)
RECORDS_PENDING = Gauge(
    "gpustack_allocation_records_pending",
    "Pods whose latest allocation record has not landed, by state (queued, retrying, refused).",
    ["state"],
    registry=REGISTRY,
)
DETECTION_PASSES = Counter(
    "gpustack_detection_passes",
    "Detection passes, by manufacturer and result (measured or failed).",
    ["manufacturer", "result"],
    registry=REGISTRY,
)


class LedgerCollector:
    """The node's cards and their ledger, as the agent last wrote (or reported) them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._devices: Devices | None = None

    def observe(self, devices: Devices) -> None:
        with self._lock:
            self._devices = devices

    def describe(self) -> list[Any]:
        return []  # series come and go with the cards; nothing to declare up front

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            devices = self._devices
        cards = GaugeMetricFamily(
            "gpustack_cards",
            "Cards of the node, by manufacturer, group and health.",
            labels=["manufacturer", "group", "health"],
        )
        held = GaugeMetricFamily(
            "gpustack_card_allocated_units",
            f"Units of a card the ledger holds, by mode ({RESOURCE_MAX_UNITS:,} a card).",
            labels=["manufacturer", "group", "card", "mode"],
        )
        free = GaugeMetricFamily(
            "gpustack_card_free_units",
            "Units of a card the ledger leaves free.",
            labels=["manufacturer", "group", "card"],
        )
        slices = GaugeMetricFamily(
            "gpustack_card_slices",
            "Logical slices a card hosts.",
            labels=["manufacturer", "group", "card"],
        )
        if devices is not None:
            counts: dict[tuple[str, str, str], int] = {}
            for group, card in devices.spec.cards():
                health = "unhealthy" if card.status.unhealthy else "healthy"
                key = (group.manufacturer, group.id, health)
                counts[key] = counts.get(key, 0) + 1
                row = devices.status.row(group.manufacturer, group.id, card.id)
                names = [group.manufacturer, group.id, card.id]
                if row is None or row.mode == Mode.NONE:
                    free.add_metric(names, RESOURCE_MAX_UNITS)
                    continue
                held.add_metric([*names, row.mode.name.lower()], RESOURCE_MAX_UNITS - row.remaining)
                free.add_metric(names, row.remaining)
                slices.add_metric(names, row.allocated_slices)
            for labels, count in sorted(counts.items()):
                cards.add_metric(list(labels), count)
        yield from (cards, held, free, slices)


LEDGER = LedgerCollector()
REGISTRY.register(LEDGER)


def exposition() -> bytes:
    """Every metric in Prometheus' text format."""
    return generate_latest(REGISTRY)
