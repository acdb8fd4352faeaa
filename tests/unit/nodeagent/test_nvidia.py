"""The NVIDIA detector's rules, on simulated NVML."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.detect.sysfs import Sysfs
from nodeagent.simulate import Profile, SimulatedNvml
from nodeagent.simulate.profile import parse_profile
from nodeagent.vendors.common.nvml import Nvml
from nodeagent.vendors.common.nvml_mig import memory_slices
from nodeagent.vendors.nvidia.detect import (
    NvidiaDetector,
    compute_capability,
    family,
    restored_memory,
    runtime_version,
)
from tests.unit.nodeagent.helpers import detect, nvidia_node, small_profile


def test_simulator_is_an_nvml_surface() -> None:
    surface: Nvml = SimulatedNvml(small_profile())  # checked by mypy
    assert surface.NVML_DEVICE_MIG_ENABLE == 1


@pytest.mark.parametrize(
    ("cuda", "version"), [(12040, "12.4"), (13000, "13.0"), (12020, "12.2"), (0, ""), (-1, "")]
)
def test_runtime_version(cuda: int, version: str) -> None:
    assert runtime_version(cuda) == version


@pytest.mark.parametrize(
    ("major", "minor", "name"),
    [
        (1, 3, "Tesla"),
        (2, 1, "Fermi"),
        (3, 7, "Kepler"),
        (5, 2, "Maxwell"),
        (6, 1, "Pascal"),
        (7, 0, "Volta"),
        (7, 2, "Volta"),
        (7, 5, "Turing"),
        (8, 0, "Ampere"),
        (8, 6, "Ampere"),
        (8, 7, "Ampere"),
        (8, 9, "Ada-Lovelace"),
        (9, 0, "Hopper"),
        (10, 0, "Blackwell"),
        (12, 0, "Blackwell"),
        (11, 0, ""),
        (4, 0, ""),
        (0, 0, ""),
    ],
)
def test_family(major: int, minor: int, name: str) -> None:
    assert family(major, minor) == name


def test_compute_capability() -> None:
    assert compute_capability(8, 6) == "8.6"
    assert compute_capability(0, 0) == ""


def test_ecc_memory_restore_only_on_gddr_with_ecc() -> None:
    assert restored_memory(15360, 256, True) == 16384
    assert restored_memory(15360, 256, False) == 15360
    assert restored_memory(81559, 5120, True) == 81559  # HBM: ECC costs no capacity
    assert restored_memory(15360, 0, True) == 15360  # bus width unknown


def test_memory_slices_round_half_up() -> None:
    assert memory_slices(4864, 40960) == 1
    assert memory_slices(9856, 40960) == 2
    assert memory_slices(40192, 40960) == 8
    assert memory_slices(2560, 40960) == 1  # exactly half an eighth
    assert memory_slices(100, 0) == 0


def test_cards_group_by_name_and_memory() -> None:
    body: dict[str, Any] = {
        "models": {
            "a": {"name": "NVIDIA A10G", "memoryMib": 23028},
            "b": {"name": "NVIDIA A10G", "memoryMib": 24564},
            "c": {"name": "Tesla T4", "memoryMib": 15360},
        },
        "cards": [{"model": "a"}, {"model": "c"}, {"model": "b"}, {"model": "a"}],
    }
    groups = detect(parse_profile("mixed", body))
    assert [(g.name, g.memory, [c.index for c in g.accelerators]) for g in groups] == [
        ("NVIDIA A10G", 23028, [0, 3]),
        ("Tesla T4", 15360, [1]),
        ("NVIDIA A10G", 24564, [2]),
    ]
    # Unsupported queries fall back: no cores, no capability, no family, no versions.
    first = groups[0]
    assert (first.cores, first.compute_capability, first.family, first.runtime_version) == (
        0,
        "",
        "",
        "",
    )
    # Same id for both sizes: the memory split needs GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY.
    assert groups[0].id == groups[2].id == "a10g"


def test_no_driver_is_no_cards() -> None:
    assert detect(small_profile(driver={"loaded": False})) == ()


def test_count_error_is_no_cards() -> None:
    assert detect(small_profile(faults=[{"kind": "count-error"}])) == ()


def test_a_panic_propagates() -> None:
    # The detector does not swallow a non-NVML failure: the held detection turns it into an
    # unmeasured pass (test_held).
    with pytest.raises(RuntimeError, match="simulated fault"):
        detect(small_profile(faults=[{"kind": "panic"}]))


def test_a_lost_card_is_skipped_and_indexes_stay_dense() -> None:
    (group,) = detect(small_profile(faults=[{"kind": "lost", "card": 0}]))
    (card,) = group.accelerators
    assert card.index == 0
    assert card.physical_indexes == (1,)  # its minor number still names its device node
    assert card.topology.pci_bus_id == "0000:00:1c.0"


def test_uncorrected_ecc_errors_make_a_card_unhealthy() -> None:
    (group,) = detect(small_profile(faults=[{"kind": "unhealthy", "card": 1}]))
    assert [card.status.unhealthy for card in group.accelerators] == [False, True]


def test_faults_follow_passes() -> None:
    profile = small_profile(faults=[{"kind": "unhealthy", "card": 0, "from": 2, "until": 2}])
    with nvidia_node(profile) as (detector, nvml, _):
        health = [detector.detect()[0].accelerators[0].status.unhealthy for _ in range(3)]
        assert health == [False, True, False]
        assert nvml.passes == 3


def test_monitor_reports_health_and_load() -> None:
    with nvidia_node(small_profile(faults=[{"kind": "unhealthy", "card": 1}])) as (detector, _, _):
        first, second = detector.monitor()
    assert (first.manufacturer, first.index, first.unhealthy) == ("nvidia", 0, False)
    assert second.unhealthy
    assert (first.memory_total_mib, first.temperature_celsius, first.power_watts) == (15360, 33, 30)


MIG_MODEL: dict[str, Any] = {
    "name": "NVIDIA A100-SXM4-40GB",
    "memoryMib": 40960,
    "memoryBusWidth": 5120,
    "mig": {
        "profiles": [
            {
                "profile": 0,
                "id": 19,
                "name": "MIG 1g.5gb",
                "slices": 1,
                "instances": 7,
                "memoryMb": 4864,
                "starts": [0, 1, 2, 3, 4, 5, 6],
                "size": 1,
            },
            # No name reported: one is made from the size.
            {
                "profile": 1,
                "id": 14,
                "name": "",
                "slices": 2,
                "instances": 3,
                "memoryMb": 9856,
                "starts": [0, 2, 4],
                "size": 2,
            },
            # A graphics profile id: left out whatever its name.
            {
                "profile": 0x0A,
                "id": 40,
                "name": "MIG 1g.5gb.gfx",
                "slices": 1,
                "instances": 7,
                "memoryMb": 4864,
                "starts": [0],
                "size": 1,
            },
            # A duplicate name: the first wins.
            {
                "profile": 9,
                "id": 15,
                "name": "MIG 1g.5gb",
                "slices": 1,
                "instances": 4,
                "memoryMb": 9856,
                "starts": [0, 2],
                "size": 2,
            },
            # No placement: the card cannot host it.
            {
                "profile": 3,
                "id": 5,
                "name": "MIG 4g.20gb",
                "slices": 4,
                "instances": 1,
                "memoryMb": 19968,
                "starts": [],
                "size": 4,
            },
            {
                "profile": 7,
                "id": 20,
                "name": "MIG 1g.5gb+me",
                "slices": 1,
                "instances": 1,
                "memoryMb": 4864,
                "starts": [0],
                "size": 1,
            },
        ]
    },
}


def _unplaced_cards(numa: dict[int, str]) -> Profile:
    """Two cards the kernel places on no NUMA node (`numa_node` -1), on a host with `numa`."""
    cards = [
        {"model": "t4", "busId": "00000000:00:1B.0", "numaNode": -1},
        {"model": "t4", "busId": "00000000:00:1C.0", "numaNode": -1},
    ]
    return small_profile(cards=cards, numa=numa)


def test_no_numa_node_on_a_one_node_host_is_that_node() -> None:
    # The H200 VM of docs/nodeagent.md, "On a real GPU": sysfs -1, one node, topo -m says 0.
    profile = _unplaced_cards({0: "0-15"})
    (group,) = detect(profile)
    topologies = {(c.topology.numa_affinity, c.topology.cpu_affinity) for c in group.accelerators}
    assert topologies == {("0", "0-15")}


def test_no_numa_node_on_a_two_node_host_has_nvml_cpus_and_no_node() -> None:
    # NVML answers every CPU (the kernel's mask for NUMA_NO_NODE); no node is made up, so the
    # device plugin gives the kubelet no NUMA hint.
    profile = _unplaced_cards({0: "0-7,16-23", 1: "8-15,24-31"})
    (group,) = detect(profile)
    topologies = {(c.topology.numa_affinity, c.topology.cpu_affinity) for c in group.accelerators}
    assert topologies == {("", "0-31")}


def test_no_numa_node_and_no_nvml_answer_has_nothing() -> None:
    profile = _unplaced_cards({})
    (group,) = detect(profile)
    topologies = {(c.topology.numa_affinity, c.topology.cpu_affinity) for c in group.accelerators}
    assert topologies == {("", "")}


def test_nvml_cpu_affinity_words() -> None:
    nvml = SimulatedNvml(_unplaced_cards({0: "0-3", 1: "64-65,127"}))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert list(nvml.nvmlDeviceGetCpuAffinity(handle, 2)) == [0b1111, 0b11 | 1 << 63]
    placed = SimulatedNvml(small_profile(numa={0: "0-3", 1: "4-7"}))
    placed.nvmlInit()
    assert list(placed.nvmlDeviceGetCpuAffinity(placed.nvmlDeviceGetHandleByIndex(0), 1)) == [15]


def test_mig_profile_rules() -> None:
    body = {"models": {"a100": MIG_MODEL}, "cards": [{"model": "a100", "mig": True}]}
    (group,) = detect(parse_profile("mig", body))
    physical = group.accelerators[0].status.physical_sliced
    assert [(p.name, p.count, p.memory_slices) for p in physical.profiles] == [
        ("1g.5gb", 7, 1),
        ("2g.10gb", 3, 2),
    ]
    assert physical.count == 7


def test_mig_capable_card_with_mig_off_takes_logical_slices() -> None:
    body = {"models": {"a100": MIG_MODEL}, "cards": [{"model": "a100"}]}
    (group,) = detect(parse_profile("mig-off", body))
    card = group.accelerators[0]
    assert card.is_logically_sliceable and not card.status.physical_sliced


def test_the_real_library_without_a_driver(tmp_path: Any) -> None:
    # The real pynvml: on a machine without the NVIDIA driver nvmlInit fails and the answer is
    # empty; on a machine with one it lists real cards. Either way nothing is raised.
    groups = NvidiaDetector(sysfs=Sysfs(tmp_path)).detect()
    assert isinstance(groups, tuple)


def test_old_drivers_report_profiles_without_names() -> None:
    # Without the versioned call the struct has no name: names are made from the sizes.
    body = {
        "driver": {"legacyProfileInfo": True},
        "models": {"a100": MIG_MODEL},
        "cards": [{"model": "a100", "mig": True}],
    }
    (group,) = detect(parse_profile("old-driver", body))
    names = [p.name for p in group.accelerators[0].status.physical_sliced.profiles]
    # The second "1g.5gb" (9856 MB) now reads `1g.10gb`; `1g.5gb+me` reads `1g.5gb` and
    # loses to the first one, which comes earlier in NVML's profile order.
    assert names == ["1g.5gb", "1g.10gb", "2g.10gb"]
