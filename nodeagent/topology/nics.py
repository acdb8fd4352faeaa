"""The node's network cards, read from sysfs: what the `Devices` object's `spec.interfaces` lists.

Two kernel views are joined on the PCI function:

- `/sys/class/infiniband/<device>`: every RDMA device (InfiniBand, and RoCE on Ethernet), its
  `device` link to the PCI function, and per port `link_layer`, `rate`, `state` and the GID
  table (`gids/<i>`, `gid_attrs/types/<i>`, `gid_attrs/ndevs/<i>`);
- `/sys/class/net/<interface>`: every network interface, its `type` (1 Ethernet, 32
  InfiniBand, the ARPHRD numbers), `speed` (Mb/s), `operstate` and `device` link.

An interface without a `device` link is virtual (lo, veth, bridges, bonds, VXLAN) and left out:
it has no place on the PCIe tree and no cards near it. The NIC belongs to the machine, not to a
manufacturer (docs/topology.md, "Network cards"), so nothing here names one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.detect.sysfs import pci_address
from nodeagent.topology.links import Link
from nodeagent.topology.pcie import PciePlace, pcie_link, pcie_place

ETHERNET = "Ethernet"
INFINIBAND = "InfiniBand"
LINK_LAYERS = {"1": ETHERNET, "32": INFINIBAND}
"""`/sys/class/net/<if>/type`: ARPHRD_ETHER and ARPHRD_INFINIBAND."""
ROCE_V2 = "RoCE v2"
"""What `gid_attrs/types/<i>` says of a RoCE v2 GID (v1 GIDs read `IB/RoCE v1`)."""
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_EMPTY_GID = re.compile(r"[0:]*")

LINK_NAMES = {
    Link.DIRECT: "DIRECT",
    Link.PCIE_SWITCH: "PIX",
    Link.PCIE_SWITCHES: "PXB",
    Link.HOST_BRIDGE: "PHB",
    Link.NUMA_NODE: "NODE",
    Link.SYSTEM: "SYS",
}
"""The names `nvidia-smi topo -m` prints, as the Devices object spells a link class."""


@dataclass(frozen=True)
class NetworkCard:
    """One physical network port: an RDMA device's port, or a plain interface on PCI."""

    name: str
    """The RDMA device (`mlx5_0`, `mlx5_0:2` for a second port) or the interface (`ens5`)."""
    interface: str
    """The kernel interface the port carries IP on (`ibp26s0`, `ens108np0`); empty if none."""
    pci_address: str
    link_layer: str
    """`Ethernet` or `InfiniBand`."""
    speed_mbps: int
    """The negotiated speed; 0 when the link is down or the driver does not say."""
    rdma: bool
    up: bool
    roce_v2_gids: tuple[str, ...]
    """The port's RoCE v2 GIDs (the routable ones NCCL picks); empty on InfiniBand."""
    place: PciePlace | None

    @property
    def numa_node(self) -> int | None:
        return self.place.numa_node if self.place else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _pci_of(entry: Path) -> str:
    """The PCI address a class entry's `device` link leads to; empty for a virtual one."""
    try:
        real = (entry / "device").resolve(strict=True)
    except OSError:
        return ""
    return pci_address(real.name) if ":" in real.name else ""


def _rate_mbps(text: str) -> int:
    """`400 Gb/sec (4X NDR)` in Mb/s."""
    match = _RATE.match(text)
    return round(float(match.group(1)) * 1000) if match else 0


def _speed_mbps(text: str) -> int:
    # The kernel says -1 (or refuses the read) while the link is down.
    return int(text) if text.isdigit() else 0


def _roce_v2_gids(port: Path) -> tuple[str, ...]:
    gids = []
    for entry in _entries(port / "gids"):
        gid = _read(entry)
        if not gid or _EMPTY_GID.fullmatch(gid):
            continue
        if _read(port / "gid_attrs" / "types" / entry.name) == ROCE_V2:
            gids.append(gid)
    return tuple(dict.fromkeys(gids))


def _port_interface(device: Path, port: Path) -> str:
    """The interface a port carries IP on: the one its GIDs name, else the only one the PCI
    function has."""
    for entry in _entries(port / "gid_attrs" / "ndevs"):
        name = _read(entry)
        if name:
            return name
    names = [entry.name for entry in _entries(device / "device" / "net")]
    return names[0] if len(names) == 1 else ""


