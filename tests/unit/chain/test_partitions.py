from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.families import Family, classify_resource
from chain.manufacturers import ManufacturerTable
from chain.partitions import (
    normalize_profile_name,
    partitioned_profile_key,
    publish_profile_name,
    vendor_profile_name,
)


@pytest.mark.parametrize(
    ("raw", "profile"),
    [("MIG 1c.12g", "1c.12g"), ("1g.10gb", "1g.10gb"), ("MIG 3g.40gb ", "3g.40gb"), ("", "")],
)
def test_normalize(raw: str, profile: str) -> None:
    assert normalize_profile_name(raw) == profile


def test_publish_thead_only() -> None:
    assert publish_profile_name("thead", "4g48gb") == "4g.48gb"
    assert publish_profile_name("thead", "4g.48gb") == "4g.48gb"
    assert publish_profile_name("nvidia", "4g48gb") == "4g48gb"
    assert publish_profile_name("thead", "1g.10gb+me") == "1g.10gb+me"
    assert vendor_profile_name("thead", "4g.48gb") == "4g48gb"
    assert vendor_profile_name("nvidia", "1g.10gb") == "1g.10gb"


@given(st.integers(min_value=0, max_value=999), st.integers(min_value=0, max_value=9999))
def test_thead_round_trip(compute: int, memory: int) -> None:
    vendor = f"{compute}g{memory}gb"
    published = publish_profile_name("thead", vendor)
    assert publish_profile_name("thead", published) == published
    assert vendor_profile_name("thead", published) == vendor


def test_profile_keys(table: ManufacturerTable) -> None:
    key = partitioned_profile_key(table["nvidia"], "3g.40gb")
    assert key == "nvidia.com/gpu.partitioned.mig-3g.40gb"
    assert classify_resource(key, table).profile == "3g.40gb"
    assert partitioned_profile_key(table["thead"], "4g.48gb") == (
        "alibabacloud.com/ppu.partitioned.mig-4g.48gb"
    )
    # Not a valid resource name -> not offered.
    assert partitioned_profile_key(table["nvidia"], "1g.10gb+me") is None
    assert partitioned_profile_key(table["nvidia"], "1g.10gb+gfx") is None
    assert partitioned_profile_key(table["nvidia"], "") is None
    # No partition kind -> no per-profile key.
    assert partitioned_profile_key(table["amd"], "1g") is None


def test_published_key_is_partitioned(table: ManufacturerTable) -> None:
    for profile in ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "7g.80gb"):
        key = partitioned_profile_key(table["nvidia"], profile)
        assert key is not None
        assert classify_resource(key, table).family == Family.PARTITIONED
