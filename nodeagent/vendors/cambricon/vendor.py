"""Cambricon's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from collections.abc import Callable

from nodeagent.detect.base import library_detector
from nodeagent.plugin.grants import Responder
from nodeagent.vendors.cambricon.detect import CAMBRICON, CambriconDetector
from nodeagent.vendors.cambricon.grants import Cambricon, CambriconReclaimer
from nodeagent.vendors.cambricon.preflight import dry_responder
from nodeagent.vendors.cambricon.simulate import SIMULATOR
from nodeagent.vendors.interface import Reconcile, Vendor


def reclaim_slices(
    responder: Responder, pods_dir: str, bus_ids: Callable[[], list[str]]
) -> Reconcile | None:
    """Cambricon's sMLU instances, destroyed once their Pod is gone."""
    if not isinstance(responder, Cambricon):
        return None
    return CambriconReclaimer(responder, pods_dir).reconcile


VENDOR = Vendor(
    name=CAMBRICON,
    detector=library_detector(CAMBRICON, CambriconDetector),
    responder=Cambricon(),
    slice_reclaimer=reclaim_slices,
    simulator=SIMULATOR,
    dry_responder=dry_responder,
)
