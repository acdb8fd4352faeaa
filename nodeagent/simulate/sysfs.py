"""A fake sysfs tree for a simulated node, so the PCI pre-check and topology run for real.

Laid out like the kernel's: devices under their host bridge (`sys/devices/pci<dom>:<bus>/...`,
behind a root port unless on bus 0), relative links from `sys/bus/pci/devices/`, the NUMA nodes'
CPU lists, and a network card of another vendor that the pre-check must skip.

`pci_functions` is the one list of what a profile's PCI bus holds, with the attributes the
kernel shows for each function (the ones nfd-worker's pci source reads among them); the testbed
lays the same list out as a real node's `/sys/bus/pci/devices` (testbed/realnode.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from nodeagent.detect.sysfs import Sysfs, pci_address
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import Profile

DISPLAY_3D_CLASS = "0x030200"
"""Data-centre GPUs enumerate as 3D controllers (no display output)."""
OTHER_DEVICE = ("0000:00:05.0", "0x1d0f", "0x020000")
"""An Ethernet controller (AWS ENA) that shares the bus."""
OTHER_DEVICE_ID = "0xec20"
KERNEL_RELEASE = "6.8.0-1021-aws"


def _device_dir(sys: Path, address: str) -> Path:
    domain, bus, _ = address.split(":")
    if bus == "00":
        return sys / "devices" / f"pci{domain}:00" / address
    # Each group of 16 buses hangs off one root port on its own host bridge.
    root_bus = f"{int(bus, 16) & 0xF0:02x}"
    bridge = sys / "devices" / f"pci{domain}:{root_bus}"
    return bridge / f"{domain}:{root_bus}:01.0" / address


def _add_device(sys: Path, address: str, files: dict[str, str]) -> None:
    real = _device_dir(sys, address)
    real.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (real / name).write_text(value + "\n", encoding="ascii")
    link = sys / "bus" / "pci" / "devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("../../..") / real.relative_to(sys))


def pci_functions(profile: Profile, vendor: str) -> dict[str, dict[str, str]]:
    """PCI address -> the attribute files of that function: every card of the profile (of PCI
    vendor `vendor`, `0x<id>`), and the network card of another vendor."""
    address, other_vendor, device_class = OTHER_DEVICE
    functions = {
        address: {
            "vendor": other_vendor,
            "device": OTHER_DEVICE_ID,
            "subsystem_vendor": other_vendor,
            "subsystem_device": OTHER_DEVICE_ID,
            "class": device_class,
            "numa_node": "-1",
        }
    }
    for card in profile.cards:
        functions[pci_address(card.bus_id)] = {
            "vendor": vendor,
            "device": card.model.pci_device,
            "subsystem_vendor": vendor,
            "subsystem_device": card.model.pci_subsystem_device,
            "class": DISPLAY_3D_CLASS,
            "numa_node": str(card.numa_node),
        }
    return functions


def write_sysfs(profile: Profile, root: Path, vendor: str) -> Sysfs:
    """Write the profile's tree (its cards of PCI vendor `vendor`) under `root` and return a
    reader for it."""
    sys = root / "sys"
    for address, files in pci_functions(profile, vendor).items():
        _add_device(sys, address, files)
    for node, cpus in (profile.numa or {}).items():
        folder = sys / "devices" / "system" / "node" / f"node{node}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpulist").write_text(cpus + "\n", encoding="ascii")
    release = root / "proc" / "sys" / "kernel" / "osrelease"
    release.parent.mkdir(parents=True, exist_ok=True)
    release.write_text(KERNEL_RELEASE + "\n", encoding="ascii")
    return Sysfs(root)


@contextmanager
def simulated_node(profile: Profile, vendor: str) -> Iterator[tuple[SimulatedNvml, Sysfs]]:
    """A simulated NVML and a throwaway sysfs tree for `profile` (its cards of PCI vendor
    `vendor`), removed on exit."""
    with tempfile.TemporaryDirectory(prefix="gpustack-sim-") as folder:
        yield SimulatedNvml(profile), write_sysfs(profile, Path(folder), vendor)


def write_pci_sysfs(
    root: Path,
    vendor: str,
    device_class: str,
    cards: Iterable[tuple[str, int]],
    numa: Mapping[int, str] | None,
) -> Sysfs:
    """Cards `(bus id, NUMA node)` of `vendor` on the PCI bus, and the NUMA nodes' CPU lists."""
    for bus, node in cards:
        device = root / "sys/bus/pci/devices" / bus
        device.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", vendor), ("class", device_class), ("numa_node", str(node))):
            (device / name).write_text(value + "\n", encoding="ascii")
    for node, cpus in (numa or {}).items():
        folder = root / "sys/devices/system/node" / f"node{node}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpulist").write_text(cpus + "\n", encoding="ascii")
    return Sysfs(root)
