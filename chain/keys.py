"""The two pool keys of a node: the CPU key (gKey) and the accelerator keys (aKeys).

A key is the name part of the labels `general.feature.gpustack.ai/<gKey>` and
`acceleratable.feature.gpustack.ai/<aKey>` and of their `.count` / `.capacity` siblings, and a
segment of flavor and queue names. Two nodes with the same keys land in the same pool.

Judgment calls:
- The CPU key is always CPU-accurate and carries no os/arch (docs/design/control-plane.md, "CPU
  key"). Its id budget is `53 - len(manufacturer)`, so that `<gKey>.capacity` fits the 63-character
  name limit the flavor label needs; the older `63 - len - 1` budget could not.
- The vendor label is normalized like a name (lowercase `a-z0-9`, separators kept) rather than
  only lowercased: NFD reports enum names (`AMD`, `Intel`) for which both agree, and anything
  else could otherwise produce an invalid label key.
- A CPU name counts as usable only if it normalizes to a non-empty id; a name that is nothing
  but the vendor (`AMD`) falls back to family-id like a missing name would.
- The family-id fallback is normalized too (digits pass through unchanged).
- A product name that normalizes to nothing gives an empty group id, with or without the memory
  suffix: a bare size (`16g`) would merge unrelated models into one pool.
- The aKey follows the spec's group-id budget exactly (`63 - len(mfr) - 1`); ids that long
  cannot carry `.count`/`.capacity` labels, and `chain.labels.accelerator_labels` refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chain.labels import (
    CAPACITY_SUFFIX,
    CPU_NAME,
    NFD_CPU_FAMILY,
    NFD_CPU_MODEL_ID,
    NFD_CPU_VENDOR,
    resolved,
)
from chain.memory import format_group_memory
from chain.names import GENERIC
from chain.normalize import normalize_name
from chain.validation import NAME_MAX

_UNKNOWN_VENDOR = "vendorunknown"
CPU_KEY_MAX = NAME_MAX - len(CAPACITY_SUFFIX)
"""Longest CPU key whose `.capacity` sibling is still a valid label-key name (54)."""
GROUP_ID_MEMORY_BUDGET = 7
"""Room reserved for the `-<mem>` group-id suffix (e.g. `-1024g`)."""


@dataclass(frozen=True)
class CpuKey:
    """A node's CPU identity: the maker (gMfr) and the full key (gKey, `<gMfr>[-<id>]`)."""

    manufacturer: str
    key: str


def cpu_key(vendor: str, name: str = "", family: str = "", model_id: str = "") -> CpuKey:
    """The CPU key from NFD's vendor/family/id and the CPU model name.

    Unresolved `@...` values count as absent. The model name wins over family-id because it
    tells apart CPUs that share a family and model number.
    """
    maker = normalize_name(resolved(vendor), "", CPU_KEY_MAX)
    if maker in ("", _UNKNOWN_VENDOR):
        maker = GENERIC
    budget = CPU_KEY_MAX - len(maker) - 1
    if budget <= 0:
        return CpuKey(maker, maker)

    ident = normalize_name(resolved(name), maker, budget, strip_cruft=True)
    family, model_id = resolved(family), resolved(model_id)
    if not ident and family and model_id:
        ident = normalize_name(f"{family}-{model_id}", "", budget)
    return CpuKey(maker, f"{maker}-{ident}" if ident else maker)


def node_cpu_key(labels: Mapping[str, str], annotations: Mapping[str, str]) -> CpuKey:
    """`ExtractGeneralNodeKey`: the CPU key of a Node from its NFD labels and CPU annotations."""
    return cpu_key(
        vendor=labels.get(NFD_CPU_VENDOR, ""),
        name=annotations.get(CPU_NAME, ""),
        family=labels.get(NFD_CPU_FAMILY, ""),
        model_id=labels.get(NFD_CPU_MODEL_ID, ""),
    )


def group_id(manufacturer: str, product: str, memory_mib: int, with_memory: bool = False) -> str:
    """`ConstructGroupID`: the id of a card model within its manufacturer.

    `with_memory` (env `GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`) splits models by VRAM size for
    products whose name does not say it.
    """
    budget = NAME_MAX - len(manufacturer) - 1
    if with_memory:
        budget -= GROUP_ID_MEMORY_BUDGET
    ident = normalize_name(product, manufacturer, budget)
    if with_memory and ident:
        ident = f"{ident}-{format_group_memory(memory_mib)}"
    return ident


def accelerator_key(manufacturer: str, group: str) -> str:
    """`<mfr>-<group id>`: the aKey labels, flavors and pools use."""
    return f"{manufacturer}-{group}"


def split_accelerator_key(key: str) -> tuple[str, str]:
    """(manufacturer, group id) of an aKey; the manufacturer never contains `-`."""
    maker, _, group = key.partition("-")
    return maker, group
