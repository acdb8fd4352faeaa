"""A simulated NVIDIA host: a hardware profile answered through the NVML surface
(`nodeagent.simulate`), whose MIG partitions are made in the object the detector reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from chain import fields
from chain.manufacturers import manufacturers
from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.base import SimulatedHost, Simulator
from nodeagent.simulate.profile import Profile, parse_profile, read_profile_file
from nodeagent.simulate.sysfs import simulated_node
from nodeagent.vendors.nvidia.detect import NVIDIA

PCI_VENDOR = f"0x{manufacturers({})[NVIDIA].pci_vendor}"
"""The vendor id a simulated card shows on the PCI bus (the built-in table's, `0x10de`)."""


def load_profile(name_or_path: str) -> Profile:
    """An NVIDIA profile: a shipped one by name (`t4x4`) or a profile file by path."""
    path, body = read_profile_file(name_or_path)
    maker = fields.string(body, "manufacturer", "$") or NVIDIA
    if maker != NVIDIA:
        raise ValueError(f"{path}: simulates {maker} hardware, not NVIDIA")
    try:
        return parse_profile(path.stem, body)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


@contextmanager
def _host(profile: Profile) -> Iterator[SimulatedHost]:
    with simulated_node(profile, PCI_VENDOR) as (nvml, sysfs):
        yield SimulatedHost(sysfs, nvml=nvml, partitions={NVIDIA: cast(MigNvml, nvml)})


SIMULATOR = Simulator(parse_profile, _host)
