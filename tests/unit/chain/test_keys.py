from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.keys import (
    CPU_KEY_MAX,
    CpuKey,
    accelerator_key,
    cpu_key,
    group_id,
    node_cpu_key,
    split_accelerator_key,
)
from chain.labels import (
    CPU_NAME,
    NFD_CPU_FAMILY,
    NFD_CPU_MODEL_ID,
    NFD_CPU_VENDOR,
    capacity_key,
    general_feature_key,
)
from chain.validation import is_qualified_name

EPYC = "AMD EPYC 7763 64-Core Processor"
XEON = "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz"


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        # docs/design/vectors.md, "CPU key".
        ({}, {}, "generic"),
        ({NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "25", NFD_CPU_MODEL_ID: "1"}, {}, "amd-25-1"),
        (
            {NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "25", NFD_CPU_MODEL_ID: "1"},
            {CPU_NAME: EPYC},
            "amd-epyc-7763",
        ),
        (
            {NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "25", NFD_CPU_MODEL_ID: "1"},
            {CPU_NAME: "@cpu.model.name"},
            "amd-25-1",
        ),
        ({NFD_CPU_VENDOR: "Intel"}, {CPU_NAME: XEON}, "intel-xeon-platinum-8358"),
        ({NFD_CPU_VENDOR: "AMD", NFD_CPU_MODEL_ID: "1"}, {}, "amd"),
        ({NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "25"}, {}, "amd"),
        # Vendor unknown or unresolved -> generic maker, identity still kept.
        ({NFD_CPU_VENDOR: "VendorUnknown", NFD_CPU_FAMILY: "6"}, {}, "generic"),
        ({NFD_CPU_VENDOR: "@cpu.vendor"}, {CPU_NAME: "Neoverse-N1"}, "generic-neoverse-n1"),
        # Unresolved family/id count as absent too.
        ({NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "@x", NFD_CPU_MODEL_ID: "1"}, {}, "amd"),
        # A name that is only the vendor falls back to family-id.
        (
            {NFD_CPU_VENDOR: "AMD", NFD_CPU_FAMILY: "25", NFD_CPU_MODEL_ID: "17"},
            {CPU_NAME: "AMD"},
            "amd-25-17",
        ),
    ],
)
def test_node_cpu_key(labels: dict[str, str], annotations: dict[str, str], expected: str) -> None:
    assert node_cpu_key(labels, annotations).key == expected


def test_cpu_key_manufacturer() -> None:
    assert cpu_key("AMD", EPYC) == CpuKey("amd", "amd-epyc-7763")
    assert cpu_key("") == CpuKey("generic", "generic")


def test_cpu_key_budget_leaves_room_for_capacity() -> None:
    long_name = "Intel(R) Xeon(R) " + " ".join(["Extraordinarily Long Model Name"] * 4)
    key = cpu_key("Intel", long_name).key
    assert key.startswith("intel-xeon-extraordinarily-long")
    assert len(key) <= CPU_KEY_MAX == 54
    assert len(key + ".capacity") <= 63
    assert is_qualified_name(capacity_key(general_feature_key(key)))


@given(
    st.text(max_size=70),
    st.text(max_size=120),
    st.text(max_size=10),
    st.text(max_size=10),
)
def test_cpu_key_always_fits_a_label(vendor: str, name: str, family: str, model: str) -> None:
    got = cpu_key(vendor, name, family, model)
    assert got.key == got.manufacturer or got.key.startswith(got.manufacturer + "-")
    assert len(got.key) + len(".capacity") <= 63
    for key in (got.key, got.manufacturer):
        assert is_qualified_name(capacity_key(general_feature_key(key)))


@pytest.mark.parametrize(
    ("maker", "product", "mib", "with_memory", "expected"),
    [
        ("nvidia", "Tesla T4", 15360, False, "tesla-t4"),
        ("nvidia", "Tesla T4", 15360, True, "tesla-t4-15g"),
        ("nvidia", "NVIDIA H100 80GB HBM3", 81920, False, "h100-80gb-hbm3"),
        ("nvidia", "NVIDIA A10G", 23028, True, "a10g-22g"),
        ("ascend", "Ascend910B2", 65536, False, "910b2"),
        ("nvidia", "NVIDIA", 1024, True, ""),
    ],
)
def test_group_id(maker: str, product: str, mib: int, with_memory: bool, expected: str) -> None:
    assert group_id(maker, product, mib, with_memory) == expected


def test_group_id_budget() -> None:
    product = "NVIDIA " + "X" * 100
    assert len(group_id("nvidia", product, 0)) == 63 - len("nvidia") - 1
    assert len(accelerator_key("nvidia", group_id("nvidia", product, 0))) == 63
    with_memory = group_id("nvidia", product, 16384, with_memory=True)
    assert with_memory.endswith("-16g")
    assert len(with_memory) == 63 - len("nvidia") - 1 - 7 + len("-16g")


def test_accelerator_key() -> None:
    assert accelerator_key("nvidia", "tesla-t4") == "nvidia-tesla-t4"
    assert split_accelerator_key("nvidia-tesla-t4") == ("nvidia", "tesla-t4")
    assert split_accelerator_key("ascend-910b2") == ("ascend", "910b2")
