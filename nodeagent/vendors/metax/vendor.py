"""MetaX's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from collections.abc import Callable

from nodeagent.detect.base import library_detector
from nodeagent.plugin.grants import Responder
from nodeagent.vendors.interface import AgentPod, Reconcile, Vendor
from nodeagent.vendors.metax.detect import METAX, MetaxDetector
from nodeagent.vendors.metax.grants import Metax, MetaxReclaimer
from nodeagent.vendors.metax.preflight import dry_responder
from nodeagent.vendors.metax.simulate import SIMULATOR


def reclaim_slices(
    responder: Responder, pods_dir: str, bus_ids: Callable[[], list[str]]
) -> Reconcile | None:
    """MetaX's `sgpu` subdevices, destroyed once their Pod is gone."""
    if not isinstance(responder, Metax):
        return None
    return MetaxReclaimer(responder.sgpu, bus_ids).reconcile


VENDOR = Vendor(
    name=METAX,
    detector=library_detector(METAX, MetaxDetector),
    responder=Metax(),
    slice_reclaimer=reclaim_slices,
    simulator=SIMULATOR,
    # sgpu subdevices are made by writing the card's sysfs files (`sgpu.py`).
    agent=AgentPod(
        writable=("/sys",),
        note="""\
#   MetaX's agent also mounts the host's /sys writable: its slices are sgpu subdevices made
#   through the card's sysfs.
""",
    ),
    dry_responder=dry_responder,
)
