from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.keys import CpuKey
from chain.labels import (
    ACCELERATABLE,
    ARCH,
    OS,
    TRUE,
    bool_value,
    count_key,
    general_feature_key,
)
from chain.manufacturers import ManufacturerTable
from chain.pools import (
    FlavorIdentity,
    PoolIdentity,
    node_flavors,
    pool_flavor_selector,
    pool_schedule_labels,
    selector_matches,
)

G = "general.feature.gpustack.ai/"
A = "acceleratable.feature.gpustack.ai/"

CPU = FlavorIdentity("amd-epyc-7763", "", "linux", "amd64", 8)
T4 = FlavorIdentity("amd-epyc-7763", "nvidia-tesla-t4", "linux", "amd64", 2)


def test_flavor_names_and_pools_vectors() -> None:
    # docs/design/vectors.md, "Flavors": node amd-epyc-7763 with 2 x nvidia-tesla-t4.
    assert CPU.name == "gpustack--amd-epyc-7763-linux-amd64-8c"
    assert T4.name == "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d"
    assert FlavorIdentity("amd-25-1", "", "linux", "amd64", 8).name == (
        "gpustack--amd-25-1-linux-amd64-8c"
    )
    # docs/design/vectors.md, "Queues" (awareness off).
    assert CPU.instance_type_name(aware=False) == "gpustack--generic-linux-amd64"
    assert T4.instance_type_name(aware=False) == "gpustack--nvidia-tesla-t4-linux-amd64"
    assert CPU.instance_type_name(aware=True) == "gpustack--amd-epyc-7763-linux-amd64"
    assert T4.instance_type_name(aware=True) == (
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64"
    )
    assert T4.instance_type_flavor_name(aware=False) == "gpustack--nvidia-tesla-t4"
    assert CPU.instance_type_flavor_name(aware=False) == "gpustack--generic"


def test_feature_keys() -> None:
    assert CPU.feature_key == G + "amd-epyc-7763"
    assert T4.feature_key == A + "nvidia-tesla-t4"
    assert not CPU.acceleratable
    assert T4.acceleratable


def test_derived_pools() -> None:
    assert CPU.pool(aware=False) == PoolIdentity(False, "generic", "", "linux", "amd64")
    assert CPU.pool(aware=True) == PoolIdentity(False, "amd-epyc-7763", "", "linux", "amd64")
    assert T4.pool(aware=False) == PoolIdentity(
        True, "generic", "nvidia-tesla-t4", "linux", "amd64"
    )
    assert T4.pool(aware=True) == PoolIdentity(
        True, "amd-epyc-7763", "nvidia-tesla-t4", "linux", "amd64"
    )


def test_schedule_labels() -> None:
    assert pool_schedule_labels(False, False, "generic", "", "linux", "amd64") == {
        ACCELERATABLE: "false",
        OS: "linux",
        ARCH: "amd64",
    }
    assert pool_schedule_labels(True, False, "generic", "nvidia-t4", "linux", "amd64") == {
        ACCELERATABLE: "true",
        OS: "linux",
        ARCH: "amd64",
        A + "nvidia-t4": "true",
    }
    assert pool_schedule_labels(True, True, "amd-25-1", "nvidia-t4", "linux", "amd64") == {
        ACCELERATABLE: "true",
        OS: "linux",
        ARCH: "amd64",
        A + "nvidia-t4": "true",
        G + "amd-25-1": "true",
    }
    # Aware, but the general group is the generic sentinel or empty: no general key.
    assert G + "generic" not in pool_schedule_labels(False, True, "generic", "", "linux", "")
    assert pool_schedule_labels(False, True, "", "", "", "") == {ACCELERATABLE: "false"}
    # Not acceleratable: the accelerator group is ignored.
    assert A + "nvidia-t4" not in pool_schedule_labels(False, False, "", "nvidia-t4", "", "")
    # Not aware: the general group is ignored.
    assert G + "amd-25-1" not in pool_schedule_labels(True, False, "amd-25-1", "x-y", "", "")


