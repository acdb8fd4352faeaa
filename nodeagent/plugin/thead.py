"""T-Head (PPU) container responses.

No visible-devices variable in any mode: T-Head has no container-runtime hook, so every grant
is its device nodes, all required: the two shared control nodes `/dev/alixpu` and
`/dev/alixpu_ctl`, then `/dev/alixpu_ppu<index>` per card. A card node is proven to address
the card by its minor number, which must equal the minor the detector recorded
(`physicalIndexes[0]`); a card without one, or a node with another, fails closed rather than
hand the container someone else's card.

Sliced grants add the pair `hggc_quota.so` (enforcement) + `hgml_dlsym_hook.so` (it makes the
container's `ppu-smi` report the quota), preloaded through `/etc/ld.so.preload`, with
`HGGC_DEVICE_SM_LIMIT` (emitted even at 100: the library refuses a card whose figure is missing)
and `HGGC_DEVICE_MEMORY_LIMIT_<i>` in bare MiB by position, and a per-container ledger region
(`HGGC_LEDGER_PATH`) that the mounted `ppu-monitor` reads. The pair carries no runtime-version
subdirectory (the PPU SDK lives in the workload image). A workload preloading its own `dlsym`
interposer through `LD_PRELOAD` keeps the quota but `ppu-smi` then shows the whole card: a
caveat the library cannot detect, not an error.
"""

from __future__ import annotations

from dataclasses import replace

from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    SliceRequest,
    VendorResponder,
    ledgered_preload,
    memory_limits,
    unless_declared,
)
from nodeagent.plugin.response import ContainerResponse, DeviceNode

MANUFACTURER = "thead"
CONTROL_NODES = ("/dev/alixpu", "/dev/alixpu_ctl")
LIBRARY_DIR = "/usr/local/vppu"
LEDGER_DIR = "/var/run/vppu"
QUIET = (("LIBHGGC_LOG_LEVEL", "1"),)


def card_node(index: int) -> str:
    return f"/dev/alixpu_ppu{index}"


def device_nodes(cards: Cards, nodes: DeviceNodes) -> tuple[DeviceNode, ...]:
    """The control nodes once, then each card's node, every one proven present."""
    found = []
    for path in CONTROL_NODES:
        if nodes.char_minor(path) is None:
            raise ValueError(f"device node {path!r}: the host has no character device there")
        found.append(DeviceNode(path, path))
    for granted in cards:
        want = granted.physical_index(0)
        if want is None:
            raise ValueError(
                f"card {granted.card.id}: no recorded minor number to prove its device node "
                "addresses it: fail closed"
            )
        path = card_node(granted.card.index)
        have = nodes.char_minor(path)
        if have is None:
            raise ValueError(f"card {granted.card.id}: the host has no character device {path!r}")
        if have != want:
            raise ValueError(
                f"card {granted.card.id}: device node {path!r} carries minor {have}, "
                f"want {want}: fail closed"
            )
        found.append(DeviceNode(path, path))
    return tuple(found)


class Thead(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        return ContainerResponse(devices=device_nodes(cards, nodes))

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        devices = device_nodes(cards, nodes)
        envs = {
            "HGGC_DEVICE_SM_LIMIT": str(request.limits.cores()),
            "HGGC_LEDGER_PATH": f"{LEDGER_DIR}/ledger",
            **memory_limits(cards, request.limits, "HGGC_DEVICE_MEMORY_LIMIT_"),
        }
        unless_declared(envs, QUIET, request.declared)
        tools = ("hgml_dlsym_hook.so", "hggc_quota.so", "ppu-monitor")
        kit = ledgered_preload(request, MANUFACTURER, LIBRARY_DIR, tools, LEDGER_DIR)
        return replace(kit, envs=envs, devices=devices)
