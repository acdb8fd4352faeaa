"""The real NVIDIA detector over every shipped simulated NVIDIA profile."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from chain.devices import Devices, DevicesSpec, Placement
from chain.manufacturers import ManufacturerTable
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.capacity import desired_counting_keys
from nodeagent.report import node_feature_labels
from nodeagent.simulate import shipped_profiles
from nodeagent.simulate.host import profile_manufacturer
from nodeagent.simulate.profile import read_profile_file
from tests.unit.nodeagent.helpers import detect


@dataclass(frozen=True)
class Expected:
    group_id: str
    name: str
    memory: int
    cores: int
    driver: str
    runtime: str
    capability: str
    family: str
    cards: int
    profiles: tuple[str, ...] = ()
    """MIG profiles offered (empty: MIG off, 128 logical slices per card)."""


A100_PROFILES = ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
H100_PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
H100 = ("h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", 81559, 16896, "580.126.09", "13.0", "9.0")

EXPECTED = {
    # GDDR cards with ECC on report 15/16 of their memory; the detector restores the rest.
    "t4x4": Expected("tesla-t4", "Tesla T4", 16384, 2560, "580.126.09", "13.0", "7.5", "Turing", 4),
    "a10gx1": Expected(
        "a10g", "NVIDIA A10G", 24563, 10240, "570.172.08", "12.8", "8.6", "Ampere", 1
    ),
    "l4x2": Expected("l4", "NVIDIA L4", 24569, 7424, "550.90.07", "12.4", "8.9", "Ada-Lovelace", 2),
    # The network-card hosts (docs/topology.md, "Network cards"): the same cards as above.
    "t4x4-ethernet": Expected(
        "tesla-t4", "Tesla T4", 16384, 2560, "580.126.09", "13.0", "7.5", "Turing", 4
    ),
    "l4-x4-roce": Expected(
        "l4", "NVIDIA L4", 24569, 7424, "550.90.07", "12.4", "8.9", "Ada-Lovelace", 4
    ),
    "l4x2-roce": Expected(
        "l4", "NVIDIA L4", 24569, 7424, "550.90.07", "12.4", "8.9", "Ada-Lovelace", 2
    ),
    "h100-80gb-x8-rdma": Expected(*H100, "Hopper", 8),
    "h100-80gb-x8": Expected(*H100, "Hopper", 8),
    "h100-80gb-x8-mig": Expected(*H100, "Hopper", 8, H100_PROFILES),
    # Recorded on a real H200 (tests/unit/nodeagent/test_recorded_h200.py).
    "h200": Expected(
        "h200", "NVIDIA H200", 143771, 16896, "580.159.04", "13.0", "9.0", "Hopper", 1
    ),
    "a100-40gb-mig": Expected(
        "a100-sxm4-40gb",
        "NVIDIA A100-SXM4-40GB",
        40960,
        6912,
        "535.247.01",
        "12.2",
        "8.0",
        "Ampere",
        8,
        A100_PROFILES,
    ),
}


def test_every_shipped_nvidia_profile_is_covered() -> None:
    nvidia = [
        name
        for name in shipped_profiles()
        if profile_manufacturer(read_profile_file(name)[1]) == "nvidia"
    ]
    assert sorted(EXPECTED) == nvidia


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_detected_group(profile: str) -> None:
    expected = EXPECTED[profile]
    (group,) = detect(profile)
    assert (group.id, group.manufacturer, group.name, group.memory, group.cores) == (
        expected.group_id,
        "nvidia",
        expected.name,
        expected.memory,
        expected.cores,
    )
    assert (group.driver_version, group.runtime_version) == (expected.driver, expected.runtime)
    assert (group.compute_capability, group.family) == (expected.capability, expected.family)
    assert [card.index for card in group.accelerators] == list(range(expected.cards))
    assert len({card.id for card in group.accelerators}) == expected.cards
    for card in group.accelerators:
        assert card.id.startswith("GPU-")
        assert card.physical_indexes == (card.index,)
        assert not card.status.unhealthy
        assert card.topology.pci_class == "030200"
        assert card.topology.numa_affinity in ("0", "1")
        physical = card.status.physical_sliced
        if expected.profiles:
            assert card.is_partitioned and physical.count == 7
            assert tuple(profile.name for profile in physical.profiles) == expected.profiles
            assert not card.status.logical_sliced
        else:
            assert card.is_logically_sliceable and not physical
            assert card.status.logical_sliced.count == 128
            assert card.status.logical_sliced.cores_percentage_overcommit
    detail = group.sliced_detail
    if expected.profiles:
        assert detail.physical.count == 7 * expected.cards
        assert detail.logical.count == 0
    else:
        assert detail.logical.count == 128 * expected.cards


def test_topology_of_a_two_socket_node() -> None:
    (group,) = detect("h100-80gb-x8")
    first, last = group.accelerators[0].topology, group.accelerators[7].topology
    assert (first.pci_bus_id, first.pci_root_id) == ("0000:53:00.0", "0000:50:01.0")
    assert (first.numa_affinity, first.cpu_affinity) == ("0", "0-47,96-143")
    assert (last.pci_bus_id, last.numa_affinity, last.cpu_affinity) == (
        "0000:ca:00.0",
        "1",
        "48-95,144-191",
    )


def test_a100_mig_profiles_and_placements() -> None:
    # docs/design/vectors.md, "MIG fold": the A100's profiles and their empty-card placements.
    (group,) = detect("a100-40gb-mig")
    physical = group.accelerators[0].status.physical_sliced
    shapes = {
        profile.name: (profile.count, [(p.start, p.length) for p in profile.placements])
        for profile in physical.profiles
    }
    assert shapes["1g.5gb"] == (7, [(n, 1) for n in range(7)])
    assert shapes["1g.10gb"] == (4, [(0, 2), (2, 2), (4, 2), (6, 2)])
    assert shapes["2g.10gb"] == (3, [(0, 2), (2, 2), (4, 2)])
    assert shapes["3g.20gb"] == (2, [(0, 4), (4, 4)])
    profile = physical.profile("7g.40gb")
    assert profile is not None
    assert (profile.memory_mib, profile.compute_slices, profile.memory_slices) == (40192, 7, 8)
    assert profile.placements == (Placement(0, 8),)
    # The media-extension profile is never offered.
    assert physical.profile("1g.5gb+me") is None


def test_device_labels_of_the_t4_node() -> None:
    labels = node_feature_labels(detect("t4x4"))
    a = "acceleratable.feature.gpustack.ai/"
    assert labels == {
        "feature.gpustack.ai/acceleratable": "true",
        a + "nvidia": "true",
        a + "nvidia.driver-version": "580.126.09",
        a + "nvidia.runtime-version": "13.0",
        a + "nvidia-tesla-t4": "true",
        a + "nvidia-tesla-t4.product": "Tesla-T4",
        a + "nvidia-tesla-t4.memory": "16Gi",
        a + "nvidia-tesla-t4.cores": "2560",
        a + "nvidia-tesla-t4.count": "4",
        a + "nvidia-tesla-t4.family": "Turing",
        a + "nvidia-tesla-t4.comcap": "7.5",
    }


def test_group_id_with_memory() -> None:
    # The settings docs' `nvidia-tesla-t4-16g`: the id carries the restored size.
    (group,) = detect("t4x4", with_memory=True)
    assert group.id == "tesla-t4-16g"


def test_detected_mig_node_capacity(table: ManufacturerTable) -> None:
    # Detection through capacity: eight MIG cards, the ledger not built yet.
    groups = detect("h100-80gb-x8-mig")
    labels = {"gpustack.ai/managed": "true", **node_feature_labels(groups)}
    capacity = {"nvidia.com/gpu.partitioned": "56"}
    keys = desired_counting_keys(labels, capacity, Devices("n", DevicesSpec(groups)), table)
    assert keys == {
        "nvidia.com/gpu.partitioned.mig-1g.10gb": "56",
        "nvidia.com/gpu.partitioned.mig-1g.20gb": "32",
        "nvidia.com/gpu.partitioned.mig-2g.20gb": "24",
        "nvidia.com/gpu.partitioned.mig-3g.40gb": "16",
        "nvidia.com/gpu.partitioned.mig-4g.40gb": "8",
        "nvidia.com/gpu.partitioned.mig-7g.80gb": "8",
        "nvidia.com/gpu.partitioned.units": str(8 * RESOURCE_MAX_UNITS),
    }


def test_detected_sliced_node_capacity(table: ManufacturerTable) -> None:
    groups = detect("t4x4")
    labels = {"gpustack.ai/managed": "true", **node_feature_labels(groups)}
    capacity = {"nvidia.com/gpu.sliced": "512"}
    keys = desired_counting_keys(labels, capacity, Devices("n", DevicesSpec(groups)), table)
    assert keys == {
        "nvidia.com/gpu.sliced.cores-percentage": str(4 * 128 * 100),
        "nvidia.com/gpu.sliced.memory-mib": str(4 * 16384),
        "nvidia.com/gpu.sliced.memory-percentage": "400",
        "nvidia.com/gpu.sliced.units": str(4 * RESOURCE_MAX_UNITS),
    }
