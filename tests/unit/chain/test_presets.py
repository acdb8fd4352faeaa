from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hooks.flavor.presets import (
    CPU_POOL_UNITS,
    FALLBACK_UNITS,
    LOCAL_STORAGE,
    PRESETS,
    TIER_UNITS,
    Tier,
    UnitResources,
    preset_tier,
    preset_unit_resources,
    product_tokens,
)


@pytest.mark.parametrize(
    ("product", "cpu", "ram_gib"),
    [
        # docs/design/vectors.md, "Unit presets" (NVIDIA).
        ("NVIDIA H100 80GB HBM3", 12, 192),
        ("H100", 12, 192),
        ("Tesla T4", 8, 32),
        ("NVIDIA A100-SXM4-40GB", 8, 64),
        ("Unknown Card 9000", 4, 16),
        ("", 4, 16),
        ("NVIDIA", 4, 16),
        ("!!!", 4, 16),
    ],
)
def test_vectors(product: str, cpu: int, ram_gib: int) -> None:
    assert preset_unit_resources("nvidia", product) == UnitResources(cpu, ram_gib)


def test_tiers() -> None:
    expected = {
        Tier.FALLBACK: UnitResources(4, 16),
        Tier.SMALL: UnitResources(8, 32),
        Tier.MEDIUM: UnitResources(8, 64),
        Tier.LARGE: UnitResources(12, 128),
        Tier.XLARGE: UnitResources(12, 192),
    }
    assert expected == TIER_UNITS
    assert FALLBACK_UNITS.as_spec() == {"cpu": "4", "ram": "16Gi"}
    assert CPU_POOL_UNITS.as_spec() == {"cpu": "1", "ram": "2Gi"}
    assert LOCAL_STORAGE == "100Gi"


@pytest.mark.parametrize(
    ("maker", "product", "tier"),
    [
        ("nvidia", "NVIDIA A100-SXM4-80GB", Tier.LARGE),
        ("nvidia", "NVIDIA A100 80GB PCIe", Tier.LARGE),
        ("nvidia", "NVIDIA A100-PCIE-40GB", Tier.MEDIUM),
        ("nvidia", "NVIDIA A800-SXM4-80GB", Tier.LARGE),
        ("nvidia", "Tesla V100-SXM2-32GB", Tier.MEDIUM),
        ("nvidia", "Tesla V100-SXM2-16GB", Tier.SMALL),
        ("nvidia", "Tesla V100S-PCIE-32GB", Tier.SMALL),
        ("nvidia", "NVIDIA L40S", Tier.LARGE),
        ("nvidia", "NVIDIA L40", Tier.MEDIUM),
        ("nvidia", "NVIDIA L4", Tier.SMALL),
        ("nvidia", "NVIDIA A10G", Tier.MEDIUM),
        ("nvidia", "NVIDIA A10", Tier.MEDIUM),
        ("nvidia", "NVIDIA A30", Tier.SMALL),
        ("nvidia", "NVIDIA GB200", Tier.XLARGE),
        ("nvidia", "NVIDIA GB10", Tier.SMALL),
        ("nvidia", "NVIDIA GeForce RTX 4090", Tier.MEDIUM),
        ("nvidia", "NVIDIA GeForce RTX 3090", Tier.SMALL),
        ("nvidia", "NVIDIA RTX A6000", Tier.SMALL),
        ("nvidia", "Quadro RTX 6000", Tier.SMALL),
        ("nvidia", "NVIDIA RTX 6000 Ada Generation", Tier.SMALL),
        ("nvidia", "NVIDIA RTX PRO 4500 Blackwell", Tier.SMALL),
        ("nvidia", "NVIDIA GeForce RTX 2080", Tier.FALLBACK),
        ("ascend", "Ascend910B2", Tier.MEDIUM),
        ("ascend", "Ascend910B2C", Tier.MEDIUM),
        ("ascend", "310P3", Tier.MEDIUM),
        ("ascend", "Ascend310P6", Tier.FALLBACK),
        ("ascend", "Ascend910_9392", Tier.XLARGE),
        ("ascend", "Ascend910_9362", Tier.XLARGE),
        ("ascend", "Ascend910A", Tier.FALLBACK),
        ("ascend", "Ascend950PR", Tier.XLARGE),
        ("amd", "AMD Instinct MI300X OAM", Tier.XLARGE),
        ("amd", "AMD Radeon Instinct MI210", Tier.LARGE),
        ("amd", "AMD Instinct MI250X", Tier.MEDIUM),
        ("cambricon", "MLU370-X8", Tier.MEDIUM),
        ("hygon", "K100_AI", Tier.LARGE),
        ("hygon", "Z100L", Tier.SMALL),
        ("hygon", "BW1000", Tier.XLARGE),
        ("metax", "MXC500", Tier.MEDIUM),
        ("metax", "MXC550", Tier.LARGE),
        ("mthreads", "MTT S4000", Tier.MEDIUM),
        ("iluvatar", "Iluvatar BI-V150", Tier.MEDIUM),
        ("thead", "PPU-ZW810E", Tier.MEDIUM),
        # A manufacturer with no table entries always gets the fallback.
        ("intel", "Intel Data Center GPU Max 1550", Tier.FALLBACK),
        ("acme", "H100", Tier.FALLBACK),
    ],
)
def test_family_table(maker: str, product: str, tier: Tier) -> None:
    assert preset_tier(maker, product) == tier


def test_tokens() -> None:
    assert product_tokens("nvidia", "NVIDIA Tesla T4") == ("t4",)
    assert product_tokens("amd", "AMD Radeon Instinct MI210") == ("mi210",)
    assert product_tokens("nvidia", "NVIDIA") == ()


def test_table_has_no_overlapping_families() -> None:
    for entries in PRESETS.values():
        families = [entry.family for entry in entries]
        assert len(set(families)) == len(families)
        for a in families:
            for b in families:
                assert a == b or b[: len(a)] != a


@given(st.sampled_from([*PRESETS, "acme"]), st.text(max_size=60))
def test_every_product_gets_a_tier(maker: str, product: str) -> None:
    assert preset_unit_resources(maker, product) in TIER_UNITS.values()
