"""What a preflight asks of an Ascend host (`nodeagent.preflight`): `npu-smi`'s card count,
and the responder over a container-share flag it reads and never writes."""

from __future__ import annotations

import functools
import re
from typing import cast

from nodeagent.plugin.grants import Responder
from nodeagent.simulate.base import SimulatedHost
from nodeagent.vendors.ascend.dcmi import open_dcmi
from nodeagent.vendors.ascend.grants import Ascend, ContainerShare
from nodeagent.vendors.interface import HostReader


def count_cards(output: str) -> int:
    """`npu-smi info -l` opens with `Total Count : <n>`."""
    found = re.search(r"Total Count\s*:\s*(\d+)", output)
    return int(found.group(1)) if found else 0


HOST_READER = HostReader(("npu-smi", "info", "-l"), count_cards)


class ReadOnlyShare:
    """Ascend's container-share flag as preflight may touch it: read, never written."""

    def __init__(self, inner: ContainerShare | None) -> None:
        self.inner = inner
        self.api = inner.api if inner is not None else 1

    def share_enabled(self, card: int, device: int) -> bool:
        if self.inner is None:
            raise OSError("no DCMI library loaded")
        return self.inner.share_enabled(card, device)

    def enable_share(self, card: int, device: int) -> None:
        """A preflight never writes the flag; the allocation would turn it on."""


def dry_responder(host_root: str, simulated: SimulatedHost | None) -> Responder:
    """Reads the flag through the simulated host's DCMI, else the host's (opened once, and only
    when a slice is rehearsed: a host without Ascend cards never loads DCMI)."""

    @functools.cache
    def share() -> ContainerShare | None:
        if simulated is not None:
            return cast(ContainerShare | None, simulated.container_share)
        return open_dcmi()

    return Ascend(lambda: ReadOnlyShare(share()))
