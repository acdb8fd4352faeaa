"""One simulated host from a profile of any simulated manufacturer: what the detectors read
(sysfs, and the vendor library they would load) and the device nodes the plugin injects."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from nodeagent.detect.sysfs import Sysfs
from nodeagent.plugin.grants import DeviceNodes
from nodeagent.simulate.amd import SimulatedAmdSmi, parse_amd_profile, simulated_amd_node
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import parse_profile, profile_manufacturer, read_profile_file
from nodeagent.simulate.sysfs import simulated_node


@dataclass(frozen=True)
class SimulatedHost:
    sysfs: Sysfs
    nvml: SimulatedNvml | None = None
    amdsmi: SimulatedAmdSmi | None = None
    device_nodes: DeviceNodes | None = None
    """The `/dev` nodes Allocate checks and injects; None: the real host's."""


@contextmanager
def simulated_host(name_or_path: str) -> Iterator[SimulatedHost]:
    """The host a shipped profile name or a profile file describes, torn down on exit."""
    path, body = read_profile_file(name_or_path)
    maker = profile_manufacturer(body)
    try:
        if maker == "nvidia":
            nvidia = parse_profile(path.stem, body)
        elif maker == "amd":
            amd = parse_amd_profile(path.stem, body)
        else:
            raise ValueError(f"simulates {maker!r} hardware; simulated here: nvidia, amd")
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    if maker == "nvidia":
        with simulated_node(nvidia) as (nvml, sysfs):
            yield SimulatedHost(sysfs, nvml=nvml)
    else:
        with simulated_amd_node(amd) as (smi, sysfs):
            yield SimulatedHost(sysfs, amdsmi=smi, device_nodes=amd.device_nodes())
