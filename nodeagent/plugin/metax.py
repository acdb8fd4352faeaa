"""MetaX container responses.

Exclusive, shared and visibility grants inject the nodes themselves: the control nodes
`/dev/mxcd`, `/dev/mxnd` and `/dev/mxgd` once, then each card's DRM nodes; no variable. Every
node is best-effort, as upstream: one the host lacks is logged and left out.

Logical slices (an `sgpu` subdevice made through sysfs, then `METAX_SGPUS`) are not served yet;
the detector's slices are not published until they are.
"""

from __future__ import annotations

import logging

from nodeagent.plugin.drm import optional_drm_nodes
from nodeagent.plugin.grants import Cards, DeviceNodes, VendorResponder
from nodeagent.plugin.response import ContainerResponse

log = logging.getLogger(__name__)

MANUFACTURER = "metax"
CONTROL_NODES = ("/dev/mxcd", "/dev/mxnd", "/dev/mxgd")


class Metax(VendorResponder):
    manufacturer = MANUFACTURER

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        control = nodes.optional(*CONTROL_NODES)
        if len(control) < len(CONTROL_NODES):
            missing = sorted(set(CONTROL_NODES) - {node.host_path for node in control})
            log.info("the host exposes no %s; not injected", ", ".join(missing))
        return ContainerResponse(devices=(*control, *optional_drm_nodes(cards, nodes)))
