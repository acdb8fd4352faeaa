"""`status.detail`: what the pool is made of (docs/design/control-plane.md, "InstanceType", "The
four views", "Descriptors in status").

- The descriptors come from the pool's first flavor (the queue's order) and its
  `note.gpustack.ai/*` notes: `manufacturer, product, family, memory, cores` for a card pool, the
  CPU's `manufacturer, product, family` with its `cpuDetail` inlined for a CPU pool. A card pool
  under CPU awareness also gets the CPU's `cpuDetail` as `cpu`. The collapsed CPU pool (no CPU key
  in its labels) mixes CPU models, so no flavor describes it: its detail is empty.
- From the pool's nodes, through its `PoolCards` (`chain.pool_cards`): `computeCapability` (the
  first node's, by name), `slicedDetail` (what the pool's cards can be cut into, summed;
  profile names published), the runtime versions, and `rdmaNodes`, how many of the pool's
  nodes have an RDMA port up (docs/topology.md, "Network cards"). `memory` is the card VRAM the
  Pod webhook folds memory requests by.

Runtime versions are sorted by (major, minor) ascending and deduplicated on that pair (`12.4`
and `12.4.1` are one), strings that are not versions are dropped; `runtimeVersion` is the first,
the oldest one in the pool, which is the one every node of the pool offers at least.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from chain.labels import GENERAL_PREFIX, NOTE_PREFIX
from chain.pool_cards import PoolCards, render_sliced_detail
from chain.pools import PoolIdentity
from hooks.request import BadRequest, Obj, object_path

DESCRIPTORS = ("manufacturer", "product", "family")
CARD_DESCRIPTORS = (*DESCRIPTORS, "memory", "cores")
CPU_DETAIL = "cpuDetail"


def _cpu_detail(flavor: Obj, notes: Mapping[str, str]) -> Obj:
    raw = notes.get(CPU_DETAIL)
    if not raw:
        return {}
    field = f"{object_path('related', flavor)}.metadata.annotations['{NOTE_PREFIX}{CPU_DETAIL}']"
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise BadRequest(field, f"expected a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise BadRequest(field, "expected a JSON object")
    return value


def _notes(flavor: Obj) -> dict[str, str]:
    annotations = flavor["metadata"].get("annotations") or {}
    if not isinstance(annotations, dict):
        raise BadRequest(f"{object_path('related', flavor)}.metadata.annotations", "expected a map")
    return {
        key.removeprefix(NOTE_PREFIX): value
        for key, value in annotations.items()
        if key.startswith(NOTE_PREFIX) and isinstance(value, str)
    }


def detail(identity: PoolIdentity, aware: bool, flavor: Obj | None, cards: PoolCards) -> Obj:
    """`status.detail` of a pool described by `flavor` (its first) and its nodes' `cards`."""
    out: Obj = {}
    notes = _notes(flavor) if flavor is not None else {}
    if not identity.acceleratable:
        collapsed = not any(
            key.startswith(GENERAL_PREFIX) for key in identity.schedule_labels(aware)
        )
        if collapsed or flavor is None:
            return out
        out.update((key, notes[key]) for key in DESCRIPTORS if notes.get(key))
        out.update(_cpu_detail(flavor, notes))
        return out
    out.update((key, notes[key]) for key in CARD_DESCRIPTORS if notes.get(key))
    if cards.compute_capability:
        out["computeCapability"] = cards.compute_capability
    out["slicedDetail"] = render_sliced_detail(cards.sliced_detail)
    out["rdmaNodes"] = cards.rdma_nodes
    if flavor is not None and notes.get(CPU_DETAIL):
        out["cpu"] = _cpu_detail(flavor, notes)
    if cards.runtime_versions:
        out["runtimeVersion"] = cards.runtime_versions[0]
        out["runtimeVersions"] = list(cards.runtime_versions)
    return out
