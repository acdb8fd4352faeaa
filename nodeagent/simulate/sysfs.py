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
from nodeagent.simulate.mig import state_file_from_env
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import NetworkPort, Profile, host_bridge_of

DISPLAY_3D_CLASS = "0x030200"
"""Data-centre GPUs enumerate as 3D controllers (no display output)."""
OTHER_DEVICE = ("0000:00:05.0", "0x1d0f", "0x020000")
"""An Ethernet controller (AWS ENA) that shares the bus."""
OTHER_DEVICE_ID = "0xec20"
KERNEL_RELEASE = "6.8.0-1021-aws"
MELLANOX_VENDOR = "0x15b3"
NIC_DEVICE = {"InfiniBand": ("0x1021", "0x020700"), "Ethernet": ("0x101d", "0x020000")}
"""The PCI device ID and class of a simulated port by link layer: a ConnectX-7 as an InfiniBand
controller, a ConnectX-6 Dx as an Ethernet controller."""
ARPHRD = {"Ethernet": "1", "InfiniBand": "32"}
IB_RATE_NAMES = {400: "4X NDR", 200: "4X HDR", 100: "4X EDR", 50: "2X HDR", 25: "1X EDR"}

SwitchSlots = dict[str, tuple[int, int]]
"""PCI address -> (the switch's number on its host bridge, the downstream port's number)."""


def _device_dir(sys: Path, address: str, slot: tuple[int, int] | None = None) -> Path:
    domain, bus, _ = address.split(":")
    if bus == "00":
        return sys / "devices" / f"pci{domain}:00" / address
    # Each group of 16 buses hangs off one root port on its own host bridge.
    first = int(bus, 16) & 0xF0
    root_bus = f"{first:02x}"
    bridge = sys / "devices" / f"pci{domain}:{root_bus}"
    if slot is None:
        return bridge / f"{domain}:{root_bus}:01.0" / address
    # A switch: its own root port (02.0, 03.0, ...), its upstream port on the next bus, one
    # downstream port per device on the bus after that.
    switch, port = slot
    root_port = f"{domain}:{root_bus}:{switch + 2:02x}.0"
    upstream = f"{domain}:{first + 1 + 2 * switch:02x}:00.0"
    downstream = f"{domain}:{first + 2 + 2 * switch:02x}:{port:02x}.0"
    return bridge / root_port / upstream / downstream / address


def switch_slots(profile: Profile) -> SwitchSlots:
    """Where each device the profile puts under a switch plugs in: the switches numbered on
    their host bridge in the order the profile first names them, cards before network ports."""
    members: dict[str, list[str]] = {}
    for bus_id, switch in [(c.bus_id, c.switch) for c in profile.cards] + [
        (n.bus_id, n.switch) for n in profile.network
    ]:
        if switch:
            members.setdefault(switch, []).append(pci_address(bus_id))
    slots: SwitchSlots = {}
    per_bridge: dict[tuple[str, int], int] = {}
    for addresses in members.values():
        bridge = host_bridge_of(addresses[0])
        number = per_bridge.get(bridge, 0)
        per_bridge[bridge] = number + 1
        for port, address in enumerate(addresses):
            slots[address] = (number, port)
    return slots


def _add_device(
    sys: Path, address: str, files: dict[str, str], slot: tuple[int, int] | None = None
) -> None:
    real = _device_dir(sys, address, slot)
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
    for nic in profile.network:
        device, device_class = NIC_DEVICE[nic.link_layer]
        functions[pci_address(nic.bus_id)] = {
            "vendor": MELLANOX_VENDOR,
            "device": device,
            "subsystem_vendor": MELLANOX_VENDOR,
            "subsystem_device": "0x0000",
            "class": device_class,
            "numa_node": str(nic.numa_node),
        }
    return functions


