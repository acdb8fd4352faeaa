"""Partitioned grants: profile, packing, prior reuse, cross-mode, record, healthy set
(docs/design/node-agent.md, "Allocate")."""

from __future__ import annotations

import pytest

from chain.accelerators import Accelerator, AcceleratorStatus, PartitionProfile, PhysicalSliced
from chain.allocation import Code, Refusal, token_pool
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.ledger_rebuild import AllocationRecord, CardRef, Holder, PodAllocations, rebuild_status
from chain.manufacturers import manufacturers
from chain.partitions import Placement
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.plugin.partition_grant import (
    PartitionRequest,
    choose_site,
    decide_partition,
    occupied_placements,
    partition_health,
    partition_room,
    prior_partition,
    requested_profile,
    with_partition_id,
)

P = Placement
NVIDIA = manufacturers({})["nvidia"]
KEY = "nvidia.com/gpu.partitioned.mig-"
A100_PROFILES = (
    PartitionProfile("1g.5gb", 4864, 7, 1, 1, tuple(P(n, 1) for n in range(7))),
    PartitionProfile("1g.10gb", 9856, 4, 1, 2, tuple(P(n, 2) for n in (0, 2, 4, 6))),
    PartitionProfile("2g.10gb", 9856, 3, 2, 2, tuple(P(n, 2) for n in (0, 2, 4))),
    PartitionProfile("3g.20gb", 19968, 2, 3, 4, (P(0, 4), P(4, 4))),
)
ME = Holder("uid-me", "main")


def card(index: int, unhealthy: bool = False) -> Accelerator:
    status = AcceleratorStatus(
        unhealthy=unhealthy, physical_sliced=PhysicalSliced(7, A100_PROFILES)
    )
    return Accelerator(id=f"dev-{index}", index=index, status=status)


def spec(cards: int = 2, unhealthy: tuple[int, ...] = ()) -> DevicesSpec:
    group = DevicesGroup(
        id="a100",
        manufacturer="nvidia",
        name="NVIDIA A100-SXM4-40GB",
        memory=40960,
        accelerators=tuple(card(n, n in unhealthy) for n in range(cards)),
    )
    return DevicesSpec((group,))


def partition(index: int, profile: str, slot: Placement, units: int = 1) -> AllocationRecord:
    row = AcceleratorAllocation(
        id=f"dev-{index}",
        index=index,
        mode=Mode.PARTITIONED,
        allocated=units,
        allocated_physical_profile=profile,
        allocated_physical_placements=(slot,),
    )
    group = DevicesAllocationGroup("a100", "nvidia", (row,))
    return AllocationRecord(DevicesStatus((group,)), (f"a100:dev-{index}:0000",))


def request(
    profile: str, ids: tuple[str, ...] = ("a100:dev-0:0003",), units: int = 0
) -> PartitionRequest:
    return PartitionRequest("nvidia", ids, ME, profile, units)


def row(status: DevicesStatus, index: int) -> AcceleratorAllocation:
    found = status.row("nvidia", "a100", f"dev-{index}")
    assert found is not None
    return found


# --- the profile asked for ----------------------------------------------------------------------


def test_profile_comes_from_the_partitioned_profile_key() -> None:
    keys = ["nvidia.com/gpu.partitioned", "nvidia.com/gpu.partitioned.units", KEY + "3g.20gb"]
    assert requested_profile(NVIDIA, keys) == "3g.20gb"


def test_no_profile_key_is_a_failed_precondition() -> None:
    with pytest.raises(Refusal) as caught:
        requested_profile(NVIDIA, ["nvidia.com/gpu.partitioned", "cpu"])
    assert caught.value.code == Code.FAILED_PRECONDITION


def test_two_profiles_are_refused() -> None:
    with pytest.raises(Refusal) as caught:
        requested_profile(NVIDIA, [KEY + "1g.5gb", KEY + "3g.20gb"])
    assert caught.value.code == Code.FAILED_PRECONDITION


# --- where it goes ------------------------------------------------------------------------------


