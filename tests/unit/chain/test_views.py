"""The view arithmetic on its own: invariants over random pools, and the small helpers."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from chain.accelerators import AcceleratorStatus, LogicalSliced, PartitionProfile, PhysicalSliced
from chain.ledger import AcceleratorAllocation, Mode, ProfileCount
from chain.pool_cards import runtime_versions
from chain.pool_nodes import PoolCard, PoolNode
from chain.units import RESOURCE_MAX_UNITS
from chain.views import View, accelerator_views, cpu_view

PROFILES = ("1g.10gb", "3g.40gb")
_catalog = PhysicalSliced(
    7, (PartitionProfile(PROFILES[0], 9728, 7), PartitionProfile(PROFILES[1], 40192, 2))
)
_capability = st.sampled_from(
    [
        AcceleratorStatus(),
        AcceleratorStatus(logical_sliced=LogicalSliced(128, True)),
        AcceleratorStatus(physical_sliced=_catalog),
    ]
)
_counts = st.tuples(*(st.integers(0, 7) for _ in PROFILES)).map(
    lambda counts: tuple(ProfileCount(n, c) for n, c in zip(PROFILES, counts, strict=True))
)
_rows = st.one_of(
    st.none(),
    st.builds(
        lambda mode, left, allocated, free: AcceleratorAllocation(
            "x", 0, mode, remaining=left, allocated_profiles=allocated, remaining_profiles=free
        ),
        st.sampled_from([m for m in Mode if m != Mode.VISIBILITY]),
        st.integers(0, RESOURCE_MAX_UNITS),
        _counts,
        _counts,
    ),
)
_cards = st.builds(lambda cap, row: PoolCard("x", cap, row), _capability, _rows)
_nodes = st.lists(
    st.builds(
        lambda cards: PoolNode("n", "nvidia", "", "", tuple(cards)), st.lists(_cards, max_size=8)
    ),
    max_size=6,
)


def _ok(view: View) -> bool:
    return 0 <= view.once_max_request <= view.remaining <= view.capacity


@given(_nodes)
def test_views_never_promise_more_than_they_have(nodes: list[PoolNode]) -> None:
    views = accelerator_views(nodes)
    cards = [c for node in nodes for c in node.cards]
    whole = [c for c in cards if not c.partitioned]
    assert _ok(views.exclusive) and views.exclusive.capacity == len(whole)
    assert _ok(views.shared) and views.shared.capacity == 10 * len(whole)
    assert _ok(views.sliced)
    pt = views.partitioned
    assert pt.view.once_max_request in (0, 1)
    assert pt.view.remaining <= pt.view.capacity == 7 * (len(cards) - len(whole))
    assert pt.view.once_max_request == (1 if pt.view.remaining else 0)
    # Every offered profile is listed (0 allowed) as soon as one partitioned card exists.
    names = [entry.name for entry in pt.remaining_profiles]
    assert names == (list(PROFILES) if len(whole) < len(cards) else [])
    assert all(entry.count > 0 for entry in pt.allocated_profiles)
    # SH's once counts cards, so it never exceeds the largest node's card count.
    assert views.shared.once_max_request <= max((len(n.cards) for n in nodes), default=0)


def test_cpu_view() -> None:
    assert cpu_view(Fraction(72), Fraction(0), (4, 16, 48)) == View(48, 72, 72)
    assert cpu_view(Fraction(72), Fraction(87, 2), (4, 16, 48)) == View(
        Fraction(57, 2), Fraction(57, 2), 72
    )
    assert cpu_view(Fraction(64), Fraction(66), (16, 48)) == View(0, 0, 64)
    assert cpu_view(Fraction(0), Fraction(0), ()) == View(0, 0, 0)


def test_runtime_versions() -> None:
    assert runtime_versions(["12.8", "12.4.1", "12.4", "n/a", "11.8", "", "13"]) == [
        "11.8",
        "12.4",
        "12.8",
        "13",
    ]
    # Numeric, not string, order: 9.2 comes before 10.1 and 12.10 after 12.9.
    assert runtime_versions(["12.10", "10.1", "9.2", "12.9"]) == ["9.2", "10.1", "12.9", "12.10"]