def _write(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n", encoding="ascii")


def _class_link(sys: Path, kind: str, name: str, real: Path) -> None:
    """`sys/class/<kind>/<name>` as the kernel makes it: a relative link to the device's entry,
    whose `device` link leads back up to the PCI function (absent for a virtual one)."""
    link = sys / "class" / kind / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("../..") / real.relative_to(sys))


def _gid(ip: str) -> str:
    """The IPv4-mapped GID of a RoCE address (`::ffff:10.0.0.5`), as sysfs spells it."""
    a, b, c, d = (int(octet) for octet in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def _write_port(sys: Path, nic: NetworkPort, slot: tuple[int, int] | None) -> None:
    pci = _device_dir(sys, pci_address(nic.bus_id), slot)
    net = pci / "net" / nic.interface
    net.mkdir(parents=True, exist_ok=True)
    (net / "device").symlink_to(Path("../.."))
    _write(net / "type", ARPHRD[nic.link_layer])
    _write(net / "speed", str(nic.speed_mbps) if nic.speed_mbps else "-1")
    _write(net / "operstate", "up")
    _class_link(sys, "net", nic.interface, net)
    if not nic.rdma:
        return
    ib = pci / "infiniband" / nic.name
    ib.mkdir(parents=True)
    (ib / "device").symlink_to(Path("../.."))
    port = ib / "ports" / "1"
    gbps = nic.speed_mbps // 1000
    rate = f"{gbps} Gb/sec" + (f" ({IB_RATE_NAMES[gbps]})" if gbps in IB_RATE_NAMES else "")
    _write(port / "rate", rate)
    _write(port / "state", "4: ACTIVE")
    _write(port / "link_layer", nic.link_layer)
    tail = pci_address(nic.bus_id).replace(":", "").replace(".", "")[-8:]
    link_local = f"fe80:0000:0000:0000:{tail[:4]}:{tail[4:]}:0000:0001"
    gids = [(link_local, "IB/RoCE v1")]
    if nic.link_layer == "Ethernet":
        # The kernel lists each address twice, once per RoCE version.
        gids.append((link_local, "RoCE v2"))
        if nic.ip:
            gids += [(_gid(nic.ip), "IB/RoCE v1"), (_gid(nic.ip), "RoCE v2")]
    for index, (gid, kind) in enumerate(gids):
        _write(port / "gids" / str(index), gid)
        _write(port / "gid_attrs" / "types" / str(index), kind)
        if nic.link_layer == "Ethernet":
            _write(port / "gid_attrs" / "ndevs" / str(index), nic.interface)
    # An unused slot of the table reads as zeros.
    _write(port / "gids" / str(len(gids)), ":".join(["0000"] * 8))
    _class_link(sys, "infiniband", nic.name, ib)


def _write_network(sys: Path, profile: Profile, slots: SwitchSlots) -> None:
    for nic in profile.network:
        _write_port(sys, nic, slots.get(pci_address(nic.bus_id)))
    # The loopback interface: virtual, no `device` link, never a network card.
    loopback = sys / "devices" / "virtual" / "net" / "lo"
    _write(loopback / "type", "772")
    _write(loopback / "operstate", "unknown")
    _class_link(sys, "net", "lo", loopback)


def write_sysfs(profile: Profile, root: Path, vendor: str) -> Sysfs:
    """Write the profile's tree (its cards of PCI vendor `vendor`) under `root` and return a
    reader for it."""
    sys = root / "sys"
    slots = switch_slots(profile)
    for address, files in pci_functions(profile, vendor).items():
        _add_device(sys, address, files, slots.get(address))
    if profile.network:
        _write_network(sys, profile, slots)
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
    `vendor`), removed on exit; the NVML keeps its MIG instances in the state file the
    environment names, if it names one (`nodeagent.simulate.mig.STATE_ENV`)."""
    with tempfile.TemporaryDirectory(prefix="gpustack-sim-") as folder:
        nvml = SimulatedNvml(profile, state_file_from_env())
        yield nvml, write_sysfs(profile, Path(folder), vendor)


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
