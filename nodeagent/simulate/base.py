"""What a manufacturer's simulator hands the agent, and how it is asked for it.

A simulator (`Vendor.simulator`, nodeagent/vendors/interface.py) reads a profile of its
manufacturer and opens the host it describes; `nodeagent.simulate.host` picks the simulator by
the profile's `manufacturer:` through the registry, so this package names no manufacturer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from chain import fields
from nodeagent.detect.sysfs import Sysfs
from nodeagent.plugin.grants import DeviceNodes, Responder
from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.nvml import SimulatedNvml

P = TypeVar("P")


@dataclass(frozen=True)
class SimulatedHost:
    sysfs: Sysfs
    nvml: SimulatedNvml | None = None
    injected: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """A manufacturer's simulated library, as its detector's keywords (`DetectorSetup`)."""
    device_nodes: DeviceNodes | None = None
    """The `/dev` nodes Allocate checks and injects; None: the real host's."""
    partitions: Mapping[str, MigNvml] = field(default_factory=dict)
    """The NVML-shaped libraries this host's partitions are made through, by manufacturer: the
    simulator keeps its instances in the object the detector reads."""
    simulated_responders: Mapping[str, Responder] = field(default_factory=dict)
    """The responders that act on this host's simulated drivers instead of the real ones."""
    # The simulated drivers a test or the preflight reaches by name (each set by its
    # manufacturer's simulator, None on every other host).
    container_share: object | None = None
    """A simulated Ascend host's DCMI, whose container-share flag the Ascend responder reads
    and turns on (`ContainerShare`)."""
    sgpu: object | None = None
    """A simulated MetaX host's `sgpu` driver (`SgpuDriver`)."""
    smlu: object | None = None
    """A simulated Cambricon host's sMLU calls (`SmluDriver`)."""
    hgml: MigNvml | None = None
    """A simulated T-Head host's HGML partition calls, when a card is in MIG mode."""
    dmi: MigNvml | None = None
    """A simulated Hygon host's DMI partition calls, when its recording has a `dmi:` block."""

    def partition_libraries(self) -> dict[str, MigNvml]:
        return dict(self.partitions)

    def responders(self) -> dict[str, Responder]:
        return dict(self.simulated_responders)


HostOpener = Callable[[], AbstractContextManager[SimulatedHost]]


class HostSimulator(Protocol):
    """What `Vendor.simulator` is: reads a profile of its manufacturer (a ValueError names the
    field) and says how to open the host it describes."""

    def open(self, name: str, body: fields.Obj) -> HostOpener: ...


@dataclass(frozen=True)
class Simulator(Generic[P]):
    """A `HostSimulator` from a parser and a host: `parse` reads and checks a profile (a
    ValueError names the field), `host` opens the host the parsed profile describes and tears
    it down on exit."""

    parse: Callable[[str, fields.Obj], P]
    host: Callable[[P], AbstractContextManager[SimulatedHost]]

    def open(self, name: str, body: fields.Obj) -> HostOpener:
        """The profile `name` (its file's stem) checked now; its host opened by the caller."""
        parsed = self.parse(name, body)
        return lambda: self.host(parsed)
