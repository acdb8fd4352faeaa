from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    aggregate_sliced_detail,
)
from chain.labels import accelerator_labels
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.units import RESOURCE_MAX_UNITS

MIG_CARD: dict[str, Any] = {
    "id": "GPU-b",
    "index": 1,
    "physicalIndexes": [1],
    "topology": {"pciBusId": "0000:10:1d.0", "numaAffinity": "0", "cpuAffinity": "0-23"},
    "status": {
        "unhealthy": False,
        "physicalSliced": {
            "count": 7,
            "profiles": [
                {
                    "name": "1g.5gb",
                    "memoryMib": 4864,
                    "computeSlices": 1,
                    "memorySlices": 1,
                    "count": 7,
                    "placements": [{"start": n, "length": 1} for n in range(7)],
                }
            ],
        },
    },
}

OBJECT: dict[str, Any] = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "Devices",
    "metadata": {"name": "node-a", "labels": {"kubernetes.io/os": "linux"}},
    "spec": {
        "groups": [
            {
                "id": "a100-sxm4-40gb",
                "manufacturer": "nvidia",
                "name": "NVIDIA A100-SXM4-40GB",
                "memory": 40960,
                "cores": 6912,
                "driverVersion": "535.247.01",
                "runtimeVersion": "12.2",
                "computeCapability": "8.0",
                "family": "Ampere",
                "accelerators": [
                    {
                        "id": "GPU-a",
                        "index": 0,
                        "physicalIndexes": [0],
                        "topology": {"pciBusId": "0000:10:1c.0"},
                        "status": {
                            "unhealthy": True,
                            "logicalSliced": {"count": 128, "coresPercentageOvercommit": True},
                        },
                    },
                    MIG_CARD,
                ],
                "acceleratorSlicedDetail": {
                    "logical": {"count": 128, "coresPercentageOvercommit": True},
                    "physical": {
                        "count": 7,
                        "profiles": [{"name": "1g.5gb", "count": 7, "memoryMib": 4864}],
                    },
                },
            }
        ]
    },
    "status": {
        "groups": [
            {
                "id": "a100-sxm4-40gb",
                "manufacturer": "nvidia",
                "accelerators": [
                    {
                        "id": "GPU-a",
                        "index": 0,
                        "mode": 3,
                        "remaining": 800000,
                        "allocatedSlices": 2,
                    },
                    {
                        "id": "GPU-b",
                        "index": 1,
                        "mode": 4,
                        "allocatedProfiles": [{"name": "1g.5gb", "count": 1}],
                        "remainingProfiles": [{"name": "1g.5gb", "count": 6}],
                    },
                ],
            }
        ]
    },
}


def test_round_trip_of_a_whole_object() -> None:
    devices = Devices.parse(OBJECT)
    assert devices.render() == OBJECT
    assert Devices.parse(devices.render()) == devices


def test_a_group_without_slices_says_why_and_round_trips() -> None:
    group = Devices.parse(OBJECT).spec.groups[0]
    assert group.slicing_unavailable == ""
    reason = "/var/lib/gpustack/operator/lib/nvidia/cuda-12/libvgpu.so: missing"
    gated = group.without_logical_slices(reason)
    assert not gated.offers_logical_slices and group.offers_logical_slices
    rendered = gated.render()
    assert rendered["slicingUnavailable"] == reason
    assert "logicalSliced" not in rendered["accelerators"][0]["status"]
    assert DevicesGroup.parse(rendered, "g") == gated
    assert "slicingUnavailable" not in group.render()
    with_reason = copy.deepcopy(OBJECT)
    with_reason["spec"]["groups"][0]["slicingUnavailable"] = reason
    assert Devices.parse(with_reason).render() == with_reason


def test_parsed_fields() -> None:
    devices = Devices.parse(OBJECT)
    group = devices.spec.groups[0]
    assert group.accelerator_key == "nvidia-a100-sxm4-40gb"
    whole, mig = group.accelerators
    assert whole.status.unhealthy and whole.status.logical_sliced == LogicalSliced(128, True)
    profile = mig.status.physical_sliced.profile("1g.5gb")
    assert profile is not None and profile.placements[6] == Placement(6, 1)
    assert devices.spec.group("nvidia", "a100-sxm4-40gb") is group
    assert devices.spec.group("amd", "a100-sxm4-40gb") is None
    row = devices.status.row("nvidia", "a100-sxm4-40gb", "GPU-b")
    assert row is not None and row.mode is Mode.PARTITIONED
    assert row.allocated_of("1g.5gb") == 1 and row.remaining_of("1g.5gb") == 6
    assert row.partition_ledger_ready


