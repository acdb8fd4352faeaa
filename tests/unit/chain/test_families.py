from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain import families
from chain.families import Family, ResourceClass, classify_resource
from chain.manufacturers import ManufacturerTable, manufacturers

TABLE = manufacturers({})


@pytest.mark.parametrize(
    ("key", "family"),
    [
        # docs/design/vectors.md, "Resource family".
        ("nvidia.com/gpu.sliced.memory-mib", Family.SLICED),
        ("nvidia.com/gpu.partitioned", Family.PARTITIONED),
        ("nvidia.com/gpu.partitioned.units", Family.PARTITIONED),
        ("nvidia.com/gpu.partitioned.mig-3g.40gb", Family.PARTITIONED),
        ("device.gpustack.ai/nvidia.visibility", Family.VISIBILITY),
        ("device.gpustack.ai/example.visibility", Family.NONE),
        ("credits.gpustack.ai/nvidia", Family.NONE),
        ("example.com/foo", Family.NONE),
        ("example.com/foo.sliced", Family.NONE),
        ("nvidia.com/gpu.sliced.bogus", Family.NONE),
        ("nvidia.com/gpu.partitioned.mig-", Family.NONE),
        ("cpu", Family.NONE),
        ("", Family.NONE),
        # The rest of the shapes (docs/design/control-plane.md, "Resource families").
        ("nvidia.com/gpu", Family.EXCLUSIVE),
        ("nvidia.com/gpu.shared", Family.SHARED),
        ("nvidia.com/gpu.sliced", Family.SLICED),
        ("nvidia.com/gpu.sliced.units", Family.SLICED),
        ("nvidia.com/gpu.sliced.cores-percentage", Family.SLICED),
        ("nvidia.com/gpu.sliced.memory-percentage", Family.SLICED),
        ("huawei.com/npu.shared", Family.SHARED),
        ("alibabacloud.com/ppu.partitioned.mig-4g.48gb", Family.PARTITIONED),
        ("hygon.com/dcu.partitioned.mig-1g", Family.PARTITIONED),
        # A manufacturer without a partition kind has no per-profile keys.
        ("amd.com/gpu.partitioned.mig-1g", Family.NONE),
        ("amd.com/gpu.partitioned", Family.PARTITIONED),
        ("device.gpustack.ai/.visibility", Family.NONE),
        ("device.gpustack.ai/nvidia", Family.NONE),
        ("nvidia.com/gpu.shared.sliced", Family.NONE),
        ("nvidia.com/gpux", Family.NONE),
        ("memory", Family.NONE),
    ],
)
def test_family(key: str, family: Family) -> None:
    assert classify_resource(key, TABLE).family == family


def test_classification_details(table: ManufacturerTable) -> None:
    assert classify_resource("nvidia.com/gpu.partitioned.mig-3g.40gb", table) == ResourceClass(
        Family.PARTITIONED, "nvidia", ".partitioned.mig-3g.40gb", "3g.40gb"
    )
    assert classify_resource("nvidia.com/gpu.sliced.units", table) == ResourceClass(
        Family.SLICED, "nvidia", ".sliced.units"
    )
    assert classify_resource("amd.com/gpu", table) == ResourceClass(Family.EXCLUSIVE, "amd")
    assert classify_resource("device.gpustack.ai/ascend.visibility", table) == ResourceClass(
        Family.VISIBILITY, "ascend"
    )
    assert classify_resource("cpu", table) == ResourceClass(Family.NONE)


def test_accelerator_families() -> None:
    assert {f for f in Family if f.is_accelerator} == {
        Family.EXCLUSIVE,
        Family.SHARED,
        Family.SLICED,
        Family.PARTITIONED,
    }


def test_overridden_base_is_classified() -> None:
    table = manufacturers({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "example.com/gpu"})
    assert classify_resource("example.com/gpu.sliced.units", table).family == Family.SLICED
    assert classify_resource("nvidia.com/gpu.sliced.units", table).family == Family.NONE


@pytest.mark.parametrize(
    ("name", "manufacturer"),
    [
        # docs/design/vectors.md, "Credits resource names".
        ("credits.gpustack.ai/nvidia", "nvidia"),
        ("credits.gpustack.ai/amd", "amd"),
        ("credits.gpustack.ai/acme", None),
        ("credits.gpustack.ai/", None),
        ("nvidia.com/gpu", None),
        ("cpu", None),
    ],
)
def test_credits_resources(name: str, manufacturer: str | None, table: ManufacturerTable) -> None:
    assert families.credits_manufacturer(name, table) == manufacturer


def test_key_builders() -> None:
    assert families.credits_resource("nvidia") == "credits.gpustack.ai/nvidia"
    assert families.visibility_resource("amd") == "device.gpustack.ai/amd.visibility"
    assert families.family_key("nvidia.com/gpu", families.SLICED_UNITS) == (
        "nvidia.com/gpu.sliced.units"
    )
    assert families.CARD_SUFFIXES[Family.SHARED] == ".shared"


_SUFFIX_FAMILIES = [
    ("", Family.EXCLUSIVE),
    (families.SHARED, Family.SHARED),
    (families.SLICED, Family.SLICED),
    (families.SLICED_UNITS, Family.SLICED),
    (families.SLICED_CORES_PERCENTAGE, Family.SLICED),
    (families.SLICED_MEMORY_PERCENTAGE, Family.SLICED),
    (families.SLICED_MEMORY_MIB, Family.SLICED),
    (families.PARTITIONED, Family.PARTITIONED),
    (families.PARTITIONED_UNITS, Family.PARTITIONED),
]


@given(st.sampled_from(sorted(TABLE)), st.sampled_from(_SUFFIX_FAMILIES))
def test_every_family_key_classifies_back(maker: str, shape: tuple[str, Family]) -> None:
    suffix, family = shape
    got = classify_resource(families.family_key(TABLE[maker].resource_name, suffix), TABLE)
    assert got == ResourceClass(family, maker, suffix)
    assert classify_resource(families.visibility_resource(maker), TABLE).family == (
        Family.VISIBILITY
    )
    assert families.credits_manufacturer(families.credits_resource(maker), TABLE) == maker


@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes(key: str) -> None:
    got = classify_resource(key, TABLE)
    assert (got.family == Family.NONE) == (got.manufacturer == "")
