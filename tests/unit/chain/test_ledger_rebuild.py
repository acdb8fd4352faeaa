"""The ledger rebuilt from the Pods' allocation annotations (docs/design/node-agent.md, "The
ledger")."""

from __future__ import annotations

import json
import random

import pytest

from chain.accelerators import (
    Accelerator,
    AcceleratorStatus,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
)
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    AllocationRecord,
    Holder,
    PodAllocations,
    charged_part,
    charging_reservations,
    free_placements,
    node_holdings,
    parse_allocated,
    rebuild_status,
    render_allocated,
)
from chain.partitions import Placement
from chain.units import RESOURCE_MAX_UNITS

P = Placement
A100_PROFILES = (
    PartitionProfile("1g.5gb", 4864, 7, 1, 1, tuple(P(n, 1) for n in range(7))),
    PartitionProfile("1g.10gb", 9856, 4, 1, 2, tuple(P(n, 2) for n in (0, 2, 4, 6))),
    PartitionProfile("2g.10gb", 9856, 3, 2, 2, tuple(P(n, 2) for n in (0, 2, 4))),
    PartitionProfile("3g.20gb", 19968, 2, 3, 4, (P(0, 4), P(4, 4))),
)


def card(index: int, slices: int = 128, mig: bool = False) -> Accelerator:
    status = (
        AcceleratorStatus(physical_sliced=PhysicalSliced(7, A100_PROFILES))
        if mig
        else AcceleratorStatus(logical_sliced=LogicalSliced(slices, True))
    )
    return Accelerator(id=f"dev-{index}", index=index, status=status)


def spec(cards: int = 2, maker: str = "nvidia", mig: bool = False) -> DevicesSpec:
    group = DevicesGroup(
        id="a10g",
        manufacturer=maker,
        name="NVIDIA A10G",
        memory=24576,
        accelerators=tuple(card(n, mig=mig) for n in range(cards)),
    )
    return DevicesSpec((group,))


def record(*claims: AcceleratorAllocation, maker: str = "nvidia") -> AllocationRecord:
    group = DevicesAllocationGroup("a10g", maker, tuple(claims))
    return AllocationRecord(DevicesStatus((group,)), ("a10g:dev-0:0000",))


def claim(
    index: int, mode: Mode, units: int, profile: str = "", placements: tuple[Placement, ...] = ()
) -> AcceleratorAllocation:
    return AcceleratorAllocation(
        id=f"dev-{index}",
        index=index,
        mode=mode,
        allocated=units,
        allocated_physical_profile=profile,
        allocated_physical_placements=placements,
    )


def pod(
    uid: str, records: dict[str, AllocationRecord], phase: str = "Running", created: str = ""
) -> PodAllocations:
    return PodAllocations(
        uid=uid, name=uid, namespace="ns", phase=phase, created=created, records=records
    )


def row(status: DevicesStatus, index: int) -> AcceleratorAllocation:
    return status.groups[0].accelerators[index]


# --- The annotation -----------------------------------------------------------------------------


def test_annotation_round_trips_and_renders_sorted() -> None:
    records = {
        "worker": record(claim(0, Mode.SLICED, 800000)),
        "main": record(claim(1, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)),
    }
    text = render_allocated(records)
    assert text.index('"main"') < text.index('"worker"')
    assert parse_allocated(text) == records
    assert json.loads(text)["worker"] == {
        "devices": {
            "groups": [
                {
                    "id": "a10g",
                    "manufacturer": "nvidia",
                    "accelerators": [{"id": "dev-0", "index": 0, "mode": 3, "allocated": 800000}],
                }
            ]
        },
        "deviceIDs": ["a10g:dev-0:0000"],
    }


@pytest.mark.parametrize("value", [None, ""])
def test_absent_or_empty_annotation_holds_nothing(value: str | None) -> None:
    assert parse_allocated(value) == {}


@pytest.mark.parametrize(
    "value",
    ["{", "[]", '{"c": 1}', '{"c": {"deviceIDs": [1]}}', '{"c": {"devices": {"groups": 3}}}'],
)
def test_broken_annotation_is_an_error(value: str) -> None:
    with pytest.raises(ValueError):
        parse_allocated(value)


def test_pod_with_broken_annotation_reports_the_problem() -> None:
    view = PodAllocations.from_pod(
        {
            "metadata": {"uid": "u1", "name": "p", "annotations": {ALLOCATED_ANNOTATION: "{"}},
            "status": {"phase": "Pending"},
        }
    )
    assert view.uid == "u1" and view.records == {} and "not JSON" in view.problem