def test_predicates() -> None:
    group = Devices.parse(OBJECT).spec.groups[0]
    whole, mig = group.accelerators
    assert whole.is_logically_sliceable and whole.is_whole_accelerator_capable
    assert not whole.is_partitioned
    assert mig.is_partitioned and not mig.is_logically_sliceable
    assert not mig.is_whole_accelerator_capable
    plain = Accelerator("GPU-c", 2)
    assert not plain.is_logically_sliceable and plain.is_whole_accelerator_capable
    # A card reporting both is partitioned: MIG wins over logical slicing.
    both = Accelerator(
        "GPU-d",
        3,
        status=AcceleratorStatus(
            logical_sliced=LogicalSliced(128, True), physical_sliced=PhysicalSliced(7)
        ),
    )
    assert both.is_partitioned and not both.is_logically_sliceable


def test_mode_wire_values_and_names() -> None:
    assert [int(mode) for mode in Mode] == [0, 1, 2, 3, 4, 5]
    assert [str(mode) for mode in Mode] == [
        "None",
        "Exclusive",
        "Shared",
        "Sliced",
        "Partitioned",
        "Visibility",
    ]


def test_remaining_is_omitempty() -> None:
    # A fully used card has no `remaining` key; a missing row is an untouched card.
    row = AcceleratorAllocation("GPU-a", 0, Mode.EXCLUSIVE, remaining=0)
    assert row.render() == {"id": "GPU-a", "index": 0, "mode": 1}
    status = DevicesStatus.parse(
        {"groups": [{"id": "g", "manufacturer": "nvidia", "accelerators": [row.render()]}]}
    )
    assert status.remaining_of("nvidia", "g", "GPU-a") == 0
    assert status.remaining_of("nvidia", "g", "GPU-z") == RESOURCE_MAX_UNITS


def test_empty_status_renders_empty() -> None:
    assert DevicesStatus().render() == {}
    assert Devices.parse({"metadata": {"name": "n"}}).spec == DevicesSpec()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda o: o["spec"]["groups"][0]["accelerators"][1].update(index="1"),
            "spec.groups[0].accelerators[1].index: expected an integer",
        ),
        (
            lambda o: o["spec"]["groups"][0]["accelerators"][0].pop("id"),
            "spec.groups[0].accelerators[0].id: required",
        ),
        (
            lambda o: o["spec"]["groups"][0].update(memory=-1),
            "spec.groups[0].memory: expected at least 0",
        ),
        (
            lambda o: o["spec"]["groups"][0]["accelerators"][0]["status"].update(unhealthy="no"),
            "spec.groups[0].accelerators[0].status.unhealthy: expected true or false",
        ),
        (
            lambda o: o["status"]["groups"][0]["accelerators"][0].update(mode=9),
            "status.groups[0].accelerators[0].mode: unknown mode 9",
        ),
        (
            lambda o: o["status"]["groups"][0]["accelerators"][0].pop("mode"),
            "status.groups[0].accelerators[0].mode: required",
        ),
        (
            lambda o: o["spec"]["groups"].append(copy.deepcopy(o["spec"]["groups"][0])),
            "spec.groups[1]: duplicate group nvidia/a100-sxm4-40gb",
        ),
        (lambda o: o["spec"].update(groups={}), "spec.groups: expected a list"),
        (lambda o: o.update(kind="Node"), "kind: expected Devices"),
        (lambda o: o["metadata"].pop("name"), "metadata.name: required"),
        (
            lambda o: o["spec"]["groups"][0]["accelerators"][1]["status"]["physicalSliced"][
                "profiles"
            ][0]["placements"][0].update(start=True),
            "physicalSliced.profiles[0].placements[0].start: expected an integer",
        ),
    ],
)
def test_parse_errors_name_the_field(change: Any, message: str) -> None:
    broken = copy.deepcopy(OBJECT)
    change(broken)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Devices.parse(broken)


