"""AMD container responses.

Exclusive, shared and visibility grants inject the nodes themselves, so a node needs the AMD
driver alone: `/dev/kfd` once, then each card's `/dev/dri/card<N>` and `/dev/dri/renderD<M>`
(the DRM nodes the detector recorded as `physicalIndexes`), every one required: a container
started without one of them would have no card and no error. `AMD_VISIBLE_DEVICES=none` tells
any `amd-container-runtime` on the node to add nothing: the variable and the injected nodes
union rather than reconcile, so a live variable would be a second grant channel.

Logical slices are not served yet: their compute half is a CU mask (`HSA_CU_MASK`) that must be
placed beside the masks other slices of the card hold, which needs the window recorded in the
ledger first. Until then the detector's 128 slices per card are not published.
"""

from __future__ import annotations

from nodeagent.plugin.grants import Cards, DeviceNodes, VendorResponder
from nodeagent.plugin.response import ContainerResponse, DeviceNode

MANUFACTURER = "amd"
KFD = "/dev/kfd"


def drm_nodes(cards: Cards) -> list[tuple[str, str]]:
    """(card id, path) of each card's DRM card and render node, in card order."""
    named = []
    for granted in cards:
        card, render = granted.physical_index(0), granted.physical_index(1)
        if card is None or render is None:
            raise ValueError(
                f"card {granted.card.id} records no drm card and render node, so the device "
                "nodes it needs cannot be named"
            )
        named += [
            (granted.card.id, f"/dev/dri/card{card}"),
            (granted.card.id, f"/dev/dri/renderD{render}"),
        ]
    return named


def device_nodes(cards: Cards, nodes: DeviceNodes) -> tuple[DeviceNode, ...]:
    if not nodes.exists(KFD):
        raise ValueError(f"the host has no device node {KFD!r}, so no accelerator can be granted")
    found = [DeviceNode(KFD, KFD)]
    owners: dict[str, str] = {}
    for card, path in drm_nodes(cards):
        other = owners.setdefault(path, card)
        if other != card:
            raise ValueError(
                f"cards {other} and {card} both record drm node {path!r}, so neither can be "
                "granted; compare their drm listings under /sys/module/amdgpu/drivers/pci:amdgpu"
            )
        if not nodes.exists(path):
            raise ValueError(f"card {card} has no device node {path!r} on the host")
        found.append(DeviceNode(path, path))
    return tuple(found)


class Amd(VendorResponder):
    manufacturer = MANUFACTURER

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        for granted in cards:
            if not granted.card.id:
                raise ValueError(
                    f"card at index {granted.card.index} reports no unique id, so it cannot be "
                    "granted"
                )
        return ContainerResponse(
            envs={"AMD_VISIBLE_DEVICES": "none"}, devices=device_nodes(cards, nodes)
        )
