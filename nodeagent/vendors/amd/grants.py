"""AMD container responses.

Exclusive, shared and visibility grants inject the nodes themselves, so a node needs the AMD
driver alone: `/dev/kfd` once, then each card's `/dev/dri/card<N>` and `/dev/dri/renderD<M>`
(the DRM nodes the detector recorded as `physicalIndexes`), every one required: a container
started without one of them would have no card and no error. `AMD_VISIBLE_DEVICES=none` tells
any `amd-container-runtime` on the node to add nothing: the variable and the injected nodes
union rather than reconcile, so a live variable would be a second grant channel.

Sliced grants split the two dimensions across two enforcers, alone among the manufacturers:
memory through the preloaded `libvrocm.so` (`VROCM_DEVICE_MEMORY_LIMIT_<i>` in bare MiB, its
accounting region in `VROCM_LEDGER_PATH`), compute through a hardware CU mask (`HSA_CU_MASK`,
`vendors/common/cumask.py`) derived from the card's KFD topology
(`vendors/common/kfd_topology.py`) and placed beside the windows the card's other slices hold.
`ROCR_VISIBLE_DEVICES` names exactly the injected cards, and its order is the index space of the
other two. The library is one flat artifact for every
ROCm version; `rocm-monitor` and `rocm-cumask-check` are mounted beside it, because a mask ROCr
rejects fails open.

Each slice's window is recorded on the host, beside its work directory and outside anything the
container mounts (`<pods>/<pod>/c-<container>/amd-cumask`: `<card> <start> <length>` a line),
so the next slice of the card is placed beside it; the record goes with the Pod's work directory
when the Pod is gone. A retry keeps its window.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path

from chain.devices import DevicesGroup
from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    IsolationFile,
    SliceRequest,
    VendorResponder,
    ledgered_preload,
    memory_limits,
    preload_kit,
    staged_dir,
    unless_declared,
    write_host_file,
)
from nodeagent.plugin.response import ContainerResponse, DeviceNode
from nodeagent.vendors.common.cumask import delivered_percentage, mask_entry, place, window_length
from nodeagent.vendors.common.kfd_topology import card_topology

log = logging.getLogger(__name__)

MANUFACTURER = "amd"
KFD = "/dev/kfd"
LIBRARY_DIR = "/usr/local/vrocm"
LEDGER_DIR = "/var/run/vrocm"
WINDOWS = "amd-cumask"
QUIET = (("LIBVROCM_LOG_LEVEL", "1"),)


def vrocm_kit(lib_dir: str) -> tuple[IsolationFile, ...]:
    """`libvrocm.so` as staged (one flat build for every ROCm version), with its preload list
    and the two tools mounted beside it."""
    return preload_kit(
        staged_dir(lib_dir, MANUFACTURER), ("libvrocm.so",), ("rocm-monitor", "rocm-cumask-check")
    )


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


def read_windows(path: Path) -> list[tuple[str, int, int]]:
    """(card, start, length) of a slice's window record; empty when there is none."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found.append((parts[0], int(parts[1]), int(parts[2])))
    return found


class Amd(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def __init__(self) -> None:
        self._windows = threading.Lock()

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

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        shown = self.show(cards, nodes)
        percentage = request.limits.cores()
        envs = {
            "AMD_VISIBLE_DEVICES": "none",
            "ROCR_VISIBLE_DEVICES": ",".join(granted.card.id for granted in cards),
            "VROCM_LEDGER_PATH": f"{LEDGER_DIR}/ledger",
            **memory_limits(cards, request.limits, "VROCM_DEVICE_MEMORY_LIMIT_"),
            "HSA_CU_MASK": ";".join(self._masks(cards, request, nodes, percentage)),
        }
        unless_declared(envs, QUIET, request.declared)
        kit = ledgered_preload(request, vrocm_kit(request.lib_dir), LIBRARY_DIR, LEDGER_DIR)
        return replace(kit, envs=envs, devices=shown.devices)

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        return vrocm_kit(lib_dir)

    def _masks(
        self, cards: Cards, request: SliceRequest, nodes: DeviceNodes, percentage: int
    ) -> list[str]:
        """Each card's `HSA_CU_MASK` entry, placed beside the card's other slices and recorded
        (under a lock: two slices of one card must not both take the first free window)."""
        own = Path(request.work_dir, WINDOWS)
        with self._windows:
            mine = {card: (start, length) for card, start, length in read_windows(own)}
            others: dict[str, list[tuple[int, int]]] = {}
            for path in Path(request.pods_dir).glob(f"*/*/{WINDOWS}"):
                if path != own:
                    for card, start, length in read_windows(path):
                        others.setdefault(card, []).append((start, length))
            entries, record = [], []
            for position, granted in enumerate(cards):
                topology = card_topology(nodes, granted)
                length = window_length(topology, percentage)
                delivered = delivered_percentage(topology, length)
                if delivered != percentage:
                    log.info(
                        "card %s: %d%% of compute aligned down to %d%% (%d of %d CUs)",
                        granted.card.id,
                        percentage,
                        delivered,
                        length,
                        topology.compute_units,
                    )
                kept = mine.get(granted.card.id)
                if kept is not None and kept[1] == length:
                    start = kept[0]
                else:
                    start = place(topology, length, others.get(granted.card.id, []))
                entries.append(mask_entry(position, start, length))
                record.append(f"{granted.card.id} {start} {length}\n")
            write_host_file(own, "".join(record))
        return entries
