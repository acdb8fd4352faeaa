"""The link classes between two devices of one node, and the matrix the device plugin chooses from.

The classes are the ones `nvidia-smi topo -m` prints and NVML's `nvmlGpuTopologyLevel_t` names
(INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM), plus a card-to-card fabric above them
all; they apply to every manufacturer because they describe the PCIe tree and the sockets, not
a vendor's library. Lower is better: a set of cards is as good as its worst pair.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum


class Link(IntEnum):
    """How two devices of one node reach each other, best first."""

    # A direct card-to-card fabric: NVIDIA NVLink/NVSwitch, AMD xGMI, Huawei HCCS, MetaX
    # MetaXLink. Traffic never touches the PCIe tree.
    DIRECT = 0
    # PIX: through at most one PCIe switch (NVML SINGLE).
    PCIE_SWITCH = 1
    # PXB: through several PCIe switches, without the host bridge (NVML MULTIPLE).
    PCIE_SWITCHES = 2
    # PHB: through one PCIe host bridge, the root complex both hang under (NVML HOSTBRIDGE).
    HOST_BRIDGE = 3
    # NODE: across host bridges within one NUMA node (NVML NODE).
    NUMA_NODE = 4
    # SYS: across NUMA nodes, over the sockets' interconnect (QPI/UPI; NVML SYSTEM).
    SYSTEM = 5


@dataclass(frozen=True)
class CardLinks:
    """The pairwise links among one node's cards, and from each card to each network card.

    `cards` are the card identifiers the device plugin already uses for the node's cards (the
    index each `Devices` entry carries); `between[(a, b)]` is defined for every unordered pair
    with a < b (use `link`); `nics[card][nic]` is the link from a card to a network interface
    named as the kernel names it (`mlx5_0` for an RDMA device, `eth0` otherwise). A node whose
    topology is unknown has an empty matrix: every pair then counts as SYSTEM, and a choice over
    it falls back to plain packing.
    """

    cards: tuple[str, ...]
    between: Mapping[tuple[str, str], Link] = field(default_factory=dict)
    nics: Mapping[str, Mapping[str, Link]] = field(default_factory=dict)

    def link(self, a: str, b: str) -> Link:
        """The link between two different cards (SYSTEM where the matrix says nothing)."""
        if a == b:
            raise ValueError(f"a card has no link to itself: {a}")
        key = (a, b) if a < b else (b, a)
        return self.between.get(key, Link.SYSTEM)

    def nearest_nics(self, card: str) -> list[str]:
        """The network cards closest to `card`, best first, ties by name."""
        reach = self.nics.get(card, {})
        return sorted(reach, key=lambda nic: (reach[nic], nic))
