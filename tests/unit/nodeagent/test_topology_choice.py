"""The best-connected card set against a brute-force oracle over every subset: on random
matrices (hypothesis) and on the simulated hosts of benchmarks/preferred.py, built by hand."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.preferred import HOSTS, Host, h100_nvlink_8, pcie_8, pcie_16
from nodeagent.topology.choice import (
    NO_RDMA,
    UNKNOWN_LINKS,
    NodeLinks,
    best_connected,
    set_score,
)
from nodeagent.topology.links import CardLinks, Link


def oracle(
    ranked: Sequence[str], must: Sequence[str], size: int, links: NodeLinks
) -> tuple[str, ...]:
    """Every subset scored by the policy's rules, the packing order breaking the last tie."""
    candidates = [card for card in ranked if card not in must]
    scored = (
        (set_score((*must, *(candidates[n] for n in picks)), links), picks)
        for picks in itertools.combinations(range(len(candidates)), size - len(must))
    )
    _, best = min(scored)
    return (*must, *(candidates[n] for n in best))


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[str], tuple[str, ...], int, NodeLinks]:
    count = draw(st.integers(2, 10))
    cards = [f"c{n}" for n in range(count)]
    classes = st.sampled_from(list(Link))
    between = {
        pair: draw(classes)
        for pair in itertools.combinations(cards, 2)
        if draw(st.booleans()) or draw(st.booleans())  # mostly known, some left SYSTEM
    }
    nic_names = ["mlx5_0", "mlx5_1", "eth0"]
    nics = {
        card: {nic: draw(classes) for nic in nic_names if draw(st.booleans())} for card in cards
    }
    rdma = frozenset(draw(st.sets(st.sampled_from(nic_names[:2]))))
    ranked = draw(st.permutations(cards))
    must = tuple(draw(st.lists(st.sampled_from(cards), unique=True, max_size=min(3, count - 1))))
    size = draw(st.integers(len(must) + 1, count))
    return list(ranked), must, size, NodeLinks(CardLinks(tuple(cards), between, nics), rdma)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_the_choice_is_the_oracles_on_random_matrices(
    problem: tuple[list[str], tuple[str, ...], int, NodeLinks],
) -> None:
    ranked, must, size, links = problem
    assert best_connected(ranked, must, size, links) == oracle(ranked, must, size, links)


def host_orders(host: Host) -> list[list[str]]:
    """The enumeration order, its reverse, and two interleavings: a packing order need not
    follow the PCIe tree."""
    cards = list(host.cards)
    return [cards, cards[::-1], cards[::2] + cards[1::2], cards[1::3] + cards[::3] + cards[2::3]]


@pytest.mark.parametrize("make", HOSTS, ids=lambda make: make.__name__)
def test_the_choice_is_the_oracles_on_the_simulated_hosts(make: type[Host]) -> None:
    host = make()
    sizes, orders = range(2, len(host.cards) + 1), host_orders(host)
    if len(host.cards) > 8:  # up to C(16, 8) subsets per oracle call: sizes and orders sampled
        sizes, orders = range(3, len(host.cards) + 1, 5), orders[::2]
    for ranked in orders:
        for size in sizes:
            for must in ((), (ranked[-1],)):
                expected = oracle(ranked, must, size, host.links)
                assert best_connected(ranked, must, size, host.links) == expected, (size, must)


def test_an_unknown_matrix_answers_the_packing_order() -> None:
    ranked = [f"c{n}" for n in (3, 0, 2, 1, 4)]
    for size in range(1, 6):
        assert best_connected(ranked, (), size, UNKNOWN_LINKS) == tuple(ranked[:size])
    assert best_connected(ranked, ("c4",), 3, UNKNOWN_LINKS) == ("c4", "c3", "c0")


