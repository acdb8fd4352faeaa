from __future__ import annotations

from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    Devices,
    DevicesGroup,
    DevicesSpec,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
    Placement,
)
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.manufacturers import ManufacturerTable
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.capacity import desired_counting_keys, is_counting_key, node_capacity_patch

A = "acceleratable.feature.gpustack.ai/"
MANAGED = {"gpustack.ai/managed": "true"}


def logical_group(
    manufacturer: str, ident: str, cards: int, slices: int, overcommit: bool, memory: int
) -> DevicesGroup:
    status = AcceleratorStatus(logical_sliced=LogicalSliced(slices, overcommit))
    return DevicesGroup(
        id=ident,
        manufacturer=manufacturer,
        name=ident,
        memory=memory,
        accelerators=tuple(Accelerator(f"{ident}-{n}", n, status=status) for n in range(cards)),
    )


def node_labels(akey: str, memory: str) -> dict[str, str]:
    return {**MANAGED, A + akey: "true", A + akey + ".memory": memory, A + akey + ".count": "8"}


def test_vector_eight_a10g(table: ManufacturerTable) -> None:
    # docs/design/vectors.md, "Node capacity": 8 x A10G (24 GiB, 128 slices, overcommit).
    devices = Devices("n", DevicesSpec((logical_group("nvidia", "a10g", 8, 128, True, 24576),)))
    labels = node_labels("nvidia-a10g", "24Gi")
    capacity = {"nvidia.com/gpu": "8", "nvidia.com/gpu.sliced": "1024"}
    assert desired_counting_keys(labels, capacity, devices, table) == {
        "nvidia.com/gpu.sliced.cores-percentage": "102400",
        "nvidia.com/gpu.sliced.memory-mib": "196608",
        "nvidia.com/gpu.sliced.memory-percentage": "800",
        "nvidia.com/gpu.sliced.units": "12800000",
    }


def test_vector_eight_mthreads_without_overcommit(table: ManufacturerTable) -> None:
    # docs/design/vectors.md, "Node capacity": 8 x MThreads (16 slices, no overcommit) -> cores 800.
    group = logical_group("mthreads", "s4000", 8, 16, False, 49152)
    devices = Devices("n", DevicesSpec((group,)))
    labels = node_labels("mthreads-s4000", "48Gi")
    keys = desired_counting_keys(labels, {"mthreads.com/gpu.sliced": "128"}, devices, table)
    assert keys["mthreads.com/gpu.sliced.cores-percentage"] == "800"
    assert keys["mthreads.com/gpu.sliced.units"] == str(8 * RESOURCE_MAX_UNITS)
    assert keys["mthreads.com/gpu.sliced.memory-mib"] == str(8 * 49152)


def test_sliced_keys_need_the_sliced_token(table: ManufacturerTable) -> None:
    devices = Devices("n", DevicesSpec((logical_group("nvidia", "a10g", 1, 128, True, 24576),)))
    labels = node_labels("nvidia-a10g", "24Gi")
    assert desired_counting_keys(labels, {"nvidia.com/gpu": "1"}, devices, table) == {}
    assert desired_counting_keys(labels, {"nvidia.com/gpu.sliced": "0"}, devices, table) == {}


def test_models_are_joined_by_accelerator_key(table: ManufacturerTable) -> None:
    groups = (
        logical_group("nvidia", "a10g", 2, 128, True, 24576),
        logical_group("nvidia", "tesla-t4", 1, 128, True, 16384),
        logical_group("nvidia", "l4", 4, 128, True, 24569),
    )
    devices = Devices("n", DevicesSpec(groups))
    # The L4 group has no node label (not published yet): it does not count.
    labels = {**node_labels("nvidia-a10g", "24Gi"), A + "nvidia-tesla-t4": "true"}
    keys = desired_counting_keys(labels, {"nvidia.com/gpu.sliced": "384"}, devices, table)
    assert keys["nvidia.com/gpu.sliced.units"] == str(3 * RESOURCE_MAX_UNITS)
    # The T4 has no `.memory` label: its Devices memory stands in.
    assert keys["nvidia.com/gpu.sliced.memory-mib"] == str(2 * 24576 + 16384)


