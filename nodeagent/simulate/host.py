"""One simulated host from a profile of any simulated manufacturer: what the detectors read
(sysfs, and the vendor library they would load) and the device nodes the plugin injects.

The profile's `manufacturer:` picks the simulator its package registers
(`nodeagent/vendors/registry.py`, `Vendor.simulator`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.profile import profile_manufacturer, read_profile_file
from nodeagent.vendors.registry import SIMULATORS

__all__ = ["SimulatedHost", "simulated_host"]


@contextmanager
def simulated_host(name_or_path: str) -> Iterator[SimulatedHost]:
    """The host a shipped profile name or a profile file describes, torn down on exit."""
    path, body = read_profile_file(name_or_path)
    maker = profile_manufacturer(body)
    try:
        if maker not in SIMULATORS:
            simulated = ", ".join(SIMULATORS)
            raise ValueError(f"simulates {maker!r} hardware; simulated here: {simulated}")
        opener = SIMULATORS[maker].open(path.stem, body)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    with opener() as host:
        yield host