def test_token_pools_of_a_partitioned_card() -> None:
    modes = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED, Mode.VISIBILITY)
    pools = [token_pool(card(0), mode) for mode in modes]
    assert pools == [0, 0, 0, 7, 512]


def test_packs_onto_the_most_occupied_card_at_the_lowest_free_slot() -> None:
    occupied = {CardRef("nvidia", "dev-1"): [P(0, 1)]}
    site = choose_site(spec(3), "nvidia", "1g.5gb", occupied)
    assert (site.card.id, site.placement) == ("dev-1", P(1, 1))


def test_a_card_whose_free_slots_all_overlap_is_skipped() -> None:
    occupied = {CardRef("nvidia", "dev-0"): [P(0, 1), P(4, 1)]}
    site = choose_site(spec(2), "nvidia", "3g.20gb", occupied)
    assert (site.card.id, site.placement) == ("dev-1", P(0, 4))


def test_unhealthy_cards_are_never_chosen() -> None:
    site = choose_site(spec(2, unhealthy=(0,)), "nvidia", "1g.5gb", {})
    assert site.card.id == "dev-1"


def test_no_card_with_room_is_resource_exhausted() -> None:
    full = {CardRef("nvidia", f"dev-{n}"): [P(0, 4), P(4, 4)] for n in range(2)}
    with pytest.raises(Refusal) as caught:
        choose_site(spec(2), "nvidia", "1g.5gb", full)
    assert caught.value.code == Code.RESOURCE_EXHAUSTED
    assert "no card on this node can host" in caught.value.message
    assert "of partition profile 1g.5gb" in caught.value.message


def test_unknown_profile_is_resource_exhausted() -> None:
    with pytest.raises(Refusal) as caught:
        choose_site(spec(1), "nvidia", "7g.80gb", {})
    assert caught.value.code == Code.RESOURCE_EXHAUSTED


def test_prior_grant_is_reused_from_reservation_then_annotation() -> None:
    reserved = partition(1, "3g.20gb", P(4, 4))
    annotated = partition(0, "3g.20gb", P(0, 4))
    prior = prior_partition(ME, {ME: reserved}, {"main": annotated}, "nvidia")
    assert prior is not None and prior.row.id == "dev-1"
    prior = prior_partition(ME, {}, {"main": annotated}, "nvidia")
    assert prior is not None and prior.row.id == "dev-0"
    occupied = occupied_placements({ME: annotated}, "nvidia")
    site = choose_site(spec(2), "nvidia", "3g.20gb", occupied, prior)
    assert (site.card.id, site.placement) == ("dev-0", P(0, 4))  # its own slot, not a new one


def test_a_prior_of_another_profile_is_not_reused() -> None:
    prior = next(partition(1, "1g.5gb", P(6, 1)).claims())
    site = choose_site(spec(2), "nvidia", "3g.20gb", {}, prior)
    assert (site.card.id, site.placement) == ("dev-0", P(0, 4))


# --- the grant ----------------------------------------------------------------------------------


def test_grant_records_profile_slot_and_memory_units() -> None:
    grant = decide_partition(spec(2), DevicesStatus(), {}, {}, None, request("3g.20gb"))
    (claim,) = list(grant.record.claims())
    assert claim.row.mode == Mode.PARTITIONED
    assert claim.row.allocated == 19968 * RESOURCE_MAX_UNITS // 40960
    assert claim.row.allocated_physical_profile == "3g.20gb"
    assert claim.row.allocated_physical_placements == (P(0, 4),)
    assert grant.record.device_ids == ("a100:dev-0:0003",)
    named = with_partition_id(grant.record, "MIG-abc")
    assert next(named.claims()).row.allocated_physical_id == "MIG-abc"


def test_partitioned_units_limit_wins_over_memory() -> None:
    grant = decide_partition(spec(1), DevicesStatus(), {}, {}, None, request("1g.5gb", units=5))
    assert next(grant.record.claims()).row.allocated == 5


