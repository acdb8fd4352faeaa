"""The preferred-allocation benchmark's pure parts: its hosts are what their docstrings say, and
a short profile of one run measures both hints and prints the table."""

from __future__ import annotations

from benchmarks.preferred import HOSTS, Row, h100_nvlink_8, measure, node_of, pcie_16, report
from chain.allocation import PreferenceRequest, preferred_allocation
from chain.ledger import Mode
from nodeagent.topology.links import Link


def test_the_hosts_are_built_as_described() -> None:
    nvlink = h100_nvlink_8()
    assert {
        nvlink.links.cards.link(a, b) for a in nvlink.cards for b in nvlink.cards if a != b
    } == {Link.DIRECT}
    assert nvlink.links.nearest_rdma("card-03") == ["mlx5_3"]
    sixteen = pcie_16()
    links = sixteen.links.cards
    assert links.link("card-00", "card-01") == Link.DIRECT  # a bridged pair
    assert links.link("card-00", "card-02") == Link.PCIE_SWITCHES
    assert links.link("card-00", "card-04") == Link.NUMA_NODE
    assert links.link("card-00", "card-08") == Link.SYSTEM
    assert len(sixteen.links.rdma) == 4


def test_the_benchmark_node_offers_every_card_to_the_plain_hint() -> None:
    for make in HOSTS:
        host = make()
        spec, status, tokens = node_of(host)
        request = PreferenceRequest("nvidia", Mode.EXCLUSIVE, tokens, (), len(host.cards))
        assert len(preferred_allocation(spec, status, request, {})) == len(host.cards)


def test_a_short_profile_measures_both_hints_and_prints_the_table() -> None:
    row = measure(pcie_16(), 11, repeats=3)
    assert row.host == "16-card PCIe" and row.size == 11
    assert 0 < row.plain[0] <= row.plain[1] and 0 < row.chosen[0] <= row.chosen[1]
    assert 0 < row.chosen_cpu[0] <= row.chosen_cpu[1]
    assert report([row])[2].startswith("| 16-card PCIe | 11 |")
    lines = report(
        [
            Row("x", 2, (0.001, 0.002), (0.002, 0.006), (0.001, 0.003)),
            Row("y", 3, (1, 1), (1, 0.004), (1, 0.002)),
        ]
    )
    assert lines[2] == (
        "| x | 2 | 1.000 / 2.000 ms | 2.000 / 6.000 ms | 2.0 / 3.0 | 1.000 / 3.000 ms |"
    )
    assert lines[-1] == "worst best-connected p99: 6.00 ms, CPU 3.00 ms (goal: at most 5 ms)"