def network_cards(root: Path) -> list[NetworkCard]:
    """Every physical network port under the sysfs `root`, RDMA ports first, by name."""
    found: list[NetworkCard] = []
    covered: set[str] = set()
    for device in _entries(root / "sys" / "class" / "infiniband"):
        address = _pci_of(device)
        if not address:
            continue
        place = pcie_place(root, address)
        ports = _entries(device / "ports")
        for port in ports:
            name = device.name if len(ports) == 1 else f"{device.name}:{port.name}"
            layer = _read(port / "link_layer") or INFINIBAND
            interface = _port_interface(device, port)
            covered.add(interface)
            found.append(
                NetworkCard(
                    name=name,
                    interface=interface,
                    pci_address=address,
                    link_layer=layer,
                    speed_mbps=_rate_mbps(_read(port / "rate")),
                    rdma=True,
                    up=_read(port / "state").endswith("ACTIVE"),
                    roce_v2_gids=_roce_v2_gids(port) if layer == ETHERNET else (),
                    place=place,
                )
            )
    plain: list[NetworkCard] = []
    for entry in _entries(root / "sys" / "class" / "net"):
        address = _pci_of(entry)
        if not address or entry.name in covered:
            continue
        kind = _read(entry / "type")
        if kind not in LINK_LAYERS:
            continue  # neither Ethernet nor InfiniBand (CAN, WWAN, ...)
        plain.append(
            NetworkCard(
                name=entry.name,
                interface=entry.name,
                pci_address=address,
                link_layer=LINK_LAYERS[kind],
                speed_mbps=_speed_mbps(_read(entry / "speed")),
                rdma=False,
                up=_read(entry / "operstate") == "up",
                roce_v2_gids=(),
                place=pcie_place(root, address),
            )
        )
    return sorted(found, key=lambda nic: nic.name) + sorted(plain, key=lambda nic: nic.name)


def cards_by_link(nic: NetworkCard, cards: Mapping[str, PciePlace | None]) -> dict[Link, list[str]]:
    """The cards (by identifier) at each link class from `nic`, best class first; a card or a
    NIC whose place is unknown is left out rather than guessed."""
    grouped: dict[Link, list[str]] = {}
    if nic.place is None:
        return grouped
    for card, place in sorted(cards.items()):
        if place is not None and place.address != nic.pci_address:
            grouped.setdefault(pcie_link(nic.place, place), []).append(card)
    return dict(sorted(grouped.items()))


def render_network(
    nics: Iterable[NetworkCard], cards: Mapping[str, PciePlace | None]
) -> list[dict[str, object]]:
    """`spec.interfaces` of the Devices object: each NIC, and the cards by link class from it."""
    rendered: list[dict[str, object]] = []
    for nic in nics:
        entry: dict[str, object] = {
            "name": nic.name,
            "pciAddress": nic.pci_address,
            "linkLayer": nic.link_layer,
            "speedMbps": nic.speed_mbps,
            "rdma": nic.rdma,
            "up": nic.up,
        }
        if nic.interface:
            entry["interface"] = nic.interface
        if nic.roce_v2_gids:
            entry["roceV2Gids"] = list(nic.roce_v2_gids)
        if nic.numa_node is not None:
            entry["numaNode"] = nic.numa_node
        links = cards_by_link(nic, cards)
        if links:
            entry["cards"] = [
                {"link": LINK_NAMES[link], "cards": names} for link, names in links.items()
            ]
        rendered.append(entry)
    return rendered


@dataclass(frozen=True)
class NodeNetwork:
    """One reading of the node's network cards and of where every PCI function sits: enough to
    render `spec.interfaces` for whichever cards the Devices object lists."""

    nics: tuple[NetworkCard, ...] = ()
    places: Mapping[str, PciePlace | None] = field(default_factory=dict)
    """PCI address -> its place on the PCIe tree, for every function on the bus."""

    @property
    def rdma_capable(self) -> bool:
        """At least one RDMA port is up: what `feature.gpustack.ai/rdma.capable` says."""
        return any(nic.rdma and nic.up for nic in self.nics)

    def render(self, card_addresses: Iterable[str]) -> list[dict[str, object]]:
        """`spec.interfaces`, each NIC's cards named by their PCI addresses."""
        cards = {address: self.places.get(address) for address in card_addresses}
        return render_network(self.nics, cards)


def read_network(root: Path) -> NodeNetwork:
    """The network cards and the PCIe places under the sysfs `root` (the host's is `/`)."""
    places = {
        entry.name: pcie_place(root, entry.name)
        for entry in _entries(root / "sys" / "bus" / "pci" / "devices")
    }
    return NodeNetwork(tuple(network_cards(root)), places)
