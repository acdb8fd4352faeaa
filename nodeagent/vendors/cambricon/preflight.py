"""The responder a preflight drives on a Cambricon host: it reads the sMLU mode and instances
and changes neither (`nodeagent.preflight`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from nodeagent.plugin.grants import Responder
from nodeagent.simulate.base import SimulatedHost
from nodeagent.vendors.cambricon.grants import Cambricon
from nodeagent.vendors.cambricon.smlu import DrySmlu, SmluDriver, open_cndev_smlu


def _held(driver: SmluDriver) -> Callable[[], SmluDriver]:
    return lambda: driver


def dry_responder(host_root: str, simulated: SimulatedHost | None) -> Responder:
    """Over the simulated host's sMLU calls when it has them, else the host's cnDev."""
    smlu: Callable[[], SmluDriver] = open_cndev_smlu
    if simulated is not None and simulated.smlu is not None:
        smlu = _held(cast(SmluDriver, simulated.smlu))
    dry = DrySmlu(smlu)
    return Cambricon(lambda: dry)