def test_nvlink_first_then_one_switch_then_one_socket() -> None:
    """A PCIe host with one NVLink bridge (cards 4 and 5), packing order by index."""
    pcie = pcie_8()
    between = dict(pcie.links.cards.between)
    between[("card-04", "card-05")] = Link.DIRECT
    links = NodeLinks(CardLinks(pcie.cards, between), frozenset())
    ranked = list(pcie.cards)
    assert best_connected(ranked, (), 2, links) == ("card-04", "card-05")
    # A third card: the worst link is a host bridge's peer on socket 1 at best, and the fabric
    # pair with it beats any two PIX cards with one more.
    assert best_connected(ranked, (), 3, links) == ("card-04", "card-05", "card-06")
    # Must include card 0: its switch mate before anything across the sockets.
    assert best_connected(ranked, ("card-00",), 2, links) == ("card-00", "card-01")
    assert best_connected(ranked, ("card-00",), 4, links) == (
        "card-00",
        "card-01",
        "card-02",
        "card-03",
    )


def test_cards_near_the_rdma_nic_first() -> None:
    """All eight on NVLink: only the NIC rule separates them. With mlx5_6 alone RDMA, card 6
    beside it and card 7 under the same upstream switch win, whatever the packing order says."""
    host = h100_nvlink_8()
    links = NodeLinks(host.links.cards, frozenset({"mlx5_6"}))
    assert best_connected(list(host.cards), (), 2, links) == ("card-06", "card-07")
    # A third from the socket's other upstream switch (cards 4 and 5 both reach mlx5_6 through
    # the host bridge): the packing order takes card 4; picks are listed in that order.
    assert best_connected(list(host.cards), (), 3, links) == ("card-04", "card-06", "card-07")
    # Every NIC RDMA: every card has one beside it, and the packing order decides.
    assert best_connected(list(host.cards), (), 2, host.links) == ("card-00", "card-01")


def test_the_sixteen_card_host_keeps_sets_in_one_bridge_and_one_socket() -> None:
    host = pcie_16()
    ranked = list(reversed(host.cards))
    # A bridged pair; of the last bridge's two, the one beside its NIC (mlx5_3), though the
    # packing order (reversed) would take cards 15 and 14.
    assert best_connected(ranked, (), 2, host.links) == ("card-13", "card-12")
    chosen = best_connected(ranked, (), 4, host.links)
    assert sorted(chosen) == ["card-12", "card-13", "card-14", "card-15"]
    eight = best_connected(ranked, (), 8, host.links)
    assert sorted(eight) == [f"card-{n:02d}" for n in range(8, 16)]
    assert set_score(eight, host.links)[0] == Link.NUMA_NODE


def test_nearest_rdma_names_every_nic_at_the_best_link() -> None:
    host = pcie_16()
    assert host.links.nearest_rdma("card-00") == ["mlx5_0"]
    assert host.links.rdma_for(["card-00", "card-05", "card-02"]) == ["mlx5_0", "mlx5_1"]
    assert host.links.rdma_reach("card-02") == Link.PCIE_SWITCHES
    assert UNKNOWN_LINKS.rdma_reach("card-00") == NO_RDMA
    assert UNKNOWN_LINKS.rdma_for(["card-00"]) == []
    # A NIC the matrix knows but that is no RDMA device is never named.
    plain = NodeLinks(host.links.cards, frozenset())
    assert plain.rdma_for(host.cards) == []


def test_a_search_out_of_budget_answers_a_valid_set() -> None:
    host = pcie_16()
    ranked = list(host.cards)[::-1]
    cut = best_connected(ranked, ("card-03",), 11, host.links, budget=1)
    assert len(cut) == 11 and cut[0] == "card-03" and len(set(cut)) == 11
    assert set(cut) <= set(host.cards)


def test_too_few_cards_is_an_error_naming_the_size() -> None:
    with pytest.raises(ValueError, match="size 4 asks more cards than the 3 offered"):
        best_connected(["a", "b"], ["c"], 4, UNKNOWN_LINKS)
    assert best_connected(["a", "b"], ["c", "a"], 2, UNKNOWN_LINKS) == ("c", "a")
