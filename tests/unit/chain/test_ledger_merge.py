"""The busier of the published and the rebuilt ledger, card by card."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chain.accelerators import Accelerator
from chain.fit import free_shares, free_slice_units, free_slots, remaining
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger import ProfileCount as PC
from chain.ledger_rebuild import rebuild_status
from chain.units import RESOURCE_MAX_UNITS
from tests.unit.chain.test_ledger_rebuild import A100_PROFILES, card, claim, pod, record, row, spec
from verdictdriver.ledger_merge import busier_ledger, busier_row

PROFILES = tuple(p.name for p in A100_PROFILES)
HELD_MODES = (Mode.NONE, Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED)


def room(accelerator: Accelerator, entry: AcceleratorAllocation | None) -> tuple[int, ...]:
    """Every measure of free room the fit reads from a row (larger: more room)."""
    partition_ready = (
        entry is not None
        and entry.partition_ledger_ready
        and entry.mode in (Mode.NONE, Mode.PARTITIONED)
    )
    instances = tuple(
        entry.remaining_of(name) if entry is not None and partition_ready else 0
        for name in PROFILES
    )
    return (
        remaining(entry),
        free_slots(accelerator, entry),
        free_shares(accelerator, entry),
        free_slice_units(accelerator, entry),
        *instances,
    )


def _profile_counts(upper: int) -> st.SearchStrategy[tuple[PC, ...]]:
    return st.lists(
        st.tuples(st.sampled_from(PROFILES), st.integers(0, upper)),
        max_size=4,
        unique_by=lambda t: t[0],
    ).map(lambda items: tuple(PC(name, count) for name, count in items))


ROWS = st.none() | st.builds(
    AcceleratorAllocation,
    id=st.just("dev-0"),
    index=st.just(0),
    mode=st.sampled_from(HELD_MODES),
    remaining=st.integers(0, RESOURCE_MAX_UNITS),
    allocated_slices=st.integers(0, 5),
    allocated_profiles=_profile_counts(7),
    remaining_profiles=_profile_counts(7),
)


@settings(max_examples=400)
@given(mig=st.booleans(), published=ROWS, rebuilt=ROWS)
def test_merged_row_never_offers_more_than_either_reading(
    mig: bool, published: AcceleratorAllocation | None, rebuilt: AcceleratorAllocation | None
) -> None:
    accelerator = card(0, slices=4, mig=mig)
    merged = busier_row(published, rebuilt)
    for reading in (published, rebuilt):
        assert all(
            m <= r
            for m, r in zip(room(accelerator, merged), room(accelerator, reading), strict=True)
        ), (reading, merged)


def test_a_card_granted_in_an_annotation_is_busy_before_the_agent_writes_it() -> None:
    node = spec(2)
    published = DevicesStatus()  # the agent has not written the grant yet
    rebuilt = rebuild_status(
        node, [pod("p", {"c": record(claim(1, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS))})]
    ).status
    merged = busier_ledger(node, published, rebuilt)
    assert remaining(row(merged, 1)) == 0 and row(merged, 1).mode == Mode.EXCLUSIVE
    assert remaining(row(merged, 0)) == RESOURCE_MAX_UNITS


def test_a_ledger_written_without_annotations_passes_unchanged() -> None:
    # The demo's admission scene: status written by hand, no Pod carries an annotation.
    node = spec(2)
    rows = (
        AcceleratorAllocation(
            "dev-0", 0, Mode.SLICED, remaining=RESOURCE_MAX_UNITS // 2, allocated_slices=1
        ),
        AcceleratorAllocation("dev-1", 1, Mode.NONE, remaining=RESOURCE_MAX_UNITS),
    )
    published = DevicesStatus((DevicesAllocationGroup("a10g", "nvidia", rows),))
    assert busier_ledger(node, published, rebuild_status(node, []).status) == published


def test_the_agents_later_write_wins_where_it_is_busier() -> None:
    node = spec(2)
    rebuilt = rebuild_status(
        node, [pod("p", {"c": record(claim(0, Mode.SLICED, RESOURCE_MAX_UNITS // 4))})]
    ).status
    rows = (
        AcceleratorAllocation(
            "dev-0", 0, Mode.SLICED, remaining=RESOURCE_MAX_UNITS // 2, allocated_slices=2
        ),
    )
    published = DevicesStatus((DevicesAllocationGroup("a10g", "nvidia", rows),))
    merged = row(busier_ledger(node, published, rebuilt), 0)
    assert (merged.mode, merged.remaining, merged.allocated_slices) == (
        Mode.SLICED,
        RESOURCE_MAX_UNITS // 2,
        2,
    )


def test_two_held_modes_leave_the_card_offering_nothing() -> None:
    a = AcceleratorAllocation("dev-0", 0, Mode.SHARED, remaining=RESOURCE_MAX_UNITS // 2)
    b = AcceleratorAllocation(
        "dev-0", 0, Mode.SLICED, remaining=RESOURCE_MAX_UNITS // 2, allocated_slices=1
    )
    merged = busier_row(a, b)
    assert merged is not None and merged.remaining == 0
    assert free_shares(card(0), merged) == 0 and free_slice_units(card(0), merged) == -1


def test_partition_instances_count_only_when_both_readings_report_them() -> None:
    node = spec(1, mig=True)
    rebuilt = rebuild_status(
        node, [pod("p", {"c": record(claim(0, Mode.PARTITIONED, 0, "1g.5gb", ()))})]
    ).status
    assert row(rebuilt, 0).partition_ledger_ready
    not_ready = busier_ledger(node, DevicesStatus(), rebuilt)
    assert not row(not_ready, 0).partition_ledger_ready  # the agent has not reported yet
    reported = AcceleratorAllocation(
        "dev-0", 0, Mode.PARTITIONED, remaining=0, remaining_profiles=(PC("1g.5gb", 3),)
    )
    published = DevicesStatus((DevicesAllocationGroup("a10g", "nvidia", (reported,)),))
    merged = row(busier_ledger(node, published, rebuilt), 0)
    assert merged.remaining_of("1g.5gb") == min(3, row(rebuilt, 0).remaining_of("1g.5gb"))
