"""Which manufacturers this agent answers Allocate for, and with what (one responder each).

A manufacturer missing here gets no device-plugin server at all; one whose responder does not
slice gets no `.sliced` server, and its detector's logical slices are not published either
(`nodeagent/agent.py`, `published_groups`), so nothing promises a slice that no plugin can hand
out. Nor are those of a group whose isolation library is not usable on the node
(`isolation.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.plugin.amd import Amd
from nodeagent.plugin.ascend import Ascend
from nodeagent.plugin.cambricon import Cambricon
from nodeagent.plugin.grants import Responder
from nodeagent.plugin.hygon import Hygon
from nodeagent.plugin.iluvatar import Iluvatar
from nodeagent.plugin.metax import Metax
from nodeagent.plugin.mthreads import MThreads
from nodeagent.plugin.nvidia import Nvidia
from nodeagent.plugin.thead import Thead

RESPONDERS: Mapping[str, Responder] = {
    responder.manufacturer: responder
    for responder in (
        Amd(),
        Ascend(),
        Cambricon(),
        Hygon(),
        Iluvatar(),
        Metax(),
        MThreads(),
        Nvidia(),
        Thead(),
    )
}


def responder_for(manufacturer: str) -> Responder | None:
    return RESPONDERS.get(manufacturer)
