"""Hygon (DCU) container responses.

Exclusive, shared and visibility grants inject the nodes themselves: `/dev/kfd` and `/dev/mkfd`
once (permissions `rwm`), each card's DRM nodes, and the host's `/opt/hyhal` read-only (the
driver's user-space half). No variable is set. Every node is best-effort, as upstream: one the
host lacks is logged and left out.

Logical slices (a per-Pod `vdev.conf` with a CU bitmask and a VRAM cap, read by the host
DTK/hyhal runtime) and Hygon's MIG-named partitions are not served yet; the detector's slices
are not published until they are.
"""

from __future__ import annotations

from nodeagent.plugin.drm import optional_drm_nodes
from nodeagent.plugin.grants import Cards, DeviceNodes, VendorResponder
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount

MANUFACTURER = "hygon"
CONTROL_NODES = ("/dev/kfd", "/dev/mkfd")
HYHAL = "/opt/hyhal"


class Hygon(VendorResponder):
    manufacturer = MANUFACTURER

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        control = tuple(
            DeviceNode(path, path, "rwm") for path in CONTROL_NODES if nodes.exists(path)
        )
        mounts = (Mount(HYHAL, HYHAL, read_only=True),) if nodes.exists(HYHAL) else ()
        return ContainerResponse(
            mounts=mounts, devices=(*control, *optional_drm_nodes(cards, nodes))
        )