def test_cross_mode_is_refused_with_the_vector_message() -> None:
    whole = AcceleratorAllocation("dev-0", 0, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
    held = DevicesStatus((DevicesAllocationGroup("a100", "nvidia", (whole,)),))
    with pytest.raises(Refusal) as caught:
        decide_partition(spec(1), held, {}, {}, None, request("1g.5gb"))
    assert caught.value.code == Code.FAILED_PRECONDITION
    assert caught.value.message == (
        "card dev-0 is held in Exclusive mode, cannot allocate it in Partitioned mode"
    )


def test_cross_mode_sees_other_containers_reservations() -> None:
    other = Holder("uid-other", "main")
    row_ = AcceleratorAllocation("dev-0", 0, Mode.SHARED, 160000)
    reserved = AllocationRecord(DevicesStatus((DevicesAllocationGroup("a100", "nvidia", (row_,)),)))
    with pytest.raises(Refusal) as caught:
        decide_partition(spec(1), DevicesStatus(), {other: reserved}, {}, None, request("1g.5gb"))
    assert "held in Shared mode" in caught.value.message


@pytest.mark.parametrize(
    ("ids", "code"),
    [
        (("a100:dev-0:0000", "a100:dev-0:0001"), Code.FAILED_PRECONDITION),
        (("nonsense",), Code.INVALID_ARGUMENT),
        (("a100:dev-9:0000",), Code.FAILED_PRECONDITION),
    ],
)
def test_bad_tokens_are_refused(ids: tuple[str, ...], code: Code) -> None:
    with pytest.raises(Refusal) as caught:
        decide_partition(spec(1), DevicesStatus(), {}, {}, None, request("1g.5gb", ids))
    assert caught.value.code == code


# --- the ledger and the healthy set -------------------------------------------------------------


def test_empty_card_fold_vector() -> None:
    status = rebuild_status(spec(1), []).status
    assert row(status, 0).remaining_profiles == (
        ProfileCount("1g.10gb", 4),
        ProfileCount("1g.5gb", 7),
        ProfileCount("2g.10gb", 3),
        ProfileCount("3g.20gb", 2),
    )


def test_ledger_counts_a_granted_partition() -> None:
    grant = decide_partition(spec(1), DevicesStatus(), {}, {}, None, request("3g.20gb"))
    pod = PodAllocations("uid-me", records={"main": grant.record})
    status = rebuild_status(spec(1), [pod]).status
    assert row(status, 0).allocated_profiles == (ProfileCount("3g.20gb", 1),)
    assert row(status, 0).remaining_of("3g.20gb") == 1
    assert row(status, 0).remaining_of("1g.5gb") == 3
    assert row(status, 0).remaining == RESOURCE_MAX_UNITS - 19968 * RESOURCE_MAX_UNITS // 40960


def test_room_is_held_plus_the_most_of_one_profile_still_fitting() -> None:
    assert partition_room(spec(2), "nvidia", rebuild_status(spec(2), []).status) == 14
    held = PodAllocations("u", records={"c": partition(0, "3g.20gb", P(0, 4))})
    status = rebuild_status(spec(2), [held]).status
    assert partition_room(spec(2), "nvidia", status) == (1 + 3) + 7


def test_unhealthy_card_gives_no_room_and_unpublished_card_its_count() -> None:
    sick = spec(2, unhealthy=(1,))
    assert partition_room(sick, "nvidia", rebuild_status(sick, []).status) == 7
    assert partition_room(spec(2), "nvidia", DevicesStatus()) == 14


def test_health_marks_held_tokens_first_then_fills_to_room() -> None:
    taken = PodAllocations("u", records={"c": partition(1, "3g.20gb", P(0, 4))})
    status = rebuild_status(spec(2), [taken]).status
    held = "a100:dev-1:40000006"
    health = partition_health(spec(2), "nvidia", status, [held, "other:x:0000"])
    assert len(health) == 14  # every token advertised, never removed
    healthy = [str(token) for token, ok in health if ok]
    assert len(healthy) == 11
    assert held in healthy
    assert healthy[:10] == [f"a100:dev-0:{40_000_000 + n}" for n in range(7)] + [
        f"a100:dev-1:{40_000_000 + n}" for n in range(3)
    ]
