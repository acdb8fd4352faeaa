"""The Kueue Configuration fragment: gates, quota check strategy, and the transformation rules."""

from __future__ import annotations

from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable, manufacturers
from hooks.queue.kueue_config import (
    configuration_fragment,
    manufacturer_transformations,
    transformations,
)


def _by_input(rules: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["input"]: rule for rule in rules}


def test_nvidia_rules(table: ManufacturerTable) -> None:
    rules = _by_input(manufacturer_transformations(table["nvidia"]))
    credits = "credits.gpustack.ai/nvidia"
    assert rules["nvidia.com/gpu"] == {
        "input": "nvidia.com/gpu",
        "strategy": "Replace",
        "outputs": {credits: "1600000"},
    }
    assert rules["nvidia.com/gpu.shared"]["outputs"] == {credits: "160000"}
    assert rules["nvidia.com/gpu.sliced.units"] == {
        "input": "nvidia.com/gpu.sliced.units",
        "strategy": "Replace",
        "multiplyBy": "nvidia.com/gpu.sliced",
        "outputs": {credits: "1"},
    }
    drained = [
        "nvidia.com/gpu.sliced",
        "nvidia.com/gpu.sliced.cores-percentage",
        "nvidia.com/gpu.sliced.memory-percentage",
        "nvidia.com/gpu.sliced.memory-mib",
        "nvidia.com/gpu.partitioned",
    ]
    for key in drained:
        assert rules[key] == {"input": key, "strategy": "Replace", "outputs": {}}
    # A partition costs its folded units, as a slice of the same memory does.
    assert rules["nvidia.com/gpu.partitioned.units"] == {
        "input": "nvidia.com/gpu.partitioned.units",
        "strategy": "Replace",
        "multiplyBy": "nvidia.com/gpu.partitioned",
        "outputs": {credits: "1"},
    }
    assert len(rules) == 4 + len(drained)


def test_amd_has_no_partition_keys(table: ManufacturerTable) -> None:
    rules = _by_input(manufacturer_transformations(table["amd"]))
    assert rules["amd.com/gpu"]["outputs"] == {"credits.gpustack.ai/amd": "1600000"}
    assert rules["amd.com/gpu.shared"]["outputs"] == {"credits.gpustack.ai/amd": "160000"}
    assert rules["amd.com/gpu.sliced.units"]["multiplyBy"] == "amd.com/gpu.sliced"
    assert not [key for key in rules if ".partitioned" in key]
    assert len(rules) == 7


def test_every_manufacturer_once_and_no_duplicate_inputs(table: ManufacturerTable) -> None:
    rules = transformations(table)
    inputs = [rule["input"] for rule in rules]
    assert len(inputs) == len(set(inputs))  # Kueue rejects a duplicate input
    for entry in table.entries:
        assert entry.resource_name in inputs
    assert all(rule["strategy"] == "Replace" for rule in rules)


def test_a_slice_is_worth_its_units_times_the_slices(table: ManufacturerTable) -> None:
    # Kueue: credits = units x slices x factor; 2 slices of half a card are one card.
    rule = _by_input(transformations(table))["nvidia.com/gpu.sliced.units"]
    assert 800_000 * 2 * int(rule["outputs"]["credits.gpustack.ai/nvidia"]) == 1_600_000


def test_fragment_shape(table: ManufacturerTable) -> None:
    fragment = configuration_fragment(table)
    assert fragment["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert fragment["kind"] == "Configuration"
    assert fragment["featureGates"]["AssignQueueLabelsForPods"] is False
    assert fragment["featureGates"]["TopologyAwareScheduling"] is True
    assert fragment["resources"]["quotaCheckStrategy"] == "IgnoreUndeclared"
    assert "excludeResourcePrefixes" not in fragment["resources"]  # invalid with IgnoreUndeclared


def test_overridden_resource_names_follow_the_table() -> None:
    table = manufacturers({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "example.com/gpu"})
    inputs = {rule["input"] for rule in transformations(table)}
    assert "example.com/gpu.sliced.units" in inputs
    assert "nvidia.com/gpu" not in inputs


@pytest.mark.parametrize("maker", ["thead", "hygon"])
def test_partitionable_makers_drain_partition_keys(table: ManufacturerTable, maker: str) -> None:
    base = table[maker].resource_name
    inputs = {rule["input"] for rule in manufacturer_transformations(table[maker])}
    assert {base + ".partitioned", base + ".partitioned.units"} <= inputs
