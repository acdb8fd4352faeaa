from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from chain import units


def test_constants() -> None:
    assert units.RESOURCE_MAX_UNITS == 1_600_000 == 2**9 * 5**5
    assert units.CREDITS_PER_ACCELERATOR == units.RESOURCE_MAX_UNITS
    assert units.SHARE_UNITS == 160_000
    assert units.PERCENT_UNITS == 16_000
    assert units.SHARED_MAX_OWNERS == 10
    assert units.SLICED_MAX_SIZE == 512
    assert units.MAX_QUEUE_FLAVORS == 64
    assert units.NODE_DEVICES_RETRY_AFTER_SECONDS == 30


def test_queue_nominal_credits() -> None:
    # docs/design/vectors.md, "Queues": 1 card -> 1,600,000 credits, 5 cards -> 8,000,000.
    assert units.accelerators_to_credits(1) == 1_600_000
    assert units.accelerators_to_credits(5) == 8_000_000
    assert units.accelerators_to_credits(0) == 0


def test_credits_to_accelerators() -> None:
    assert units.credits_to_accelerators(8_000_000) == 5
    assert units.credits_to_accelerators(800_000) == Fraction(1, 2)
    assert units.credits_to_micro_accelerators(800_000) == 500_000
    # A fraction of a credit rounds up to one credit, which is 0.625 micro-cards -> 0 at micro.
    assert units.credits_to_micro_accelerators(Fraction(1, 3)) == 0
    assert units.credits_to_micro_accelerators(1_600) == 1_000
    assert units.credits_to_micro_accelerators(Fraction(1599, 1)) == 999
    # The credits are rounded up before the division (a floor here would give 999).
    assert units.credits_to_micro_accelerators(Fraction(3199, 2)) == 1_000


def test_pod_fold_vectors() -> None:
    # docs/design/vectors.md, "Pod webhook fold", card of 40960 MiB.
    assert units.memory_percentage_to_units(20) == 320_000
    assert units.memory_mib_to_units(4096, 40960) == 160_000
    # A 96 GiB profile on a 96 GiB card is one whole card.
    assert units.memory_mib_to_units(96 * 1024, 96 * 1024) == units.RESOURCE_MAX_UNITS


def test_memory_mib_to_units_edges() -> None:
    assert units.memory_mib_to_units(4096, 0) == 0
    assert units.memory_mib_to_units(4096, -1) == 0
    # Floored, never rounded up past what the memory is worth.
    assert units.memory_mib_to_units(1, 3) == 533_333


def test_views_counts() -> None:
    assert units.units_to_shares(units.RESOURCE_MAX_UNITS) == 10
    assert units.units_to_shares(480_000) == 3
    assert units.units_to_shares(159_999) == 0
    assert units.units_to_percent(units.RESOURCE_MAX_UNITS) == 100
    assert units.units_to_percent(1_280_000) == 80


@given(st.integers(min_value=0, max_value=100))
def test_percent_round_trip(percent: int) -> None:
    assert units.units_to_percent(units.memory_percentage_to_units(percent)) == percent


@given(st.integers(min_value=0, max_value=10_000_000), st.integers(min_value=1, max_value=10**6))
def test_memory_units_never_exceed_share_of_card(mib: int, card: int) -> None:
    got = units.memory_mib_to_units(mib, card)
    assert got * card <= mib * units.RESOURCE_MAX_UNITS < (got + 1) * card
