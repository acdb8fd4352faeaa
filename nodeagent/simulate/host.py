"""One simulated host from a profile of any simulated manufacturer: what the detectors read
(sysfs, and the vendor library they would load) and the device nodes the plugin injects.

The profile's `manufacturer:` picks the simulator its package registers
(`nodeagent/vendors/registry.py`, `Vendor.simulator`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from chain import fields
from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.profile import read_profile_file
from nodeagent.vendors.registry import SIMULATED_WHEN_UNNAMED, SIMULATORS

__all__ = ["SimulatedHost", "profile_manufacturer", "simulated_host"]


def profile_manufacturer(body: fields.Obj) -> str:
    """Whose hardware a profile simulates: its `manufacturer:`, else the registry's
    `SIMULATED_WHEN_UNNAMED`."""
    return fields.string(body, "manufacturer", "$") or SIMULATED_WHEN_UNNAMED


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
