"""Cambricon (MLU) container responses.

Exclusive, shared and visibility grants inject what Cambricon's own plugin injects by default,
per card by its cnDev index (`physicalIndexes[0]`): the card's `/dev/cambricon_dev<i>`,
required (a card the host exposes no node for fails the grant rather than start a container
with no card), then the optional per-card nodes the host exposes; after all cards the
node-level control nodes, once. `CAMBRICON_VISIBLE_DEVICES` still names the indexes, for a
deployment that does run the vendor runtime.

Logical slices (a cnDev sMLU profile and instance) are not served yet; the detector's slices are
not published until they are.
"""

from __future__ import annotations

from nodeagent.plugin.grants import Cards, DeviceNodes, VendorResponder
from nodeagent.plugin.response import ContainerResponse, DeviceNode

MANUFACTURER = "cambricon"
VISIBLE_DEVICES_ENV = "CAMBRICON_VISIBLE_DEVICES"
OPTIONAL_CARD_NODES = (
    "/dev/cambr-msgq:{}",
    "/dev/cambr-rpc:{}",
    "/dev/cmsg_ctrl{}",
    "/dev/commu{}",
    "/dev/cambricon_ipcm{}",
)
CONTROL_NODES = ("/dev/cambricon_ctl", "/dev/cambricon_gdr")


def cndev_index(granted_id: str, found: int | None) -> int:
    if found is None:
        raise ValueError(f"accelerator {granted_id!r} carries no cnDev device index")
    return found


class Cambricon(VendorResponder):
    manufacturer = MANUFACTURER

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        indexes = []
        devices: list[DeviceNode] = []
        for granted in cards:
            index = cndev_index(granted.card.id, granted.physical_index(0))
            indexes.append(str(index))
            own = f"/dev/cambricon_dev{index}"
            if not nodes.exists(own):
                raise ValueError(
                    f"accelerator {granted.card.id!r} of card {granted.group.name!r} has no "
                    f"device node {own!r}"
                )
            devices.append(DeviceNode(own, own))
            devices += nodes.optional(*(form.format(index) for form in OPTIONAL_CARD_NODES))
        devices += nodes.optional(*CONTROL_NODES)
        return ContainerResponse(
            envs={VISIBLE_DEVICES_ENV: ",".join(indexes)}, devices=tuple(devices)
        )
