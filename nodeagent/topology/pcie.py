"""Where a PCI function sits in the node's PCIe tree, and the link class between two of them.

On Linux `<root>/sys/bus/pci/devices/<address>` is a symlink into
`<root>/sys/devices/pci<domain>:<bus>/<root port>/<switch up>/<switch down>/.../<address>`:
the directory `pci<domain>:<bus>` is the host bridge (one root complex), every PCI address on the
way down is a bridge. Reading the link is all the kernel asks; no driver is loaded, so this works
for every manufacturer's cards and for network cards alike (docs/topology.md, "Network cards").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nodeagent.detect.sysfs import pci_address
from nodeagent.topology.links import CardLinks, Link

_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}")


@dataclass(frozen=True)
class PciePlace:
    """One PCI function's place: its host bridge, the bridges above it (top first) and its
    NUMA node (None where the platform reports none: `numa_node` is -1 or missing)."""

    address: str
    host_bridge: str
    bridges: tuple[str, ...]
    numa_node: int | None


def pcie_place(root: Path, address: str) -> PciePlace | None:
    """The place of the function `address` (any bus id spelling) under the sysfs `root`; None
    when it is not on the bus or its link leads nowhere under a host bridge."""
    wanted = pci_address(address)
    entry = root / "sys" / "bus" / "pci" / "devices" / wanted
    try:
        real = entry.resolve(strict=True)
    except OSError:
        return None
    parts = real.parts
    bridge_at = next((i for i, part in enumerate(parts) if _HOST_BRIDGE.fullmatch(part)), None)
    if bridge_at is None:
        return None
    below = [part for part in parts[bridge_at + 1 :] if _ADDRESS.fullmatch(part)]
    if not below or below[-1] != wanted:
        return None
    return PciePlace(wanted, parts[bridge_at], tuple(below[:-1]), _numa_node(entry))


def _numa_node(entry: Path) -> int | None:
    try:
        text = (entry / "numa_node").read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def pcie_link(a: PciePlace, b: PciePlace) -> Link:
    """The class of the PCIe path between two different functions, as `nvidia-smi topo -m`
    names it.

    Two known, different NUMA nodes: SYS. Different host bridges: NODE (a platform without NUMA
    is one node). Under one host bridge with no bridge in common (each on its own root port, or
    in the root complex itself): PHB. Otherwise the bridges each side has below the last one they
    share say how many switches the path crosses: at most one each (the downstream ports of one
    switch, or one port both hang under) is one switch, PIX; more is a path through several, PXB.
    """
    if a.address == b.address:
        raise ValueError(f"a device has no link to itself: {a.address}")
    if a.numa_node is not None and b.numa_node is not None and a.numa_node != b.numa_node:
        return Link.SYSTEM
    if a.host_bridge != b.host_bridge:
        return Link.NUMA_NODE
    shared = 0
    for mine, theirs in zip(a.bridges, b.bridges, strict=False):
        if mine != theirs:
            break
        shared += 1
    if shared == 0:
        return Link.HOST_BRIDGE
    if len(a.bridges) - shared <= 1 and len(b.bridges) - shared <= 1:
        return Link.PCIE_SWITCH
    return Link.PCIE_SWITCHES


def link_matrix(
    cards: Mapping[str, PciePlace | None],
    nics: Mapping[str, PciePlace | None] | None = None,
    direct: Iterable[tuple[str, str]] = (),
) -> CardLinks:
    """The matrix the device plugin chooses from: `cards` by the identifier the plugin uses,
    each with its place (None: not found in sysfs, every pair with it then stays SYS);
    `nics` by interface name; `direct` the card pairs a vendor reports on a card-to-card
    fabric, which beat any PCIe path."""
    names = tuple(sorted(cards))
    fabric = {(a, b) if a < b else (b, a) for a, b in direct if a != b}
    between: dict[tuple[str, str], Link] = {}
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if (first, second) in fabric:
                between[(first, second)] = Link.DIRECT
                continue
            a, b = cards[first], cards[second]
            if a is not None and b is not None:
                between[(first, second)] = pcie_link(a, b)
    reach: dict[str, dict[str, Link]] = {}
    for card in names:
        place = cards[card]
        if place is None:
            continue
        reach[card] = {
            nic: pcie_link(place, where)
            for nic, where in (nics or {}).items()
            if where is not None and where.address != place.address
        }
    return CardLinks(cards=names, between=between, nics=reach)
