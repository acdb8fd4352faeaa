"""The PCI pre-check and card topology on fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.settings import StartupEnv
from nodeagent.detect.sysfs import Sysfs, cpu_list, listed_numbers, pci_address
from nodeagent.simulate import write_sysfs
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR
from tests.unit.nodeagent.helpers import small_profile, write


def device(root: Path, address: str, vendor: str, device_class: str, numa: str = "-1") -> None:
    folder = root / "sys/bus/pci/devices" / address
    write(folder / "vendor", vendor)
    write(folder / "class", device_class)
    write(folder / "numa_node", numa)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    device(tmp_path, "0000:00:05.0", "0x1d0f", "0x020000")  # network card
    device(tmp_path, "0000:3b:00.0", "0x10de", "0x030200", "1")  # NVIDIA 3D controller
    device(tmp_path, "0000:5e:00.0", "0x1002", "0x038000", "0")  # AMD display controller
    device(tmp_path, "0000:00:1f.3", "0x10de", "0x040300")  # NVIDIA audio function
    write(tmp_path / "sys/devices/system/node/node0/cpulist", "0-15")
    write(tmp_path / "sys/devices/system/node/node1/cpulist", "16-31")
    return tmp_path


def test_pci_devices_are_read(tree: Path) -> None:
    found = {(d.address, d.vendor, d.device_class) for d in Sysfs(tree).pci_devices()}
    assert ("0000:3b:00.0", "10de", "030200") in found
    assert len(found) == 4


def test_vendor_and_class_prefixes(tree: Path) -> None:
    sysfs = Sysfs(tree)
    default = StartupEnv().pci_class_prefixes
    assert sysfs.has_device("10de", default)
    assert sysfs.has_device("0x1002", default)
    assert not sysfs.has_device("19e5", default)  # no Ascend here
    assert sysfs.has_device("10de", ("04",))  # the audio function, if one asks for it
    assert sysfs.has_device("1d0f", default)  # `02` (network) is a default class prefix


def test_an_audio_function_is_not_a_card(tmp_path: Path) -> None:
    device(tmp_path, "0000:00:1f.3", "0x10de", "0x040300")
    assert not Sysfs(tmp_path).has_device("10de", StartupEnv().pci_class_prefixes)


def test_class_prefixes_from_the_environment(tree: Path) -> None:
    env = StartupEnv.from_env({"GPUSTACK_PCI_CLASS_PREFIXES": "12, 0B"})
    assert env.pci_class_prefixes == ("12", "0b")
    assert not Sysfs(tree).has_device("10de", env.pci_class_prefixes)
    device(tree, "0000:af:00.0", "0x10de", "0x120000")  # a processing accelerator
    assert Sysfs(tree).has_device("10de", env.pci_class_prefixes)


def test_no_sysfs_means_no_devices(tmp_path: Path) -> None:
    assert Sysfs(tmp_path / "missing").pci_devices() == []
    assert not Sysfs(tmp_path).has_device("10de", ("03",))


def test_wsl_is_recognised(tmp_path: Path) -> None:
    assert not Sysfs(tmp_path).is_wsl()
    write(tmp_path / "proc/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2")
    assert Sysfs(tmp_path).is_wsl()


def test_topology(tree: Path) -> None:
    topology = Sysfs(tree).topology("00000000:3B:00.0")
    assert topology.pci_bus_id == "0000:3b:00.0"
    assert (topology.numa_affinity, topology.cpu_affinity) == ("1", "16-31")
    assert topology.pci_class == "030200"
    # Not a link into sys/devices: the device is its own root.
    assert topology.pci_root_id == "0000:3b:00.0"


def test_topology_without_numa_or_device(tree: Path) -> None:
    assert Sysfs(tree).topology("0000:00:05.0").numa_affinity == ""
    missing = Sysfs(tree).topology("0000:99:00.0")
    assert (missing.pci_bus_id, missing.pci_root_id, missing.numa_affinity) == (
        "0000:99:00.0",
        "",
        "",
    )


def test_no_numa_node_on_a_one_node_host_is_that_node(tmp_path: Path) -> None:
    # A VM whose firmware names no node (numa_node -1, as on the H200 of docs/nodeagent.md, "On
    # a real GPU"): with one node every CPU and device is in it, as `nvidia-smi topo -m` says.
    device(tmp_path, "0000:00:06.0", "0x10de", "0x030200")
    write(tmp_path / "sys/devices/system/node/node0/cpulist", "0-15")
    topology = Sysfs(tmp_path).topology("00000000:00:06.0")
    assert (topology.numa_affinity, topology.cpu_affinity) == ("0", "0-15")
    assert Sysfs(tmp_path).numa_nodes() == {0: "0-15"}


def test_no_numa_node_on_a_two_node_host_stays_unknown(tree: Path) -> None:
    topology = Sysfs(tree).topology("0000:00:05.0")
    assert (topology.numa_affinity, topology.cpu_affinity) == ("", "")
    assert Sysfs(tree).numa_nodes() == {0: "0-15", 1: "16-31"}


def test_no_numa_node_without_node_folders_stays_unknown(tmp_path: Path) -> None:
    # A kernel built without NUMA has no sys/devices/system/node: nothing to name.
    device(tmp_path, "0000:00:06.0", "0x10de", "0x030200")
    assert Sysfs(tmp_path).topology("0000:00:06.0").numa_affinity == ""
    assert Sysfs(tmp_path).numa_nodes() == {}


def test_a_device_not_on_the_bus_has_no_node_even_on_one_node(tmp_path: Path) -> None:
    write(tmp_path / "sys/devices/system/node/node0/cpulist", "0-15")
    assert Sysfs(tmp_path).topology("0000:99:00.0").numa_affinity == ""


@pytest.mark.parametrize(
    ("cpus", "spelled"),
    [((), ""), ((3,), "3"), ((0, 1, 2, 3, 8), "0-3,8"), ((9, 8, 8, 1, 0), "0-1,8-9")],
)
def test_cpu_list_spelling(cpus: tuple[int, ...], spelled: str) -> None:
    assert cpu_list(cpus) == spelled
    assert listed_numbers(spelled) == tuple(sorted(set(cpus)))


def test_root_port_through_links(tmp_path: Path) -> None:
    profile = small_profile(cards=[{"model": "t4", "busId": "00000000:3B:00.0", "numaNode": 0}])
    sysfs = write_sysfs(profile, tmp_path, PCI_VENDOR)
    assert sysfs.topology("0000:3b:00.0").pci_root_id == "0000:30:01.0"
    assert sysfs.topology("0000:00:05.0").pci_root_id == "0000:00:05.0"


@pytest.mark.parametrize(
    ("bus_id", "address"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.1", "0000:3b:00.1"),
        ("00000001:04:1F.7", "0001:04:1f.7"),
        ("not-a-bus-id", "not-a-bus-id"),
    ],
)
def test_pci_address(bus_id: str, address: str) -> None:
    assert pci_address(bus_id) == address
