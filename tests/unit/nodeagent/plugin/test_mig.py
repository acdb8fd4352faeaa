"""MIG partitions made and unmade through the simulated NVML, with ownership markers."""

from __future__ import annotations

import ctypes
import importlib
from pathlib import Path
from typing import Any

import pytest

from chain.partitions import Placement
from nodeagent.plugin.mig import (
    Markers,
    Partitioner,
    PartitionError,
    card_instances,
    in_use,
)
from nodeagent.simulate import SimulatedNvml
from nodeagent.vendors.nvidia.simulate import load_profile

pynvml: Any = importlib.import_module("pynvml")  # untyped; its error classes are checked here
P = Placement
CARD_MIB = 40960
THREE_G = 9
"""GPU instance profile id of 3g.20gb on the simulated A100."""


@pytest.fixture
def nvml() -> SimulatedNvml:
    simulated = SimulatedNvml(load_profile("a100-40gb-mig"))
    simulated.nvmlInit()
    return simulated


@pytest.fixture
def partitioner(nvml: SimulatedNvml, tmp_path: Path) -> Partitioner:
    return Partitioner(nvml, Markers(str(tmp_path / "mig")))


def card(nvml: SimulatedNvml, number: int = 0) -> str:
    return nvml.profile.cards[number].uuid


def hand_made(nvml: SimulatedNvml, start: int, profile_id: int = THREE_G) -> object:
    """A GPU instance made outside the plugin (an administrator's `nvidia-smi mig -cgi`)."""
    slot = nvml.c_nvmlGpuInstancePlacement_t()
    slot.start, slot.size = start, 4
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    return nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.pointer(slot))


