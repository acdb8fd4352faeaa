"""The responder a preflight drives on a MetaX host: it reads the cards' `sgpu` subdevices and
makes none (`nodeagent.preflight`)."""

from __future__ import annotations

from typing import cast

from nodeagent.plugin.grants import Responder
from nodeagent.simulate.base import SimulatedHost
from nodeagent.vendors.metax.grants import Metax
from nodeagent.vendors.metax.sgpu import DrySgpu, SgpuDriver, SysfsSgpu


def dry_responder(host_root: str, simulated: SimulatedHost | None) -> Responder:
    """Over the simulated host's driver, else the host root's sysfs."""
    sgpu = cast(SgpuDriver | None, simulated.sgpu) if simulated is not None else None
    return Metax(DrySgpu(sgpu or SysfsSgpu(host_root)))
