"""Simulated NVIDIA hardware: a hardware profile answered through the NVML surface.

`load_profile("t4x4")` reads a shipped profile (or a file), `simulated_node(profile)` yields a
`SimulatedNvml` and a fake sysfs tree; hand both to `NvidiaDetector` and it runs unchanged.
"""

from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import Profile, load_profile, shipped_profiles
from nodeagent.simulate.sysfs import simulated_node, write_sysfs

__all__ = [
    "Profile",
    "SimulatedNvml",
    "load_profile",
    "shipped_profiles",
    "simulated_node",
    "write_sysfs",
]
