"""The manufacturers the node agent knows: one line each (docs/adding-a-manufacturer.md).

The engine reads this list, never a manufacturer's package: the detector registry
(`nodeagent.detect.registry`), the responders (`nodeagent.plugin.responders`), the partition
makers and reclaimers (`nodeagent.plugin.running`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from nodeagent.plugin.mig import ProfileNaming
from nodeagent.simulate.base import HostSimulator
from nodeagent.staging import Staging
from nodeagent.vendors.amd.vendor import VENDOR as AMD
from nodeagent.vendors.ascend.vendor import VENDOR as ASCEND
from nodeagent.vendors.cambricon.vendor import VENDOR as CAMBRICON
from nodeagent.vendors.hygon.vendor import VENDOR as HYGON
from nodeagent.vendors.iluvatar.vendor import VENDOR as ILUVATAR
from nodeagent.vendors.interface import DirectLinks, Vendor
from nodeagent.vendors.metax.vendor import VENDOR as METAX
from nodeagent.vendors.mthreads.vendor import VENDOR as MTHREADS
from nodeagent.vendors.nvidia.vendor import VENDOR as NVIDIA
from nodeagent.vendors.thead.vendor import VENDOR as THEAD

T = TypeVar("T")

VENDORS: tuple[Vendor, ...] = (
    NVIDIA,
    AMD,
    ASCEND,
    CAMBRICON,
    HYGON,
    ILUVATAR,
    METAX,
    MTHREADS,
    THEAD,
)

SIMULATED_WHEN_UNNAMED = NVIDIA.name
"""Whose hardware a simulated profile without a `manufacturer:` describes: the NVML profiles
came before any other manufacturer's and name none."""


def vendor_named(name: str) -> Vendor | None:
    return next((vendor for vendor in VENDORS if vendor.name == name), None)


class ByManufacturer(Mapping[str, T]):
    """One part of every registered vendor, by manufacturer name; read from `VENDORS` on each
    access, so a manufacturer registered later (a test's) is seen like the nine."""

    def __init__(self, part: Callable[[Vendor], T | None]) -> None:
        self._part = part

    def _parts(self) -> dict[str, T]:
        parts = {vendor.name: self._part(vendor) for vendor in VENDORS}
        return {name: part for name, part in parts.items() if part is not None}

    def __getitem__(self, name: str) -> T:
        return self._parts()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts())

    def __len__(self) -> int:
        return len(self._parts())


PARTITION_NAMINGS: Mapping[str, ProfileNaming] = ByManufacturer(
    lambda vendor: vendor.partition_naming
)
"""The manufacturers whose partitions are made through an NVML-shaped library, and how each
names its profiles."""

SIMULATORS: Mapping[str, HostSimulator] = ByManufacturer(lambda vendor: vendor.simulator)
"""The manufacturers whose hosts `--simulate` builds from a profile."""

DIRECT_LINKS: Mapping[str, DirectLinks] = ByManufacturer(lambda vendor: vendor.direct_links)
"""The manufacturers whose library reports card-to-card fabric links (NVIDIA's NVLink today);
every other manufacturer's cards reach each other over the PCIe tree only, as far as the agent
knows (docs/topology.md, "Network cards")."""

STAGINGS: Mapping[str, Staging] = ByManufacturer(lambda vendor: vendor.staging)
"""The manufacturers whose agents stage an isolation library (`nodeagent.staging`)."""
