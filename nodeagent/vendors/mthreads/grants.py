"""Moore Threads container responses.

- Exclusive, shared and visibility grants: `MTHREADS_VISIBLE_DEVICES` names the cards' ids;
  Moore Threads' container runtime turns it into device nodes.
- Sliced grants: the host sGPU kernel module enforces `MTHREADS_QOS_*`: the memory limit in
  bytes, and the compute share as a scheduling weight (`COMPUTING_POWER_WEIGHT`), not a hard cap.
  No library is preloaded, so nothing is mounted.
"""

from __future__ import annotations

from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    SliceRequest,
    VisibleById,
    memory_limit_mib,
)
from nodeagent.plugin.response import ContainerResponse

MANUFACTURER = "mthreads"
VISIBLE_DEVICES_ENV = "MTHREADS_VISIBLE_DEVICES"
MIB = 1024 * 1024


class MThreads(VisibleById):
    manufacturer = MANUFACTURER
    variable = VISIBLE_DEVICES_ENV
    slices = True

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        shown = self.show(cards, nodes)
        # A slice is one card (the allocator refuses more), so the first card's cap is the cap.
        mib = memory_limit_mib(cards[0].group.memory, request.limits)
        envs = {
            **shown.envs,
            "MTHREADS_QOS_MEMORY_LIMIT": str(mib * MIB),
            "MTHREADS_QOS_COMPUTING_POWER_WEIGHT": str(request.limits.cores()),
        }
        return ContainerResponse(envs=envs)
