"""The one interface a manufacturer's package implements (docs/adding-a-manufacturer.md).

The detector loop, the device plugin and the simulator ask a `Vendor` for what differs by
manufacturer, so none of them names one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nodeagent.detect.base import Detector, DetectorSetup
from nodeagent.plugin.grants import Responder
from nodeagent.plugin.mig import ProfileNaming
from nodeagent.simulate.base import HostSimulator

Reconcile = Callable[[frozenset[str]], object]
"""A reclaimer's pass, fed the node's live Pod UIDs."""

SliceReclaimer = Callable[[Responder, str, Callable[[], list[str]]], Reconcile | None]
"""Builds the reclaimer of the slices a responder makes on the cards (the responder, the Pods'
work dir, the PCI addresses of this manufacturer's cards); None when that responder makes none."""

DirectLinks = Callable[[DetectorSetup], Sequence[tuple[str, str]]]
"""The card pairs (PCI addresses) a manufacturer's library says share a card-to-card fabric."""


@dataclass(frozen=True)
class Vendor:
    """One manufacturer as the node agent sees it.

    `name` is its key in `chain.manufacturers`; `detector` builds its detector from the
    setup; `responder` answers its Allocate calls; `partition_naming` is set when its hardware
    partitions are made through an NVML-shaped library (`nodeagent.plugin.mig`); and
    `slice_reclaimer` when its logical slices are objects on the card that outlive a Pod;
    `simulator` opens a simulated host from one of its profiles (`--simulate`); and
    `direct_links` lists the pairs of its cards (by PCI address) joined by a card-to-card fabric,
    when its library can tell (docs/topology.md, "Network cards")."""

    name: str
    detector: Callable[[DetectorSetup], Detector]
    responder: Responder
    partition_naming: ProfileNaming | None = None
    slice_reclaimer: SliceReclaimer | None = None
    simulator: HostSimulator | None = None
    direct_links: DirectLinks | None = None