MIG = PartitionProfile("1g.5gb", 4864, 7, 1, 1, tuple(Placement(n, 1) for n in range(7)))
MIG_BIG = PartitionProfile("3g.20gb", 19968, 2, 3, 4, (Placement(0, 4), Placement(4, 4)))
MIG_PLUS = PartitionProfile("1g.5gb+me", 4864, 1, 1, 1, (Placement(0, 1),))


def mig_devices(status: DevicesStatus) -> Devices:
    card = AcceleratorStatus(physical_sliced=PhysicalSliced(7, (MIG, MIG_BIG, MIG_PLUS)))
    group = DevicesGroup(
        id="a100-sxm4-40gb",
        manufacturer="nvidia",
        name="NVIDIA A100-SXM4-40GB",
        memory=40960,
        accelerators=(Accelerator("GPU-0", 0, status=card), Accelerator("GPU-1", 1, status=card)),
    )
    return Devices("n", DevicesSpec((group,)), status)


def test_partitioned_keys_from_static_ceilings(table: ManufacturerTable) -> None:
    labels = node_labels("nvidia-a100-sxm4-40gb", "40Gi")
    capacity = {"nvidia.com/gpu.partitioned": "14", "nvidia.com/gpu.sliced": "0"}
    assert desired_counting_keys(labels, capacity, mig_devices(DevicesStatus()), table) == {
        "nvidia.com/gpu.partitioned.mig-1g.5gb": "14",
        "nvidia.com/gpu.partitioned.mig-3g.20gb": "4",
        "nvidia.com/gpu.partitioned.units": str(2 * RESOURCE_MAX_UNITS),
    }


def test_partitioned_keys_follow_a_ready_ledger(table: ManufacturerTable) -> None:
    # Card 0 holds one 3g.20gb at slot 0: 1 bound, 1 more 3g and 3 x 1g still fit there.
    ready = AcceleratorAllocation(
        "GPU-0",
        0,
        Mode.PARTITIONED,
        allocated_profiles=(ProfileCount("3g.20gb", 1),),
        remaining_profiles=(ProfileCount("1g.5gb", 3), ProfileCount("3g.20gb", 1)),
    )
    # Card 1's row exists but reports no profiles: not ready, so its ceilings count.
    status = DevicesStatus(
        (
            DevicesAllocationGroup(
                "a100-sxm4-40gb", "nvidia", (ready, AcceleratorAllocation("GPU-1", 1))
            ),
        )
    )
    labels = node_labels("nvidia-a100-sxm4-40gb", "40Gi")
    keys = desired_counting_keys(
        labels, {"nvidia.com/gpu.partitioned": "14"}, mig_devices(status), table
    )
    assert keys["nvidia.com/gpu.partitioned.mig-1g.5gb"] == str(3 + 7)
    assert keys["nvidia.com/gpu.partitioned.mig-3g.20gb"] == str(2 + 2)


def test_every_offered_profile_is_emitted_even_at_zero(table: ManufacturerTable) -> None:
    full = AcceleratorAllocation(
        "GPU-0", 0, Mode.PARTITIONED, allocated_profiles=(ProfileCount("7g.40gb", 1),)
    )
    status = DevicesStatus((DevicesAllocationGroup("a100-sxm4-40gb", "nvidia", (full,)),))
    labels = node_labels("nvidia-a100-sxm4-40gb", "40Gi")
    keys = desired_counting_keys(
        labels, {"nvidia.com/gpu.partitioned": "7"}, mig_devices(status), table
    )
    assert keys["nvidia.com/gpu.partitioned.mig-3g.20gb"] == str(0 + 2)
    assert keys["nvidia.com/gpu.partitioned.mig-1g.5gb"] == str(0 + 7)


