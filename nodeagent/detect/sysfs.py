"""What the kernel's sysfs says about PCI devices: the pre-check and card topology.

Driver libraries answer "which cards does the driver see"; sysfs answers "which cards are on the
bus" without loading anything, so a node without a manufacturer's hardware never touches that
manufacturer's library (some hang or log loudly when no device exists). sysfs also holds what the
driver does not report: the NUMA node of a card and the CPUs of that node (see `_numa_of` for a
card the firmware places on no node).

The root is injectable so tests and the simulated backend use a fake tree:
`<root>/sys/bus/pci/devices/<address>/{vendor,class,numa_node}` (entries usually links into
`<root>/sys/devices/pci<domain>:<bus>/...`), `<root>/sys/devices/system/node/node<N>/cpulist`, and
`<root>/proc/sys/kernel/osrelease`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chain.devices import DeviceTopology

_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


@dataclass(frozen=True)
class PciDevice:
    address: str
    """`0000:04:00.0`."""
    vendor: str
    """Four lowercase hex digits, no `0x` (`10de`)."""
    device_class: str
    """Six lowercase hex digits, no `0x` (`030200`)."""


def pci_address(bus_id: str) -> str:
    """A bus id in sysfs spelling: NVML's `00000000:04:00.0` becomes `0000:04:00.0`.

    Anything that is not a bus id comes back lowercased and otherwise untouched.
    """
    match = _BUS_ID.fullmatch(bus_id.strip())
    if match is None:
        return bus_id.strip().lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function}"


def _hex(text: str) -> str:
    return text.strip().lower().removeprefix("0x")


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers in the kernel's cpulist spelling: {0, 1, 2, 3, 8} becomes `0-3,8`."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in runs)


def listed_numbers(ranges: str) -> tuple[int, ...]:
    """The numbers of a kernel list (`0-3,8`: CPUs in a cpulist, nodes in a NUMA affinity);
    parts that are neither numbers nor ranges are skipped."""
    numbers: list[int] = []
    for part in ranges.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            numbers.extend(range(int(low), int(high or low) + 1))
    return tuple(numbers)


class Sysfs:
    """Read-only view of one sysfs tree (the host's is `Sysfs("/")`)."""

    def __init__(self, root: Path | str = "/") -> None:
        self.root = Path(root)

    @property
    def _pci_devices(self) -> Path:
        return self.root / "sys" / "bus" / "pci" / "devices"

    def _read(self, path: Path) -> str:
        try:
            return path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return ""

    def pci_devices(self) -> list[PciDevice]:
        """Every PCI function on the bus, by address; empty when sysfs cannot be read."""
        try:
            entries = sorted(self._pci_devices.iterdir())
        except OSError:
            return []
        found = []
        for entry in entries:
            vendor = _hex(self._read(entry / "vendor"))
            if vendor:
                found.append(PciDevice(entry.name, vendor, _hex(self._read(entry / "class"))))
        return found

    def has_device(self, vendor: str, class_prefixes: Iterable[str]) -> bool:
        """The pre-check: is some device of `vendor` with one of the classes on the bus?"""
        prefixes = tuple(prefix.lower() for prefix in class_prefixes)
        wanted = _hex(vendor)
        return any(
            device.vendor == wanted and device.device_class.startswith(prefixes)
            for device in self.pci_devices()
        )

    def is_wsl(self) -> bool:
        """WSL passes GPUs through without a PCI bus, so the pre-check would hide them."""
        release = self._read(self.root / "proc" / "sys" / "kernel" / "osrelease").lower()
        return "microsoft" in release or "wsl" in release

    def topology(self, bus_id: str) -> DeviceTopology:
        """Where a card sits: its address, root port, class, NUMA node and that node's CPUs."""
        address = pci_address(bus_id)
        device = self._pci_devices / address
        numa, cpus = self._numa_of(device)
        return DeviceTopology(
            pci_bus_id=address,
            pci_root_id=self._root_port(device, address),
            pci_class=_hex(self._read(device / "class")),
            numa_affinity=numa,
            cpu_affinity=cpus,
        )

    def numa_nodes(self) -> dict[int, str]:
        """The host's NUMA nodes and each one's CPU list; empty on a kernel without NUMA."""
        try:
            entries = sorted(self._nodes.iterdir())
        except OSError:
            return {}
        found = {}
        for entry in entries:
            number = entry.name.removeprefix("node")
            if entry.name.startswith("node") and number.isdigit():
                found[int(number)] = self._read(entry / "cpulist")
        return found

    @property
    def _nodes(self) -> Path:
        return self.root / "sys" / "devices" / "system" / "node"

    def _numa_of(self, device: Path) -> tuple[str, str]:
        """A device's NUMA node and that node's CPUs; ("", "") where nothing says which node.

        The kernel writes -1 (`NUMA_NO_NODE`) when the platform's firmware names no node for
        the device, as in most VMs. On a host with a single node that node holds every CPU and
        every device, so it is the device's node (nvidia-smi's `topo -m` says the same); on a
        host with several nodes the device's node is unknown, and guessing one would mislead
        the kubelet's Topology Manager, which treats a device without NUMA as "no preference".
        A missing file means the device (or NUMA support) is not there: nothing either.
        """
        numa = self._read(device / "numa_node")
        if numa.isdigit():
            return numa, self._read(self._nodes / f"node{numa}" / "cpulist")
        if numa == "-1":
            nodes = self.numa_nodes()
            if len(nodes) == 1:
                ((only, cpus),) = nodes.items()
                return str(only), cpus
        return "", ""

    def _root_port(self, device: Path, address: str) -> str:
        """The first PCI function below the host bridge on the way to the device.

        Cards under one root port share its bandwidth to the CPU; a card plugged straight into
        the root complex is its own root. Empty when the device is not in the tree.
        """
        try:
            real = device.resolve(strict=True)
        except OSError:
            return ""
        chain = [part for part in real.parts if _ADDRESS.fullmatch(part)]
        return chain[0] if chain else address
