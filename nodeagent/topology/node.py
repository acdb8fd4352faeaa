"""One node's link matrix, from its sysfs and its manufacturers' fabric reports: what the device
plugin chooses card sets from (`CardLinks`), read locally, never published on the API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nodeagent.detect.base import DetectorSetup
from nodeagent.detect.sysfs import Sysfs, pci_address
from nodeagent.topology.choice import NodeLinks
from nodeagent.topology.links import CardLinks
from nodeagent.topology.nics import NetworkCard, read_network
from nodeagent.topology.pcie import link_matrix, pcie_place
from nodeagent.vendors.registry import DIRECT_LINKS


def fabric_pairs(setup: DetectorSetup, manufacturers: Iterable[str]) -> list[tuple[str, str]]:
    """The card pairs (PCI addresses) the libraries of `manufacturers` say share a fabric; a
    manufacturer that reports none contributes none."""
    pairs: set[tuple[str, str]] = set()
    for name in manufacturers:
        report = DIRECT_LINKS.get(name)
        if report is not None:
            pairs.update(report(setup))
    return sorted(pairs)


def node_links(
    sysfs: Sysfs,
    cards: Mapping[str, str],
    nics: Sequence[NetworkCard] = (),
    fabric: Iterable[tuple[str, str]] = (),
) -> CardLinks:
    """The matrix over `cards` (the plugin's identifier -> the card's PCI bus id, any spelling):
    the PCIe class of every pair from sysfs, DIRECT where `fabric` joins them, and each card's
    link to every network card."""
    by_address = {pci_address(bus_id): card for card, bus_id in cards.items()}
    direct = [
        (by_address[a], by_address[b]) for a, b in fabric if a in by_address and b in by_address
    ]
    places = {card: pcie_place(sysfs.root, bus_id) for card, bus_id in cards.items()}
    return link_matrix(places, {nic.name: nic.place for nic in nics}, direct)


def read_node_links(
    setup: DetectorSetup, manufacturers: Iterable[str], cards: Mapping[str, str]
) -> NodeLinks:
    """What one manufacturer's device plugin chooses from, read once when its server starts:
    the matrix over `cards` (the plugin's card id -> PCI bus id) with the node's network cards
    from sysfs and the fabric pairs the `manufacturers`' libraries report, and which network
    cards are RDMA devices (only a port that is up: NCCL cannot use one that is down)."""
    network = read_network(setup.sysfs.root)
    matrix = node_links(setup.sysfs, cards, network.nics, fabric_pairs(setup, manufacturers))
    return NodeLinks(matrix, frozenset(nic.name for nic in network.nics if nic.rdma and nic.up))
