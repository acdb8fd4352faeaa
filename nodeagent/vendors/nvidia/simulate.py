"""A simulated NVIDIA host: a hardware profile answered through the NVML surface
(`nodeagent.simulate`), whose MIG partitions are made in the object the detector reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.base import SimulatedHost, Simulator
from nodeagent.simulate.profile import Profile, parse_profile
from nodeagent.simulate.sysfs import simulated_node
from nodeagent.vendors.nvidia.detect import NVIDIA


@contextmanager
def _host(profile: Profile) -> Iterator[SimulatedHost]:
    with simulated_node(profile) as (nvml, sysfs):
        yield SimulatedHost(sysfs, nvml=nvml, partitions={NVIDIA: cast(MigNvml, nvml)})


SIMULATOR = Simulator(parse_profile, _host)
