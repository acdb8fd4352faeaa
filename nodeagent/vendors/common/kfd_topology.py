"""An AMD card's compute topology as the amdgpu driver's KFD publishes it
(`/sys/class/kfd/kfd/topology/nodes/<n>/properties`, one `name value` per line).

The node of a card is the one whose `drm_render_minor` is the card's render node (the detector's
`physicalIndexes[1]`). Compute units are `simd_count / simd_per_cu`, shader engines
`array_count / simd_arrays_per_engine`, and `num_xcc` the XCC count (absent on older kernels:
read as unknown, which a CDNA mask refuses rather than assume one XCC).
"""

from __future__ import annotations

from nodeagent.plugin.grants import DeviceNodes, GrantedCard
from nodeagent.vendors.common.cumask import Topology

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"


def properties(text: str) -> dict[str, int]:
    found = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if value.strip().lstrip("-").isdigit():
            found[name] = int(value)
    return found


def render_properties(values: dict[str, int]) -> str:
    """The file as the driver writes it (for simulated hosts)."""
    return "".join(f"{name} {value}\n" for name, value in values.items())


def card_topology(nodes: DeviceNodes, card: GrantedCard) -> Topology:
    """ValueError when the card's KFD node cannot be found or read."""
    render = card.physical_index(1)
    if render is None:
        raise ValueError(f"card {card.card.id} records no render node to find its KFD node by")
    for node in nodes.listing(KFD_NODES):
        text = nodes.read(f"{KFD_NODES}/{node}/properties")
        if text is None:
            continue
        found = properties(text)
        if found.get("drm_render_minor") != render:
            continue
        per_cu = found.get("simd_per_cu", 0)
        per_engine = found.get("simd_arrays_per_engine", 0)
        return Topology(
            gfx=card.group.compute_capability,
            compute_units=found.get("simd_count", 0) // per_cu if per_cu else 0,
            shader_engines=found.get("array_count", 0) // per_engine if per_engine else 0,
            xcc=found.get("num_xcc", 0),
        )
    raise ValueError(f"read topology of card {card.card.id}: no KFD node has render minor {render}")