def test_pod_view_reads_identity_phase_and_records() -> None:
    records = {"c": record(claim(0, Mode.SHARED, 160000))}
    view = PodAllocations.from_pod(
        {
            "metadata": {
                "uid": "u1",
                "name": "p",
                "namespace": "ns",
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "annotations": {ALLOCATED_ANNOTATION: render_allocated(records)},
            },
            "status": {"phase": "Succeeded"},
        }
    )
    assert view.records == records and view.terminal and not view.problem


# --- Charging rules -----------------------------------------------------------------------------


def test_finished_pod_releases_whole_shared_and_sliced_but_not_partitions() -> None:
    kept = record(
        claim(0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS),
        claim(1, Mode.SHARED, 160000),
        claim(2, Mode.SLICED, 1),
        claim(3, Mode.PARTITIONED, 320000, profile="1g.10gb"),
    )
    held = charged_part(kept, terminal=True, release=True)
    assert [c.row.mode for c in held.claims()] == [Mode.PARTITIONED]
    assert charged_part(kept, terminal=True, release=False) == kept
    assert charged_part(kept, terminal=False, release=True) == kept


@pytest.mark.parametrize(("maker", "kept"), [("metax", 1), ("cambricon", 1), ("nvidia", 0)])
def test_stateful_slices_stay_charged(maker: str, kept: int) -> None:
    held = charged_part(record(claim(0, Mode.SLICED, 1), maker=maker), terminal=True, release=True)
    assert len(list(held.claims())) == kept


def test_holdings_prefer_reservations_and_drop_vanished_pods() -> None:
    old = record(claim(0, Mode.SLICED, 100))
    new = record(claim(0, Mode.SLICED, 200))
    pods = [pod("u1", {"a": old, "b": old})]
    reservations = {Holder("u1", "a"): new, Holder("u1", "c"): new, Holder("gone", "a"): new}
    held = node_holdings(pods, reservations, release_terminated=True)
    assert held == {Holder("u1", "a"): new, Holder("u1", "b"): old, Holder("u1", "c"): new}


def test_reservations_charge_what_their_pods_records_would() -> None:
    """A finished Pod's reservation keeps only what still charges (its partition); a running
    Pod's, and one whose Pod the list does not name yet (the newest grant), charge whole."""
    whole = record(claim(0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS))
    both = record(
        claim(1, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS),
        claim(2, Mode.PARTITIONED, 320000, profile="1g.10gb"),
    )
    pods = [pod("done", {}, phase="Succeeded"), pod("failed", {}, phase="Failed"), pod("run", {})]
    reservations = {
        Holder("done", "a"): whole,
        Holder("failed", "a"): both,
        Holder("run", "a"): whole,
        Holder("new", "a"): both,
    }
    charging = charging_reservations(pods, reservations, release_terminated=True)
    assert charging == {
        Holder("failed", "a"): charged_part(both, terminal=True, release=True),
        Holder("run", "a"): whole,
        Holder("new", "a"): both,
    }
    assert [c.row.mode for c in charging[Holder("failed", "a")].claims()] == [Mode.PARTITIONED]
    assert charging_reservations(pods, reservations, release_terminated=False) == reservations


# --- Rebuild ------------------------------------------------------------------------------------


def test_free_node_has_every_card_free() -> None:
    rebuilt = rebuild_status(spec(2), [])
    assert rebuilt.status.render() == {
        "groups": [
            {
                "id": "a10g",
                "manufacturer": "nvidia",
                "accelerators": [
                    {"id": "dev-0", "index": 0, "mode": 0, "remaining": RESOURCE_MAX_UNITS},
                    {"id": "dev-1", "index": 1, "mode": 0, "remaining": RESOURCE_MAX_UNITS},
                ],
            }
        ]
    }


def test_claims_charge_their_cards_and_count_slices() -> None:
    pods = [
        pod(
            "u1",
            {"a": record(claim(0, Mode.SLICED, 400000)), "b": record(claim(0, Mode.SLICED, 1))},
        ),
        pod("u2", {"main": record(claim(1, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS))}),
    ]
    status = rebuild_status(spec(2), pods).status
    assert row(status, 0) == AcceleratorAllocation(
        "dev-0", 0, Mode.SLICED, remaining=RESOURCE_MAX_UNITS - 400001, allocated_slices=2
    )
    # A fully used card has no `remaining` key (omitempty).
    assert row(status, 1).render() == {"id": "dev-1", "index": 1, "mode": 1}


def test_remaining_never_goes_below_zero() -> None:
    pods = [pod(f"u{n}", {"c": record(claim(0, Mode.SLICED, 900000))}) for n in range(2)]
    assert row(rebuild_status(spec(1), pods).status, 0).remaining == 0