def test_patch_sets_changes_and_nulls_stale_keys(table: ManufacturerTable) -> None:
    devices = Devices("n", DevicesSpec((logical_group("nvidia", "a10g", 1, 128, True, 24576),)))
    labels = node_labels("nvidia-a10g", "24Gi")
    capacity = {
        "cpu": "8",
        "nvidia.com/gpu": "1",
        "nvidia.com/gpu.sliced": "128",
        "nvidia.com/gpu.sliced.units": str(RESOURCE_MAX_UNITS),  # already right: not repeated
        "nvidia.com/gpu.partitioned.units": "1600000",  # no partitioned token any more
        "nvidia.com/gpu.partitioned.mig-1g.5gb": "7",
        "example.com/foo.sliced.units": "5",  # not a known base: not ours
    }
    patch = node_capacity_patch(labels, capacity, devices, table)
    assert patch.desired["nvidia.com/gpu.sliced.units"] == str(RESOURCE_MAX_UNITS)
    assert patch.changed == {
        "nvidia.com/gpu.sliced.cores-percentage": "12800",
        "nvidia.com/gpu.sliced.memory-mib": "24576",
        "nvidia.com/gpu.sliced.memory-percentage": "100",
    }
    assert patch.stale == (
        "nvidia.com/gpu.partitioned.mig-1g.5gb",
        "nvidia.com/gpu.partitioned.units",
    )
    changes = patch.merge_patch()["status"]
    assert isinstance(changes, dict)
    assert changes["capacity"]["nvidia.com/gpu.partitioned.units"] is None


def test_a_key_held_in_the_api_servers_spelling_is_not_patched_again(
    table: ManufacturerTable,
) -> None:
    """The API server keeps 12800000 as `12800k`: the same value, no patch (seen on the real
    nodes: every report patched `.sliced.units` again, #35)."""
    devices = Devices("n", DevicesSpec((logical_group("nvidia", "a10g", 8, 128, True, 24576),)))
    labels = node_labels("nvidia-a10g", "24Gi")
    capacity = {"nvidia.com/gpu": "8", "nvidia.com/gpu.sliced": "1024"}
    wanted = desired_counting_keys(labels, capacity, devices, table)
    held = {**capacity, **wanted, "nvidia.com/gpu.sliced.units": "12800k"}
    assert node_capacity_patch(labels, held, devices, table).merge_patch() == {}
    held["nvidia.com/gpu.sliced.units"] = "12700k"
    assert node_capacity_patch(labels, held, devices, table).changed == {
        "nvidia.com/gpu.sliced.units": "12800000"
    }


def test_unmanaged_or_unknown_nodes_want_nothing(table: ManufacturerTable) -> None:
    devices = Devices("n", DevicesSpec((logical_group("nvidia", "a10g", 1, 128, True, 24576),)))
    capacity = {
        "nvidia.com/gpu.sliced": "128",
        "nvidia.com/gpu.sliced.units": str(RESOURCE_MAX_UNITS),
    }
    labels = node_labels("nvidia-a10g", "24Gi")
    unmanaged = {**labels, "gpustack.ai/managed": "false"}
    assert node_capacity_patch(unmanaged, capacity, devices, table).stale == (
        "nvidia.com/gpu.sliced.units",
    )
    assert desired_counting_keys(labels, capacity, None, table) == {}
    assert node_capacity_patch(labels, {}, None, table).merge_patch() == {}


def test_counting_key_classification(table: ManufacturerTable) -> None:
    assert is_counting_key("nvidia.com/gpu.sliced.memory-mib", table)
    assert is_counting_key("nvidia.com/gpu.partitioned.mig-3g.40gb", table)
    assert is_counting_key("huawei.com/npu.partitioned.units", table)
    for key in ("nvidia.com/gpu", "nvidia.com/gpu.sliced", "nvidia.com/gpu.partitioned", "cpu"):
        assert not is_counting_key(key, table)
