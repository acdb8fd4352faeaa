"""The DRM nodes of a card, for the manufacturers that inject a card's nodes themselves with the
host's as they are (Hygon, MetaX): `/dev/dri/card<N>` and `/dev/dri/renderD<M>` from the
detector's `physicalIndexes`, each one the host exposes. A node the detector could not number,
or the host lacks, is left out and the grant still stands (upstream's behaviour for both; AMD's
stricter rule lives in `amd.py`)."""

from __future__ import annotations

import logging

from nodeagent.plugin.grants import Cards, DeviceNodes
from nodeagent.plugin.response import DeviceNode

log = logging.getLogger(__name__)


def optional_drm_nodes(cards: Cards, nodes: DeviceNodes) -> tuple[DeviceNode, ...]:
    found: list[DeviceNode] = []
    for granted in cards:
        for position, form in ((0, "/dev/dri/card{}"), (1, "/dev/dri/renderD{}")):
            number = granted.physical_index(position)
            if number is None:
                log.info("card %s records no drm node %d; not injected", granted.card.id, position)
                continue
            shown = nodes.optional(form.format(number))
            if not shown:
                log.info("card %s: the host has no %s", granted.card.id, form.format(number))
            found += shown
    return tuple(found)