def test_aggregate_sliced_detail() -> None:
    profile = PartitionProfile("1g.10gb", 9856, 4)
    cards = [
        Accelerator("a", 0, status=AcceleratorStatus(logical_sliced=LogicalSliced(128, True))),
        Accelerator("b", 1, status=AcceleratorStatus(logical_sliced=LogicalSliced(16))),
        Accelerator(
            "c", 2, status=AcceleratorStatus(physical_sliced=PhysicalSliced(4, (profile,)))
        ),
        Accelerator(
            "d", 3, status=AcceleratorStatus(physical_sliced=PhysicalSliced(4, (profile,)))
        ),
    ]
    detail = aggregate_sliced_detail(cards)
    assert detail.logical == LogicalSliced(144, True)
    assert detail.physical.count == 8
    assert [(p.name, p.count, p.memory_mib) for p in detail.physical.profiles] == [
        ("1g.10gb", 8, 9856)
    ]
    # Overcommit only counts on cards that take slices at all.
    off = [Accelerator("e", 0, status=AcceleratorStatus(logical_sliced=LogicalSliced(0, True)))]
    assert aggregate_sliced_detail(off).logical == LogicalSliced(0, False)


def test_group_facts_give_the_device_labels_vector() -> None:
    # docs/design/vectors.md, "Device labels": the T4 group read from a Devices spec.
    group = DevicesGroup(
        id="tesla-t4",
        manufacturer="nvidia",
        name="Tesla T4",
        memory=15360,
        cores=2560,
        driver_version="580.126.09",
        runtime_version="13.0",
        compute_capability="7.5",
        family="Turing",
        accelerators=tuple(Accelerator(f"GPU-{n}", n) for n in range(4)),
    )
    labels = accelerator_labels([group.facts()])
    a = "acceleratable.feature.gpustack.ai/"
    assert labels[a + "nvidia-tesla-t4.count"] == "4"
    assert labels[a + "nvidia-tesla-t4.memory"] == "15Gi"
    assert labels[a + "nvidia-tesla-t4.product"] == "Tesla-T4"
    assert len(labels) == 11


_names = st.text("abcdefghij0123456789-", min_size=1, max_size=12)
_placements = st.builds(Placement, st.integers(0, 7), st.integers(1, 8))
_profiles = st.builds(
    PartitionProfile,
    _names,
    st.integers(0, 100_000),
    st.integers(0, 7),
    st.integers(0, 7),
    st.integers(0, 8),
    st.lists(_placements, max_size=3).map(tuple),
)
_status = st.builds(
    AcceleratorStatus,
    st.booleans(),
    st.builds(LogicalSliced, st.integers(0, 512), st.booleans()),
    st.builds(PhysicalSliced, st.integers(0, 7), st.lists(_profiles, max_size=2).map(tuple)),
)
_cards = st.builds(
    Accelerator,
    _names,
    st.integers(0, 64),
    st.one_of(st.none(), st.lists(st.integers(0, 64), max_size=2).map(tuple)),
    status=_status,
)
_rows = st.builds(
    AcceleratorAllocation,
    _names,
    st.integers(0, 64),
    st.sampled_from(list(Mode)),
    st.integers(0, RESOURCE_MAX_UNITS),
    st.integers(0, RESOURCE_MAX_UNITS),
    st.integers(0, 128),
    st.lists(st.builds(ProfileCount, _names, st.integers(0, 7)), max_size=2).map(tuple),
)


@given(_cards)
def test_card_round_trip(card: Accelerator) -> None:
    assert Accelerator.parse(card.render(), "card") == card


@given(_rows)
def test_ledger_row_round_trip(row: AcceleratorAllocation) -> None:
    assert AcceleratorAllocation.parse(row.render(), "row") == row


def test_the_summary_counts_cards_free_held_per_mode_and_slices() -> None:
    from tests.unit.nodeagent.plugin.fakes import t4_spec

    spec = t4_spec()
    group = spec.groups[0]
    ids = [card.id for card in group.accelerators]
    status = DevicesStatus(
        (
            DevicesAllocationGroup(
                group.id,
                group.manufacturer,
                (
                    AcceleratorAllocation(ids[0], 0, Mode.EXCLUSIVE),
                    AcceleratorAllocation(
                        ids[1],
                        1,
                        Mode.SLICED,
                        remaining=RESOURCE_MAX_UNITS // 2,
                        allocated_slices=3,
                    ),
                    AcceleratorAllocation(ids[2], 2, Mode.NONE, remaining=RESOURCE_MAX_UNITS),
                ),
            ),
        )
    )
    # The fourth card has no row yet: untouched, so free.
    assert Devices("node-a", spec, status).summary() == {
        "cards": 4,
        "free": 2,
        "exclusive": 1,
        "shared": 0,
        "sliced": 1,
        "partitioned": 0,
        "slices": 3,
    }
