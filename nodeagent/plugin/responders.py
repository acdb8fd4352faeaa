"""Which manufacturers this agent answers Allocate for, and with what (one responder each).

A manufacturer missing here gets no device-plugin server at all; one whose responder does not
slice gets no `.sliced` server, and its detector's logical slices are not published either
(`nodeagent/agent.py`, `published_groups`), so nothing promises a slice that no plugin can hand
out. Nor are those of a group whose isolation library is not usable on the node
(`isolation.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent.plugin.grants import Responder
from nodeagent.vendors.registry import ByManufacturer

RESPONDERS: Mapping[str, Responder] = ByManufacturer(lambda vendor: vendor.responder)
"""Each registered manufacturer's responder (nodeagent/vendors/registry.py)."""


def responder_for(manufacturer: str) -> Responder | None:
    return RESPONDERS.get(manufacturer)