def test_flavor_selector() -> None:
    labels = {
        ACCELERATABLE: "true",
        OS: "linux",
        ARCH: "amd64",
        A + "nvidia-t4": "true",
        G + "amd-25-1": "true",
        "resource.gpustack.ai/type": "instancetypes",
        A + "nvidia-t4.count": "2",
        G + "stale": "false",
        "schedule.gpustack.ai/queue-entrance": "gpustack-fnv64-0123456789abcdef",
    }
    assert pool_flavor_selector(labels) == {
        ACCELERATABLE: "true",
        OS: "linux",
        ARCH: "amd64",
        A + "nvidia-t4": "true",
        G + "amd-25-1": "true",
    }
    assert pool_flavor_selector({OS: "linux", ARCH: "amd64"}) is None
    assert pool_flavor_selector({}) is None
    assert pool_flavor_selector({ACCELERATABLE: "false"}) == {ACCELERATABLE: "false"}


def _flavor_labels(flavor: FlavorIdentity) -> dict[str, str]:
    """The identity labels a flavor carries (docs/design/control-plane.md, "ResourceFlavor identity
    labels")."""
    labels = {
        flavor.feature_key: TRUE,
        OS: flavor.os,
        ARCH: flavor.arch,
        ACCELERATABLE: bool_value(flavor.acceleratable),
        count_key(flavor.feature_key): str(flavor.count),
    }
    if flavor.acceleratable:
        labels[general_feature_key(flavor.general_key)] = TRUE
    return labels


@pytest.mark.parametrize("aware", [False, True])
def test_pool_selects_its_flavors_and_not_the_others(aware: bool) -> None:
    for flavor in (CPU, T4):
        selector = pool_flavor_selector(flavor.pool(aware).schedule_labels(aware))
        assert selector is not None
        assert selector_matches(selector, _flavor_labels(flavor))
    cpu_selector = pool_flavor_selector(CPU.pool(aware).schedule_labels(aware))
    assert cpu_selector is not None
    # The accelerated flavor carries the same CPU key but never lands in the CPU pool.
    assert not selector_matches(cpu_selector, _flavor_labels(T4))


_KEYS = st.sampled_from(["amd-25-1", "amd-epyc-7763", "intel-xeon-platinum-8358", "generic"])
_AKEYS = st.sampled_from(["", "nvidia-tesla-t4", "nvidia-h100", "ascend-910b2"])
_PLATFORMS = st.sampled_from([("linux", "amd64"), ("linux", "arm64")])


@given(_KEYS, _AKEYS, _PLATFORMS, st.integers(1, 256), st.booleans())
def test_flavor_lands_in_the_pool_named_for_it(
    general: str, accelerator: str, platform: tuple[str, str], count: int, aware: bool
) -> None:
    flavor = FlavorIdentity(general, accelerator, *platform, count)
    pool = flavor.pool(aware)
    selector = pool_flavor_selector(pool.schedule_labels(aware))
    assert selector is not None
    assert selector_matches(selector, _flavor_labels(flavor))
    # A flavor on another platform or of the other kind is never selected.
    other = FlavorIdentity(general, "" if accelerator else "nvidia-a10g", *platform, count)
    assert not selector_matches(selector, _flavor_labels(other))


def test_node_flavors(table: ManufacturerTable) -> None:
    # docs/design/vectors.md, "Flavors": node amd-epyc-7763, 8 cores, 2 x nvidia-tesla-t4.
    node = {
        OS: "linux",
        ARCH: "amd64",
        G + "amd": "true",
        G + "amd-epyc-7763": "true",
        G + "amd-epyc-7763.count": "8",
        A + "nvidia": "true",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.count": "2",
        A + "nvidia-h100": "true",
        A + "nvidia-h100.count": "0",
        A + "nvidia-a10g": "true",
        A + "nvidia-a10g.count": "two",
    }
    flavors = node_flavors(node, CpuKey("amd", "amd-epyc-7763"), table)
    assert [flavor.name for flavor in flavors] == [
        "gpustack--amd-epyc-7763-linux-amd64-8c",
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    ]
    # No CPU count -> no CPU flavor, device flavors still keyed by the CPU key.
    del node[G + "amd-epyc-7763.count"]
    assert [
        flavor.name for flavor in node_flavors(node, CpuKey("amd", "amd-epyc-7763"), table)
    ] == ["gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d"]
    assert node_flavors({}, CpuKey("generic", "generic"), table) == []
