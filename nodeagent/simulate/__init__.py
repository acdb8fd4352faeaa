"""Simulated hardware behind the surfaces the detectors read: profiles, an NVML-shaped library,
a fake sysfs, recorded libraries; each manufacturer's simulator (`Vendor.simulator`) builds its
host from these, and `simulated_host` picks the simulator a profile names.
"""

from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import Profile, shipped_profiles
from nodeagent.simulate.sysfs import simulated_node, write_sysfs

__all__ = [
    "Profile",
    "SimulatedNvml",
    "shipped_profiles",
    "simulated_node",
    "write_sysfs",
]
