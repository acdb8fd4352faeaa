"""The part of Kueue's Configuration the chain depends on, built from the manufacturer table.

Kueue sees a container's accelerator request only after its resource transformations, and the
chain's queues have quota in credits alone. So every family key of every manufacturer is
rewritten (strategy Replace, so the original key is not charged as well):

- `<base>` (a whole card) -> M credits each;
- `<base>.shared` (a share) -> M/10 credits each;
- `<base>.sliced.units` -> one credit per unit, multiplied by `<base>.sliced` (the number of
  slices that each take that many units);
- `<base>.partitioned.units` -> one credit per unit, multiplied by `<base>.partitioned` (always
  1 instance): the Pod webhook folds the profile's memory into these units, "so a 3g.40gb
  partition costs what a same-VRAM slice costs". Without credits a partition PodSet would get no
  flavor from a chain queue (Kueue skips undeclared resources), so Kueue would drop the per-card
  check and admit it unconfined to the pool;
- every other sliced key and `<base>.partitioned` itself -> nothing: they describe a request
  already counted by the keys above, and charging them would count it twice.

Per-profile partition keys (`<base>.partitioned.<kind>-<profile>`) cannot be listed ahead of
time; `quotaCheckStrategy: IgnoreUndeclared` makes Kueue ignore them like every other resource a
chain queue does not cover.

Judgment calls:
- Partition keys are listed only for manufacturers with a partition kind: no other
  manufacturer's device plugin can publish them.
- The `QuotaCheckStrategy` gate is set explicitly: `quotaCheckStrategy` is silently ignored
  while the gate is off (it is on by default only since Kueue v0.19).
"""

from __future__ import annotations

from typing import Any

from chain.families import (
    PARTITIONED,
    PARTITIONED_UNITS,
    SHARED,
    SLICED,
    SLICED_CORES_PERCENTAGE,
    SLICED_MEMORY_MIB,
    SLICED_MEMORY_PERCENTAGE,
    SLICED_UNITS,
    credits_resource,
    family_key,
)
from chain.manufacturers import Manufacturer, ManufacturerTable
from chain.units import CREDITS_PER_ACCELERATOR, SHARE_UNITS

CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
CONFIGURATION = "Configuration"
REPLACE = "Replace"
IGNORE_UNDECLARED = "IgnoreUndeclared"

FEATURE_GATES = {
    # The first three as upstream runs Kueue (docs/design/control-plane.md, "Kueue configuration");
    # TASBalancedPlacement is still alpha (off by default) in Kueue v0.19.
    "AssignQueueLabelsForPods": False,
    "TopologyAwareScheduling": True,
    "TASBalancedPlacement": True,
    "QuotaCheckStrategy": True,
}

_DRAINED_SLICED = (SLICED, SLICED_CORES_PERCENTAGE, SLICED_MEMORY_PERCENTAGE, SLICED_MEMORY_MIB)


def _rule(input_key: str, outputs: dict[str, str], multiply_by: str = "") -> dict[str, Any]:
    rule: dict[str, Any] = {"input": input_key, "strategy": REPLACE}
    if multiply_by:
        rule["multiplyBy"] = multiply_by
    rule["outputs"] = outputs
    return rule


def manufacturer_transformations(entry: Manufacturer) -> list[dict[str, Any]]:
    """The transformations of one manufacturer's family keys, card key first."""
    base = entry.resource_name
    credits = credits_resource(entry.name)
    rules = [
        _rule(family_key(base), {credits: str(CREDITS_PER_ACCELERATOR)}),
        _rule(family_key(base, SHARED), {credits: str(SHARE_UNITS)}),
        # A unit is worth exactly one credit (M units = M credits = one card).
        _rule(family_key(base, SLICED_UNITS), {credits: "1"}, family_key(base, SLICED)),
    ]
    rules += [_rule(family_key(base, suffix), {}) for suffix in _DRAINED_SLICED]
    if entry.partition_kind:
        rules += [
            _rule(
                family_key(base, PARTITIONED_UNITS), {credits: "1"}, family_key(base, PARTITIONED)
            ),
            _rule(family_key(base, PARTITIONED), {}),
        ]
    return rules


def transformations(table: ManufacturerTable) -> list[dict[str, Any]]:
    """Every manufacturer's transformations, in table order."""
    return [rule for entry in table.entries for rule in manufacturer_transformations(entry)]


def configuration_fragment(table: ManufacturerTable) -> dict[str, Any]:
    """The Configuration fields the chain needs; merge them into Kueue's own configuration."""
    return {
        "apiVersion": CONFIG_API,
        "kind": CONFIGURATION,
        "featureGates": dict(FEATURE_GATES),
        "resources": {
            "quotaCheckStrategy": IGNORE_UNDECLARED,
            "transformations": transformations(table),
        },
    }


def merged_configuration(config: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """Kueue's Configuration `config` with the chain's `fragment` merged in: the fragment's
    feature gates added (its values win), its `resources` in place of Kueue's, the rest
    untouched."""
    out = dict(config)
    gates = fragment.get("featureGates")
    if gates:
        out["featureGates"] = {**(config.get("featureGates") or {}), **gates}
    if "resources" in fragment:
        out["resources"] = fragment["resources"]
    return out