def test_create_makes_one_instance_at_the_slot_and_marks_its_owner(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    made = partitioner.create(card(nvml), "3g.20gb", P(4, 4), ("uid-a", "main"), CARD_MIB)
    assert made.new and made.mig_uuid.startswith("MIG-")
    (view,) = nvml.instances()
    assert (view.card, view.profile_id, view.start, view.size) == (card(nvml), THREE_G, 4, 4)
    assert view.mig_uuids == (made.mig_uuid,)
    marker = partitioner.markers.read(card(nvml), 4)
    assert marker is not None
    assert (marker.pod_uid, marker.container, marker.profile) == ("uid-a", "main", "3g.20gb")
    assert marker.mig_uuid == made.mig_uuid


def test_a_retry_of_the_same_container_finds_its_instance(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    first = partitioner.create(card(nvml), "1g.5gb", P(2, 1), ("uid-a", "main"), CARD_MIB)
    again = partitioner.create(card(nvml), "1g.5gb", P(2, 1), ("uid-a", "main"), CARD_MIB)
    assert (again.mig_uuid, again.new) == (first.mig_uuid, False)
    assert len(nvml.instances()) == 1
    with pytest.raises(PartitionError, match="overlaps the instance at slot 2"):
        partitioner.create(card(nvml), "1g.5gb", P(2, 1), ("uid-b", "main"), CARD_MIB)


def test_a_slot_overlapping_a_hand_made_instance_fails_and_leaves_no_marker(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    hand_made(nvml, 0)
    with pytest.raises(PartitionError, match="overlaps the instance at slot 0"):
        partitioner.create(
            card(nvml), "1g.10gb", P(2, 2), ("uid-a", "main"), CARD_MIB, frozenset()
        )  # no marker: not a gone Pod's instance but someone else's, never taken
    assert len(nvml.instances()) == 1
    assert list(partitioner.markers.all()) == []


def test_a_failed_compute_instance_rolls_the_gpu_instance_back(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    nvml.fail_next("nvmlGpuInstanceCreateComputeInstance", "INSUFFICIENT_RESOURCES")
    with pytest.raises(PartitionError):
        partitioner.create(card(nvml), "2g.10gb", P(2, 2), ("uid-a", "main"), CARD_MIB)
    assert nvml.instances() == []
    assert list(partitioner.markers.all()) == []


def test_an_unknown_profile_is_refused_before_anything_is_made(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    with pytest.raises(PartitionError, match=r"no MIG profile 9g\.99gb"):
        partitioner.create(card(nvml), "9g.99gb", P(0, 8), ("uid-a", "main"), CARD_MIB)
    assert nvml.instances() == [] and list(partitioner.markers.all()) == []


def test_destroy_unmakes_compute_then_gpu_instance_and_drops_the_marker(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    made = partitioner.create(card(nvml), "3g.20gb", P(0, 4), ("uid-a", "main"), CARD_MIB)
    live = partitioner.live_partition("uid-a", "main")
    assert live is not None and live.mig_uuid == made.mig_uuid
    assert (live.card, live.gpu_instance, live.compute_instance) == (
        made.card,
        made.gpu_instance,
        made.compute_instance,
    )
    assert partitioner.destroy(card(nvml), P(0, 4))
    assert nvml.instances() == []
    assert partitioner.markers.read(card(nvml), 0) is None
    assert partitioner.live_partition("uid-a", "main") is None
    assert not partitioner.destroy(card(nvml), P(0, 4))


def test_a_busy_instance_cannot_be_destroyed(nvml: SimulatedNvml, partitioner: Partitioner) -> None:
    made = partitioner.create(card(nvml), "3g.20gb", P(0, 4), ("uid-a", "main"), CARD_MIB)
    nvml.run_process(made.mig_uuid, 4242)
    (found,) = card_instances(nvml, card(nvml))
    assert found.busy and found.compute_instances == 1
    with pytest.raises(PartitionError) as caught:
        partitioner.destroy(card(nvml), P(0, 4))
    assert in_use(nvml, caught.value)
    assert len(nvml.instances()) == 1
    nvml.end_process(made.mig_uuid, 4242)
    assert partitioner.destroy(card(nvml), P(0, 4))


def test_the_simulator_keeps_the_driver_rules(nvml: SimulatedNvml) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    slot = nvml.c_nvmlGpuInstancePlacement_t()
    slot.start, slot.size = 1, 4  # 3g.20gb may start at 0 or 4 only
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, THREE_G, ctypes.pointer(slot))
    gpu = hand_made(nvml, 4)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        hand_made(nvml, 4)  # the memory slices are taken
    compute = nvml.nvmlGpuInstanceCreateComputeInstance(gpu, 0)  # one slice of three
    ci_id = nvml.nvmlComputeInstanceGetInfo(compute).id
    again = nvml.nvmlGpuInstanceGetComputeInstanceById(gpu, ci_id)
    assert nvml.nvmlComputeInstanceGetInfo(again).profileId == 0
    gi_id = nvml.nvmlGpuInstanceGetInfo(gpu).id
    found = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
    assert nvml.nvmlGpuInstanceGetInfo(found).placement.start == 4
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlGpuInstanceGetComputeInstanceById(gpu, ci_id + 1)
    with pytest.raises(pynvml.NVMLError_InUse):
        nvml.nvmlGpuInstanceDestroy(gpu)  # a compute instance still lives in it
    nvml.nvmlComputeInstanceDestroy(compute)
    nvml.nvmlGpuInstanceDestroy(gpu)
    assert nvml.instances() == []
    plain = SimulatedNvml(load_profile("t4x4"))
    plain.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        plain.nvmlDeviceCreateGpuInstanceWithPlacement(
            plain.nvmlDeviceGetHandleByIndex(0), 9, ctypes.pointer(slot)
        )


def test_markers_survive_a_new_partitioner(nvml: SimulatedNvml, tmp_path: Path) -> None:
    first = Partitioner(nvml, Markers(str(tmp_path)))
    made = first.create(card(nvml, 3), "7g.40gb", P(0, 8), ("uid-a", "main"), CARD_MIB)
    restarted = Partitioner(nvml, Markers(str(tmp_path)))
    live = restarted.live_partition("uid-a", "main")
    assert live is not None and live.mig_uuid == made.mig_uuid
    assert restarted.live_partition("uid-a", "other") is None


def test_an_idle_instance_of_a_gone_pod_in_the_way_is_unmade_first(
    nvml: SimulatedNvml, partitioner: Partitioner
) -> None:
    old = partitioner.create(card(nvml), "3g.20gb", P(0, 4), ("uid-gone", "main"), CARD_MIB)
    with pytest.raises(PartitionError, match="overlaps the instance at slot 0"):
        partitioner.create(card(nvml), "1g.5gb", P(1, 1), ("uid-new", "main"), CARD_MIB)
    live = frozenset({"uid-new", "uid-gone"})
    with pytest.raises(PartitionError):  # its Pod is still there: never taken from it
        partitioner.create(card(nvml), "1g.5gb", P(1, 1), ("uid-new", "main"), CARD_MIB, live)
    nvml.run_process(old.mig_uuid, 9)
    with pytest.raises(PartitionError):  # gone, but a process still runs on it
        partitioner.create(
            card(nvml), "1g.5gb", P(1, 1), ("uid-new", "main"), CARD_MIB, frozenset({"uid-new"})
        )
    nvml.end_process(old.mig_uuid, 9)
    made = partitioner.create(
        card(nvml), "1g.5gb", P(1, 1), ("uid-new", "main"), CARD_MIB, frozenset({"uid-new"})
    )
    assert [(view.start, view.mig_uuids) for view in nvml.instances()] == [(1, (made.mig_uuid,))]
    assert [marker.pod_uid for marker in partitioner.markers.all()] == ["uid-new"]


def test_a_state_file_keeps_the_instances_for_the_next_process(tmp_path: Path) -> None:
    """A simulated driver given a state file keeps what a real driver keeps across the agent's
    restarts: a new simulator over the same file (the next agent process) sees the instances
    and their MIG UUIDs, the markers find them again, a new instance gets a fresh UUID, and a
    destroyed one is gone for the process after."""
    state = tmp_path / "driver" / "mig.json"
    markers = str(tmp_path / "mig")
    first = SimulatedNvml(load_profile("a100-40gb-mig"), state)
    first.nvmlInit()
    made = Partitioner(first, Markers(markers)).create(
        card(first), "3g.20gb", P(0, 4), ("uid-a", "main"), CARD_MIB
    )
    first.run_process(made.mig_uuid, 4242)

    second = SimulatedNvml(load_profile("a100-40gb-mig"), state)
    second.nvmlInit()
    assert second.instances() == first.instances()
    again = Partitioner(second, Markers(markers))
    found = again.create(card(second), "3g.20gb", P(0, 4), ("uid-a", "main"), CARD_MIB)
    assert (found.mig_uuid, found.new) == (made.mig_uuid, False)
    with pytest.raises(PartitionError, match="overlaps the instance at slot 0"):
        again.create(card(second), "3g.20gb", P(0, 4), ("uid-b", "main"), CARD_MIB)
    other = again.create(card(second), "3g.20gb", P(4, 4), ("uid-b", "main"), CARD_MIB)
    assert other.mig_uuid != made.mig_uuid
    with pytest.raises(PartitionError, match="cannot unmake slot 0"):  # its process is kept
        again.destroy(card(second), P(0, 4))
    second.end_process(made.mig_uuid, 4242)
    assert again.destroy(card(second), P(0, 4))

    third = SimulatedNvml(load_profile("a100-40gb-mig"), state)
    third.nvmlInit()
    assert [(v.start, v.mig_uuids) for v in third.instances()] == [(4, (other.mig_uuid,))]


def test_a_state_file_of_other_cards_adds_nothing(tmp_path: Path) -> None:
    state = tmp_path / "mig.json"
    state.write_text('{"serial": 3, "cards": {"GPU-elsewhere": [{"id": 1}]}}', encoding="utf-8")
    simulated = SimulatedNvml(load_profile("a100-40gb-mig"), state)
    simulated.nvmlInit()
    assert simulated.instances() == []
