"""The workload plugin's hint names the best-connected cards the node's links know of, and its
grant names the RDMA devices nearest the granted cards; a grant the kubelet did not take from the
hint is still exactly what was asked."""

from __future__ import annotations

from benchmarks.preferred import h100_nvlink_8, pcie_8
from chain.allocation import token_card
from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from nodeagent.plugin.allocator import Allocator, Attempt
from nodeagent.plugin.grants import NCCL_IB_HCA
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import plugin_servers
from nodeagent.topology.choice import UNKNOWN_LINKS, NodeLinks
from tests.unit.nodeagent.plugin.fakes import GPU, NVIDIA, FakeCluster, t4_spec

SPEC = DevicesSpec(t4_spec("h100-80gb-x8").groups)
IDS = [card.id for _, card in sorted(SPEC.cards(), key=lambda found: found[1].index)]


def allocator(cluster: FakeCluster, links: NodeLinks, mode: Mode = Mode.EXCLUSIVE) -> Allocator:
    return Allocator(NodeState(lambda: SPEC, cluster, cluster), NVIDIA, mode, links=links)


def indexes(tokens: list[str]) -> list[int]:
    return sorted(IDS.index(token_card(token)) for token in tokens)


def test_the_hint_keeps_a_pair_under_one_switch() -> None:
    """Card 0 is taken: packing would pair cards 1 and 2 across host bridges, the links pair
    cards 2 and 3 under one switch."""
    cluster = FakeCluster()
    cluster.add("pair", ("main", {GPU: "2"}))
    plain = allocator(cluster, UNKNOWN_LINKS)
    tokens = [a.id for a in plain.advertised() if token_card(a.id) != IDS[0]]
    assert indexes(plain.preferred(tokens, [], 2)) == [1, 2]
    linked = allocator(cluster, pcie_8(IDS).links)
    assert indexes(linked.preferred(tokens, [], 2)) == [2, 3]
    # The card kubelet must include (card 5) stays, its switch mate (card 4) joins it.
    assert indexes(linked.preferred(tokens, [tokens[4]], 2)) == [4, 5]


def test_a_grant_names_the_rdma_devices_nearest_its_cards() -> None:
    cluster = FakeCluster()
    cluster.add("pair", ("main", {GPU: "2"}))
    granting = allocator(cluster, h100_nvlink_8(IDS).links)
    tokens = [a.id for a in granting.advertised()]
    hint = granting.preferred(tokens, [], 2)
    response = granting.allocate(hint, Attempt(5.0))
    assert response.envs[NCCL_IB_HCA] == "=mlx5_0,mlx5_1"  # one beside each card


def test_a_grant_off_the_hint_is_exactly_what_was_asked() -> None:
    """The kubelet may ignore the hint: cards 1 and 6 (two switches, two sockets) are granted
    as asked, and the NICs named are theirs."""
    cluster = FakeCluster()
    cluster.add("pair", ("main", {GPU: "2"}))
    granting = allocator(cluster, h100_nvlink_8(IDS).links)
    tokens = [a.id for a in granting.advertised()]
    asked = [tokens[1], tokens[6]]
    assert indexes(granting.preferred(tokens, [], 2)) == [0, 1]  # not what is asked
    response = granting.allocate(asked, Attempt(5.0))
    [record] = parse_allocated(cluster.annotation("pair")).values()
    assert sorted(record.device_ids) == sorted(asked)
    assert response.envs[NCCL_IB_HCA] == "=mlx5_1,mlx5_6"


def test_without_known_rdma_devices_no_nic_is_named() -> None:
    for links in (UNKNOWN_LINKS, NodeLinks(h100_nvlink_8(IDS).links.cards, frozenset())):
        cluster = FakeCluster()
        cluster.add("pair", ("main", {GPU: "2"}))
        granting = allocator(cluster, links)
        tokens = [a.id for a in granting.advertised()]
        response = granting.allocate(granting.preferred(tokens, [], 2), Attempt(5.0))
        assert NCCL_IB_HCA not in response.envs


def test_a_slice_names_the_nic_nearest_its_card() -> None:
    cluster = FakeCluster()
    sliced = GPU + ".sliced"
    cluster.add(
        "slice",
        ("main", {sliced: "1", sliced + ".units": "800000", sliced + ".memory-percentage": "50"}),
    )
    granting = allocator(cluster, pcie_8(IDS).links, Mode.SLICED)
    tokens = [a.id for a in granting.advertised()]
    response = granting.allocate(granting.preferred(tokens, [], 1), Attempt(5.0))
    assert response.envs[NCCL_IB_HCA] == "=mlx5_0"


def test_the_servers_hand_the_links_to_the_workload_plugins() -> None:
    cluster = FakeCluster()
    links = pcie_8(IDS).links
    node = NodeState(lambda: SPEC, cluster, cluster)
    servers = plugin_servers(node, NVIDIA, "/nonexistent", links=links)
    given = {server.allocator.mode: server.allocator for server in servers}
    for mode in (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED):
        assert isinstance(given[mode], Allocator) and given[mode].links is links
    assert all(
        server.allocator.links is UNKNOWN_LINKS
        for server in plugin_servers(node, NVIDIA, "/x")
        if isinstance(server.allocator, Allocator)
    )
