"""The PCIe places and link classes read from sysfs, the network cards, and the simulated hosts
that carry them (docs/topology.md, "Network cards")."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from chain.manufacturers import manufacturers
from chain.settings import StartupEnv
from nodeagent.detect.base import DetectorSetup
from nodeagent.detect.sysfs import pci_address
from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.host import simulated_host
from nodeagent.simulate.nvml import Handle, SimulatedNvml
from nodeagent.simulate.profile import parse_profile
from nodeagent.simulate.sysfs import write_sysfs
from nodeagent.topology.links import Link
from nodeagent.topology.nics import network_cards, render_network
from nodeagent.topology.node import fabric_pairs, node_links, read_node_links
from nodeagent.topology.pcie import PciePlace, link_matrix, pcie_link, pcie_place
from nodeagent.vendors.nvidia.links import nvlink_pairs
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR, load_profile


def _device(root: Path, chain: str, numa: int = -1) -> None:
    """A PCI function at `sys/devices/<chain>` with its `sys/bus/pci/devices` link."""
    real = root / "sys" / "devices" / chain
    real.mkdir(parents=True)
    (real / "numa_node").write_text(f"{numa}\n", encoding="ascii")
    link = root / "sys" / "bus" / "pci" / "devices" / real.name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("../../..") / real.relative_to(root / "sys"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """One socket with two host bridges; under the first a switch with two downstream ports,
    one of which leads to a second switch; a device on its own root port; a device in the root
    complex. A second socket with one device."""
    rp, up, down = "pci0000:10/0000:10:02.0", "0000:11:00.0", "0000:12"
    _device(tmp_path, f"{rp}/{up}/{down}:00.0/0000:1a:00.0", 0)
    _device(tmp_path, f"{rp}/{up}/{down}:01.0/0000:1b:00.0", 0)
    _device(tmp_path, f"{rp}/{up}/{down}:02.0/0000:13:00.0/0000:14:00.0/0000:1c:00.0", 0)
    _device(tmp_path, f"{rp}/{up}/{down}:02.0/0000:13:00.0/0000:14:01.0/0000:1d:00.0", 0)
    _device(tmp_path, "pci0000:10/0000:10:03.0/0000:1e:00.0", 0)
    _device(tmp_path, "pci0000:10/0000:10:05.0", 0)
    _device(tmp_path, "pci0000:30/0000:30:01.0/0000:3a:00.0", 0)
    _device(tmp_path, "pci0000:90/0000:90:01.0/0000:9a:00.0", 1)
    _device(tmp_path, "pci0000:b0/0000:b0:01.0/0000:ba:00.0")
    return tmp_path


def _place(root: Path, address: str) -> PciePlace:
    place = pcie_place(root, address)
    assert place is not None
    return place


def test_a_place_is_the_host_bridge_the_bridges_and_the_numa_node(tree: Path) -> None:
    assert pcie_place(tree, "00000000:1C:00.0") == PciePlace(
        "0000:1c:00.0",
        "pci0000:10",
        ("0000:10:02.0", "0000:11:00.0", "0000:12:02.0", "0000:13:00.0", "0000:14:00.0"),
        0,
    )
    assert _place(tree, "0000:10:05.0").bridges == ()
    assert _place(tree, "0000:ba:00.0").numa_node is None
    assert pcie_place(tree, "0000:77:00.0") is None


@pytest.mark.parametrize(
    ("a", "b", "link"),
    [
        ("0000:1a:00.0", "0000:1b:00.0", Link.PCIE_SWITCH),  # two ports of one switch
        ("0000:1c:00.0", "0000:1d:00.0", Link.PCIE_SWITCH),  # the inner switch
        ("0000:1a:00.0", "0000:1c:00.0", Link.PCIE_SWITCHES),  # through both switches
        ("0000:1a:00.0", "0000:1e:00.0", Link.HOST_BRIDGE),  # another root port
        ("0000:1a:00.0", "0000:10:05.0", Link.HOST_BRIDGE),  # the root complex itself
        ("0000:1a:00.0", "0000:3a:00.0", Link.NUMA_NODE),  # another host bridge, one socket
        ("0000:1a:00.0", "0000:9a:00.0", Link.SYSTEM),  # the other socket
        ("0000:9a:00.0", "0000:ba:00.0", Link.NUMA_NODE),  # no NUMA node known for one
    ],
)
def test_every_pair_gets_the_class_nvidia_smi_would_print(
    tree: Path, a: str, b: str, link: Link
) -> None:
    assert pcie_link(_place(tree, a), _place(tree, b)) == link
    assert pcie_link(_place(tree, b), _place(tree, a)) == link


def test_a_device_has_no_link_to_itself(tree: Path) -> None:
    with pytest.raises(ValueError, match=r"0000:1a:00\.0"):
        pcie_link(_place(tree, "0000:1a:00.0"), _place(tree, "0000:1a:00.0"))


def test_the_matrix_puts_a_direct_fabric_above_pcie_and_leaves_the_unknown_at_sys(
    tree: Path,
) -> None:
    cards = {
        "0": _place(tree, "0000:1a:00.0"),
        "1": _place(tree, "0000:1b:00.0"),
        "2": _place(tree, "0000:9a:00.0"),
        "3": None,
    }
    matrix = link_matrix(cards, {"mlx5_0": _place(tree, "0000:1c:00.0")}, [("2", "0")])
    assert matrix.link("0", "1") == Link.PCIE_SWITCH
    assert matrix.link("2", "0") == Link.DIRECT
    assert matrix.link("1", "2") == Link.SYSTEM
    assert matrix.link("3", "0") == Link.SYSTEM and ("0", "3") not in matrix.between
    assert matrix.nics["0"] == {"mlx5_0": Link.PCIE_SWITCHES}
    assert matrix.nearest_nics("2") == ["mlx5_0"] and "3" not in matrix.nics


def _host(tmp_path: Path, name: str) -> tuple[Path, dict[str, PciePlace | None]]:
    profile = load_profile(name)
    write_sysfs(profile, tmp_path, PCI_VENDOR)
    cards = {pci_address(c.bus_id): pcie_place(tmp_path, c.bus_id) for c in profile.cards}
    return tmp_path, cards


def test_the_hgx_host_has_eight_infiniband_ports_each_beside_a_card_pair(tmp_path: Path) -> None:
    root, cards = _host(tmp_path, "h100-80gb-x8-rdma")
    nics = network_cards(root)
    assert [nic.name for nic in nics] == [f"mlx5_{n}" for n in range(8)] + ["eno1"]
    first = nics[0]
    assert (first.interface, first.pci_address, first.link_layer) == (
        "ibp28s0",
        "0000:1c:00.0",
        "InfiniBand",
    )
    assert (first.speed_mbps, first.rdma, first.up, first.numa_node) == (400000, True, True, 0)
    assert first.roce_v2_gids == ()  # InfiniBand addresses by LID and GUID, not RoCE
    rendered = render_network(nics, cards)
    assert rendered[6]["cards"] == [
        {"link": "PIX", "cards": ["0000:ba:00.0", "0000:bb:00.0"]},
        {"link": "NODE", "cards": ["0000:9a:00.0", "0000:9b:00.0"]},
        {"link": "SYS", "cards": ["0000:1a:00.0", "0000:1b:00.0", "0000:3a:00.0", "0000:3b:00.0"]},
    ]
    assert rendered[8]["rdma"] is False and rendered[8]["linkLayer"] == "Ethernet"


def test_the_pcie_only_host_has_roce_ports_with_their_v2_gids(tmp_path: Path) -> None:
    root, cards = _host(tmp_path, "l4-x4-roce")
    nics = network_cards(root)
    assert [(nic.name, nic.interface, nic.link_layer, nic.rdma) for nic in nics] == [
        ("mlx5_0", "ens28f0np0", "Ethernet", True),
        ("mlx5_1", "ens156f0np0", "Ethernet", True),
    ]
    # The v1 entries and the unused (all-zero) slot are left out; the IPv4-mapped GID is there.
    assert nics[0].roce_v2_gids == (
        "fe80:0000:0000:0000:0001:c000:0000:0001",
        "0000:0000:0000:0000:0000:ffff:0a0a:000b",
    )
    places = {key: place for key, place in cards.items() if place is not None}
    matrix = link_matrix(places, {nic.name: nic.place for nic in nics})
    assert matrix.link("0000:1a:00.0", "0000:1b:00.0") == Link.PCIE_SWITCH
    assert matrix.link("0000:1a:00.0", "0000:9a:00.0") == Link.SYSTEM
    assert matrix.nearest_nics("0000:9b:00.0") == ["mlx5_1", "mlx5_0"]


def test_the_ethernet_host_has_no_rdma_and_no_virtual_interface(tmp_path: Path) -> None:
    root, cards = _host(tmp_path, "t4x4-ethernet")
    assert (root / "sys/class/net/lo").is_dir()
    [nic] = network_cards(root)
    assert (nic.name, nic.rdma, nic.speed_mbps, nic.roce_v2_gids) == ("ens6", False, 25000, ())
    assert render_network([nic], cards)[0]["cards"] == [
        {"link": "PHB", "cards": sorted(cards)},
    ]


def test_a_host_without_network_entries_writes_no_class_tree(tmp_path: Path) -> None:
    write_sysfs(load_profile("t4x4"), tmp_path, PCI_VENDOR)
    assert not (tmp_path / "sys/class").exists()
    assert network_cards(tmp_path) == []


def test_a_down_link_reads_as_speed_zero(tmp_path: Path) -> None:
    root, _ = _host(tmp_path, "t4x4-ethernet")
    (root / "sys/class/net/ens6/speed").write_text("-1\n", encoding="ascii")
    (root / "sys/class/net/ens6/operstate").write_text("down\n", encoding="ascii")
    [nic] = network_cards(root)
    assert (nic.speed_mbps, nic.up) == (0, False)


_BASE = {
    "models": {"m": {"name": "M", "memoryMib": 1}},
    "cards": [{"model": "m", "busId": "0000:1a:00.0", "switch": "s0"}],
}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"directLinks": [[0, 3]]}, r"directLinks\[0\]: no card 3"),
        ({"directLinks": [0]}, r"directLinks\[0\]: expected a list"),
        (
            {"network": [{"name": "mlx5_0", "busId": "0000:3c:00.0", "switch": "s0"}]},
            r"network\[0\]\.switch: switch 's0' is under the host bridge of buses 10-1f",
        ),
        (
            {"network": [{"name": "ib0", "busId": "0000:1c:00.0", "linkLayer": "InfiniBand"}]},
            r"network\[0\]\.rdma: an InfiniBand port is always an RDMA device",
        ),
        (
            {"network": [{"name": "e", "busId": "0000:1c:00.0", "linkLayer": "Token Ring"}]},
            r"network\[0\]\.linkLayer: expected one of Ethernet, InfiniBand",
        ),
        (
            {"network": [{"name": "e", "busId": "0000:1c:00.0", "rdma": True, "ip": "10.1"}]},
            r"network\[0\]\.ip: expected an IPv4 address",
        ),
        ({"network": [{"busId": "0000:1c:00.0"}]}, r"network\[0\]\.name"),
    ],
)
def test_a_bad_network_profile_names_the_field(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_profile("bad", {**_BASE, **extra})


def _setup(host: SimulatedHost) -> DetectorSetup:
    return DetectorSetup(manufacturers({}), StartupEnv(), host.sysfs, host.nvml, host.injected)


def test_nvml_reports_every_pair_of_an_nvswitch_board_and_the_matrix_ranks_it_first() -> None:
    with simulated_host("h100-80gb-x8-rdma") as host:
        setup = _setup(host)
        fabric = fabric_pairs(setup, ["nvidia", "amd"])
        profile = load_profile("h100-80gb-x8-rdma")
        cards = {str(n): card.bus_id for n, card in enumerate(profile.cards)}
        nics = network_cards(host.sysfs.root)
        matrix = node_links(host.sysfs, cards, nics, fabric)
    assert len(fabric) == 28 and ("0000:1a:00.0", "0000:bb:00.0") in fabric
    assert all(matrix.link(a, b) == Link.DIRECT for a, b in combinations(cards, 2))
    assert matrix.nearest_nics("4")[:2] == ["mlx5_4", "mlx5_5"]
    assert (
        matrix.nics["4"]["mlx5_6"] == Link.NUMA_NODE and matrix.nics["4"]["mlx5_0"] == Link.SYSTEM
    )


def test_a_pcie_only_board_reports_no_fabric_so_the_pcie_tree_decides() -> None:
    with simulated_host("l4-x4-roce") as host:
        fabric = fabric_pairs(_setup(host), ["nvidia"])
        cards = {str(n): c.bus_id for n, c in enumerate(load_profile("l4-x4-roce").cards)}
        matrix = node_links(host.sysfs, cards, network_cards(host.sysfs.root), fabric)
    assert fabric == []
    assert matrix.link("0", "1") == Link.PCIE_SWITCH and matrix.link("1", "2") == Link.SYSTEM
    assert matrix.nearest_nics("0") == ["mlx5_0", "mlx5_1"]


def test_the_real_node_testbeds_roce_host_puts_its_port_nearest_both_cards() -> None:
    """`l4x2-roce`, node-b of the real-node testbed: both cards and the port under one switch, so
    every grant there names `mlx5_0` (read in a container by tests/e2e/test_real_nodes_gangs.py)."""
    with simulated_host("l4x2-roce") as host:
        cards = {str(n): c.bus_id for n, c in enumerate(load_profile("l4x2-roce").cards)}
        matrix = node_links(host.sysfs, cards, network_cards(host.sysfs.root), [])
    assert matrix.link("0", "1") == Link.PCIE_SWITCH
    assert matrix.nearest_nics("0") == matrix.nearest_nics("1") == ["mlx5_0"]


def test_nvml_that_cannot_answer_gives_no_pair_rather_than_a_guess() -> None:
    profile = load_profile("h100-80gb-x8-rdma")
    nvml = SimulatedNvml(profile)
    assert len(nvlink_pairs(nvml)) == 28

    class Refusing(SimulatedNvml):
        def nvmlDeviceGetP2PStatus(self, first: object, second: object, index: int, /) -> int:
            raise self._error("NOT_SUPPORTED")

    class NoDriver(SimulatedNvml):
        def nvmlInit(self) -> None:
            raise self._error("DRIVER_NOT_LOADED")

    assert nvlink_pairs(Refusing(profile)) == []
    assert nvlink_pairs(NoDriver(profile)) == []
    with pytest.raises(Exception, match="Invalid Argument"):
        nvml.nvmlDeviceGetP2PStatus(Handle(0), Handle(0), nvml.NVML_P2P_CAPS_INDEX_NVLINK)


def test_a_plugin_reads_its_cards_links_and_the_rdma_ports_that_are_up() -> None:
    """What `nodeagent serve` passes a manufacturer's plugins (`read_node_links`): the matrix
    over that manufacturer's cards keyed by the plugin's card ids, and the RDMA ports NCCL may
    be told of; the Ethernet port is in the matrix but never an RDMA name."""
    with simulated_host("h100-80gb-x8-rdma") as host:
        profile = load_profile("h100-80gb-x8-rdma")
        cards = {f"GPU-{n}": card.bus_id for n, card in enumerate(profile.cards)}
        links = read_node_links(_setup(host), ["nvidia"], cards)
        ethernet = [nic.name for nic in network_cards(host.sysfs.root) if not nic.rdma]
    assert links.rdma == frozenset(f"mlx5_{n}" for n in range(8))
    assert ethernet and not set(ethernet) & links.rdma
    assert links.cards.link("GPU-0", "GPU-7") == Link.DIRECT
    assert links.rdma_for(["GPU-4"]) == ["mlx5_4", "mlx5_5"]