def test_finished_pods_release_with_the_switch_on_only() -> None:
    pods = [
        pod("u1", {"c": record(claim(0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS))}, phase="Succeeded")
    ]
    assert row(rebuild_status(spec(1), pods).status, 0).mode == Mode.NONE
    off = rebuild_status(spec(1), pods, release_terminated=False).status
    assert row(off, 0).mode == Mode.EXCLUSIVE
    assert rebuild_status(spec(1), pods).live_pod_uids == {"u1"}


def test_conflicting_claim_is_skipped_and_reported() -> None:
    first = pod("u1", {"c": record(claim(0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS))}, created="1")
    second = pod(
        "u2",
        {"c": record(claim(0, Mode.SHARED, 160000), claim(1, Mode.SHARED, 160000))},
        created="2",
    )
    rebuilt = rebuild_status(spec(2), [second, first])
    assert row(rebuilt.status, 0).mode == Mode.EXCLUSIVE
    assert row(rebuilt.status, 1).remaining == RESOURCE_MAX_UNITS - 160000
    assert len(rebuilt.problems) == 1 and "held in Exclusive mode" in rebuilt.problems[0]


def test_unreadable_pod_is_skipped_but_live() -> None:
    broken = PodAllocations(uid="u1", name="p", namespace="ns", problem="bad")
    rebuilt = rebuild_status(spec(1), [broken])
    assert row(rebuilt.status, 0).mode == Mode.NONE
    assert rebuilt.live_pod_uids == {"u1"}
    assert "reported free" in rebuilt.problems[0]


def test_claims_on_unknown_cards_and_without_mode_charge_nothing() -> None:
    pods = [
        pod(
            "u1",
            {
                "c": record(
                    claim(7, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS),
                    claim(0, Mode.NONE, RESOURCE_MAX_UNITS),
                )
            },
        )
    ]
    rebuilt = rebuild_status(spec(1), pods)
    assert row(rebuilt.status, 0) == AcceleratorAllocation("dev-0", 0, remaining=RESOURCE_MAX_UNITS)
    assert rebuilt.problems == ()


def test_output_does_not_depend_on_pod_order() -> None:
    pods = [
        pod(f"u{n}", {"c": record(claim(n % 3, Mode.SLICED, 1000 * n))}, created=str(n))
        for n in range(12)
    ]
    expected = rebuild_status(spec(3), pods).status.render()
    for seed in range(5):
        random.Random(seed).shuffle(pods)
        assert rebuild_status(spec(3), pods).status.render() == expected


# --- Partition fold -----------------------------------------------------------------------------


def test_empty_mig_card_offers_every_placement() -> None:
    status = rebuild_status(spec(1, mig=True), []).status
    assert row(status, 0).remaining_profiles == (
        ProfileCount("1g.10gb", 4),
        ProfileCount("1g.5gb", 7),
        ProfileCount("2g.10gb", 3),
        ProfileCount("3g.20gb", 2),
    )
    assert row(status, 0).allocated_profiles == ()


def test_bound_partitions_fold_by_placement() -> None:
    bound = claim(
        0,
        Mode.PARTITIONED,
        640000,
        profile="3g.20gb",
        placements=(P(0, 4),),
    )
    status = rebuild_status(spec(1, mig=True), [pod("u1", {"c": record(bound)})]).status
    assert row(status, 0).mode == Mode.PARTITIONED
    assert row(status, 0).allocated_profiles == (ProfileCount("3g.20gb", 1),)
    assert row(status, 0).remaining_profiles == (
        ProfileCount("1g.10gb", 2),
        ProfileCount("1g.5gb", 3),
        ProfileCount("2g.10gb", 1),
        ProfileCount("3g.20gb", 1),
    )


def test_finished_pod_keeps_its_partition() -> None:
    bound = claim(0, Mode.PARTITIONED, 1, profile="1g.5gb", placements=(P(6, 1),))
    pods = [pod("u1", {"c": record(bound)}, phase="Failed")]
    status = rebuild_status(spec(1, mig=True), pods).status
    assert row(status, 0).allocated_of("1g.5gb") == 1
    assert row(status, 0).remaining_of("1g.5gb") == 6
    assert row(status, 0).remaining_of("1g.10gb") == 3


def test_free_placements_counts_slots_overlapping_nothing() -> None:
    assert free_placements([P(0, 2), P(2, 2), P(4, 2)], [P(1, 2)]) == 1
    assert free_placements([P(0, 1)], []) == 1
