"""`status.detail`: what the pool is made of (control-plane §1.10, §3.6; §8 item 3).

- The descriptors come from the pool's first flavor (the queue's order) and its
  `note.gpustack.ai/*` notes: `manufacturer, product, family, memory, cores` for a card pool, the
  CPU's `manufacturer, product, family` with its `cpuDetail` inlined for a CPU pool. A card pool
  under CPU awareness also gets the CPU's `cpuDetail` as `cpu`. The collapsed CPU pool (no CPU key
  in its labels) mixes CPU models, so no flavor describes it: its detail is empty.
- From the pool's Devices: `computeCapability` (the first node's, by name), `slicedDetail`
  (what the pool's cards can be cut into, summed; profile names published) and the runtime
  versions. `memory` is the card VRAM the Pod webhook folds memory requests by.

Runtime versions are sorted by (major, minor) ascending and deduplicated on that pair (`12.4`
and `12.4.1` are one), strings that are not versions are dropped; `runtimeVersion` is the first,
the oldest one in the pool, which is the one every node of the pool offers at least.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

from chain.accelerators import Accelerator
from chain.devices import aggregate_sliced_detail
from chain.labels import GENERAL_PREFIX, NOTE_PREFIX
from chain.partitions import publish_profile_name
from chain.pools import PoolIdentity
from chain.views import PoolNode
from hooks.shell import BadRequest, Obj, object_path

DESCRIPTORS = ("manufacturer", "product", "family")
CARD_DESCRIPTORS = (*DESCRIPTORS, "memory", "cores")
CPU_DETAIL = "cpuDetail"
_VERSION = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:\.[0-9]+)*")


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


def runtime_versions(versions: Iterable[str]) -> list[str]:
    keyed: dict[tuple[int, int], str] = {}
    for text in sorted(versions):
        match = _VERSION.fullmatch(text)
        if match:
            keyed.setdefault((int(match[1]), int(match[2] or 0)), text)
    return [keyed[key] for key in sorted(keyed)]


def sliced_detail(nodes: Sequence[PoolNode]) -> Obj:
    """The pool's cutting capacity: every card of the pool's group, summed."""
    cards = (
        Accelerator(card.id, 0, status=card.capability) for node in nodes for card in node.cards
    )
    total = aggregate_sliced_detail(cards)
    maker = nodes[0].manufacturer if nodes else ""
    return {
        "logical": {
            "count": total.logical.count,
            "coresPercentageOvercommit": total.logical.cores_percentage_overcommit,
        },
        "physical": {
            "count": total.physical.count,
            "profiles": [
                {
                    "name": publish_profile_name(maker, profile.name),
                    "count": profile.count,
                    "memoryMib": profile.memory_mib,
                }
                for profile in total.physical.profiles
            ],
        },
    }


def detail(
    identity: PoolIdentity, aware: bool, flavor: Obj | None, nodes: Sequence[PoolNode]
) -> Obj:
    """`status.detail` of a pool described by `flavor` (its first) over `nodes` (by name)."""
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
    capability = next((node.compute_capability for node in nodes if node.compute_capability), "")
    if capability:
        out["computeCapability"] = capability
    out["slicedDetail"] = sliced_detail(nodes)
    if flavor is not None and notes.get(CPU_DETAIL):
        out["cpu"] = _cpu_detail(flavor, notes)
    versions = runtime_versions(node.runtime_version for node in nodes if node.runtime_version)
    if versions:
        out["runtimeVersion"] = versions[0]
        out["runtimeVersions"] = versions
    return out
