"""The allocator's rules: tokens, costs, cross-mode, the sliced gate, the packing hint
(docs/design/node-agent.md, "Allocate")."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from chain.accelerators import Accelerator, AcceleratorStatus, LogicalSliced, PhysicalSliced
from chain.allocation import (
    PREFERRED_ID_ANNOTATION,
    PREFERRED_INDEX_ANNOTATION,
    Code,
    DeviceToken,
    GrantRequest,
    PreferenceRequest,
    Refusal,
    card_tokens,
    decide_grant,
    grant_units,
    plugin_resource,
    plugin_socket,
    preferred_allocation,
    preferred_cards,
    served_modes,
    sliced_occupancy,
    sliced_room,
    token_pool,
    units_per_token,
    visibility_owner,
)
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import (
    AllocationRecord,
    CardRef,
    Holder,
    PodAllocations,
    node_holdings,
    rebuild_status,
)
from chain.manufacturers import ManufacturerTable
from chain.units import RESOURCE_MAX_UNITS

NV = "nvidia"
MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED, Mode.VISIBILITY)


def card(index: int, slices: int = 128, partitions: int = 0) -> Accelerator:
    status = (
        AcceleratorStatus(physical_sliced=PhysicalSliced(partitions))
        if partitions
        else AcceleratorStatus(logical_sliced=LogicalSliced(slices, True))
    )
    return Accelerator(id=f"dev-{index}", index=index, status=status)


def spec(cards: int = 8, slices: int = 128) -> DevicesSpec:
    group = DevicesGroup(
        id="a10g",
        manufacturer=NV,
        name="NVIDIA A10G",
        memory=24576,
        accelerators=tuple(card(n, slices) for n in range(cards)),
    )
    return DevicesSpec((group,))


def token(index: int, share: int = 0) -> str:
    return str(DeviceToken("a10g", f"dev-{index}", share))


def ref(index: int) -> CardRef:
    return CardRef(NV, f"dev-{index}")


def grant(
    mode: Mode, *ids: str, pod: str = "p1", container: str = "c", units: int = 0
) -> GrantRequest:
    return GrantRequest(NV, mode, ids, Holder(pod, container), units_per_token(units))


def ledger(rows: dict[int, tuple[Mode, int]], cards: int = 8) -> DevicesStatus:
    built = tuple(
        AcceleratorAllocation(f"dev-{n}", n, mode=mode, remaining=left)
        for n in range(cards)
        for mode, left in [rows.get(n, (Mode.NONE, RESOURCE_MAX_UNITS))]
    )
    return DevicesStatus((DevicesAllocationGroup("a10g", NV, built),))


def refused(call: Callable[[], object]) -> Refusal:
    with pytest.raises(Refusal) as caught:
        call()
    return caught.value


# --- Tokens -------------------------------------------------------------------------------------


def test_token_format_pads_the_index_to_four_digits() -> None:
    assert token(0) == "a10g:dev-0:0000"
    assert token(0, 160000) == "a10g:dev-0:160000"
    assert str(DeviceToken("g", "GPU-1", 127)) == "g:GPU-1:0127"
    assert DeviceToken.parse("g:GPU-1:0127") == DeviceToken("g", "GPU-1", 127)


@pytest.mark.parametrize("text", ["a:b", "a:b:c:0", ":b:0", "a::0", "a:b:", "a:b:-1", "a:b:x"])
def test_token_parse_refuses_malformed_ids(text: str) -> None:
    with pytest.raises(ValueError):
        DeviceToken.parse(text)


def test_token_pools_of_an_unpartitioned_card() -> None:
    pools = [token_pool(card(0, slices=128), mode) for mode in MODES]
    assert pools == [1, 10, 128, 0, 512]


def test_token_pools_of_a_partitioned_card() -> None:
    pools = [token_pool(card(0, partitions=7), mode) for mode in MODES]
    assert pools == [0, 0, 0, 7, 512]


def test_shared_tokens_count_units() -> None:
    tokens = card_tokens("a10g", card(0), Mode.SHARED)
    assert [t.index for t in tokens] == [20_000_000 + n * 160000 for n in range(10)]
    assert str(tokens[-1]) == "a10g:dev-0:21440000"


def test_one_device_id_names_one_resource() -> None:
    """The kubelet routes a device's health by its ID alone (v1.36): no ID is a token of two
    resources, or a health change in one plugin would reach a Pod of another."""
    plain = card(0)
    seen: dict[str, Mode] = {}
    for mode in (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.VISIBILITY):
        for token in card_tokens("g", plain, mode):
            assert seen.setdefault(str(token), mode) == mode, (str(token), seen[str(token)], mode)
    assert str(card_tokens("g", plain, Mode.EXCLUSIVE)[0]) == "g:dev-0:0000"
    partitioned = card_tokens("g", card(0, partitions=7), Mode.PARTITIONED)
    assert str(partitioned[0]) == "g:dev-0:40000000"


def test_plugin_resources_and_sockets(table: ManufacturerTable) -> None:
    nvidia, amd = table["nvidia"], table["amd"]
    assert [plugin_resource(nvidia, mode) for mode in served_modes(nvidia)] == [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/gpu.sliced",
        "nvidia.com/gpu.partitioned",
        "device.gpustack.ai/nvidia.visibility",
    ]
    assert Mode.PARTITIONED not in served_modes(amd)
    assert served_modes(nvidia, shared=False, sliced=False) == (
        Mode.EXCLUSIVE,
        Mode.PARTITIONED,
        Mode.VISIBILITY,
    )
    assert plugin_socket("nvidia", Mode.SLICED) == "nvidia.sliced.sock"


# --- Cost ---------------------------------------------------------------------------------------


def test_ledger_cost_per_grant() -> None:
    assert grant_units(Mode.EXCLUSIVE, 1, 1) == 1600000
    assert grant_units(Mode.SHARED, 1, 1) == 160000
    assert grant_units(Mode.SLICED, units_per_token(400000), 1) == 400000
    assert grant_units(Mode.SLICED, units_per_token(0), 1) == 1
    assert grant_units(Mode.SLICED, 1000000, 2) == RESOURCE_MAX_UNITS


def test_grant_record_shape() -> None:
    record = decide_grant(
        spec(), ledger({}), {}, grant(Mode.SLICED, token(3), token(1), units=400000), {}
    )
    assert record.device_ids == ("a10g:dev-1:0000", "a10g:dev-3:0000")
    assert record.devices.render() == {
        "groups": [
            {
                "id": "a10g",
                "manufacturer": NV,
                "accelerators": [
                    {"id": "dev-1", "index": 1, "mode": 3, "allocated": 400000},
                    {"id": "dev-3", "index": 3, "mode": 3, "allocated": 400000},
                ],
            }
        ]
    }


# --- Cross-mode ---------------------------------------------------------------------------------


def test_shared_onto_a_card_exclusive_in_the_ledger_is_refused() -> None:
    error = refused(
        lambda: decide_grant(
            spec(), ledger({0: (Mode.EXCLUSIVE, 0)}), {}, grant(Mode.SHARED, token(0)), {}
        )
    )
    assert error.code == Code.FAILED_PRECONDITION
    assert (
        error.message == "card dev-0 is held in Exclusive mode, cannot allocate it in Shared mode"
    )


def test_shared_onto_a_card_exclusive_by_reservation_is_refused() -> None:
    first = decide_grant(spec(), ledger({}), {}, grant(Mode.EXCLUSIVE, token(0), pod="a"), {})
    reservations = {Holder("a", "c"): first}
    error = refused(
        lambda: decide_grant(
            spec(), ledger({}), reservations, grant(Mode.SHARED, token(0), pod="b"), {}
        )
    )
    assert error.code == Code.FAILED_PRECONDITION


@pytest.mark.parametrize("order", [(Mode.EXCLUSIVE, Mode.SHARED), (Mode.SHARED, Mode.EXCLUSIVE)])
def test_exclusive_and_shared_on_one_card_exactly_one_wins(order: tuple[Mode, Mode]) -> None:
    reservations: dict[Holder, AllocationRecord] = {}
    granted = 0
    for number, mode in enumerate(order):
        holder = Holder(f"p{number}", "c")
        try:
            reservations[holder] = decide_grant(
                spec(), ledger({}), reservations, GrantRequest(NV, mode, (token(0),), holder), {}
            )
            granted += 1
        except Refusal as error:
            assert error.code == Code.FAILED_PRECONDITION
    assert granted == 1


def test_sliced_onto_sliced_is_fine() -> None:
    first = decide_grant(spec(), ledger({}), {}, grant(Mode.SLICED, token(0), pod="a"), {})
    status = ledger({0: (Mode.SLICED, RESOURCE_MAX_UNITS - 1)})
    decide_grant(
        spec(), status, {Holder("a", "c"): first}, grant(Mode.SLICED, token(0, 1), pod="b"), {}
    )


def test_identical_exclusive_pods_get_distinct_cards() -> None:
    """Kubelet offers only tokens it has not handed out; the hint picks among those."""
    node = spec(2)
    taken: list[str] = []
    reservations: dict[Holder, AllocationRecord] = {}
    for name in ("a", "b"):
        offered = tuple(t for t in (token(0), token(1)) if t not in taken)
        hint = preferred_allocation(
            node, ledger({}, 2), PreferenceRequest(NV, Mode.EXCLUSIVE, offered), {}
        )
        reservations[Holder(name, "c")] = decide_grant(
            node, ledger({}, 2), reservations, grant(Mode.EXCLUSIVE, *hint, pod=name), {}
        )
        taken.extend(hint)
    cards = [next(r.claims()).row.id for r in reservations.values()]
    assert sorted(cards) == ["dev-0", "dev-1"]


def test_two_shares_of_one_card_are_refused() -> None:
    error = refused(
        lambda: decide_grant(
            spec(), ledger({}), {}, grant(Mode.SHARED, token(0), token(0, 160000)), {}
        )
    )
    assert error.code == Code.FAILED_PRECONDITION


def test_grant_keeps_kubelets_spelling_of_the_ids() -> None:
    record = decide_grant(spec(), ledger({}), {}, grant(Mode.SLICED, "a10g:dev-0:1"), {})
    assert record.device_ids == ("a10g:dev-0:1",)


def test_malformed_and_unknown_tokens_are_refused() -> None:
    assert refused(
        lambda: decide_grant(spec(), ledger({}), {}, grant(Mode.SLICED, "x"), {})
    ).code == (Code.INVALID_ARGUMENT)
    unknown = str(DeviceToken("a10g", "dev-99", 0))
    assert refused(
        lambda: decide_grant(spec(), ledger({}), {}, grant(Mode.SLICED, unknown), {})
    ).code == (Code.FAILED_PRECONDITION)
    node = DevicesSpec(
        (DevicesGroup("a100", NV, "A100", 40960, accelerators=(card(0, partitions=7),)),)
    )
    mig = str(DeviceToken("a100", "dev-0", 0))
    assert (
        "offers no Exclusive tokens"
        in refused(
            lambda: decide_grant(node, DevicesStatus(), {}, grant(Mode.EXCLUSIVE, mig), {})
        ).message
    )


# --- Sliced gate --------------------------------------------------------------------------------


def holding(units: int, phase: str = "Running", uid: str = "old") -> PodAllocations:
    record = decide_grant(spec(), ledger({}), {}, grant(Mode.SLICED, token(0), units=units), None)
    return PodAllocations(uid=uid, phase=phase, records={"c": record})


def gate(
    pods: list[PodAllocations], units: int, on: bool = True, release: bool = True
) -> AllocationRecord:
    occupancy = sliced_occupancy(node_holdings(pods, {}, release)) if on else None
    status = rebuild_status(spec(), pods, release).status
    return decide_grant(
        spec(), status, {}, grant(Mode.SLICED, token(0, 1), pod="new", units=units), occupancy
    )


def pct(percent: int) -> int:
    return percent * RESOURCE_MAX_UNITS // 100


def test_gate_refuses_a_slice_past_the_card() -> None:
    error = refused(lambda: gate([holding(pct(60))], pct(50)))
    assert error.code == Code.FAILED_PRECONDITION
    assert error.message == "card dev-0 has 640000 of 1600000 units free and the slice needs 800000"


def test_gate_lets_an_exactly_filling_slice_in() -> None:
    gate([holding(pct(50))], pct(50))


def test_gate_ignores_what_a_finished_pod_released() -> None:
    gate([holding(pct(60), phase="Succeeded")], pct(60))
    with pytest.raises(Refusal):
        gate([holding(pct(60), phase="Succeeded")], pct(60), release=False)


def test_gate_off_lets_the_slice_in() -> None:
    gate([holding(pct(60))], pct(50), on=False)


def test_gate_counts_slice_slots() -> None:
    node = spec(1, slices=2)
    pods = [
        PodAllocations(
            uid=f"u{n}",
            records={
                "c": decide_grant(node, DevicesStatus(), {}, grant(Mode.SLICED, token(0, n)), None)
            },
        )
        for n in range(2)
    ]
    occupancy = sliced_occupancy(node_holdings(pods, {}, True))
    error = refused(
        lambda: decide_grant(
            node, DevicesStatus(), {}, grant(Mode.SLICED, token(0, 1), pod="new"), occupancy
        )
    )
    assert error.message == "card dev-0 already hosts 2 of its 2 slices"


def test_gate_does_not_count_the_retrying_container_itself() -> None:
    mine = holding(pct(60), uid="new")
    occupancy = sliced_occupancy(node_holdings([mine], {}, True))
    assert sliced_room(occupancy, ref(0), Holder("new", "c")) == RESOURCE_MAX_UNITS
    assert sliced_room(occupancy, ref(0), Holder("other", "c")) == RESOURCE_MAX_UNITS - pct(60)


# --- Packing hint -------------------------------------------------------------------------------


def hint(
    remaining: list[int],
    units: int = 800000,
    size: int = 1,
    must: tuple[str, ...] = (),
    preferred: frozenset[str] = frozenset(),
    mode: Mode = Mode.SLICED,
    status: DevicesStatus | None = None,
    use_room: bool = True,
) -> tuple[str, ...]:
    node = spec(len(remaining))
    offered = tuple(token(n) for n in range(len(remaining)))
    room = {ref(n): left for n, left in enumerate(remaining)} if use_room else {}
    request = PreferenceRequest(NV, mode, offered, must, size, units, preferred)
    return preferred_allocation(node, status or ledger({}, len(remaining)), request, room)


@pytest.mark.parametrize(
    ("remaining", "units", "card"),
    [
        (
            [
                RESOURCE_MAX_UNITS,
                RESOURCE_MAX_UNITS,
                RESOURCE_MAX_UNITS,
                RESOURCE_MAX_UNITS,
                800000,
                RESOURCE_MAX_UNITS,
                1280000,
                RESOURCE_MAX_UNITS,
            ],
            800000,
            4,
        ),
        ([RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS], 320000, 0),
        ([1280000, RESOURCE_MAX_UNITS], 800000, 0),
        ([200000, RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS], 800000, 1),
    ],
)
def test_hint_packs_onto_the_fullest_card_that_fits(
    remaining: list[int], units: int, card: int
) -> None:
    assert hint(remaining, units) == (token(card),)


def test_hint_falls_back_to_the_ledger_remaining() -> None:
    status = ledger({0: (Mode.SLICED, 200000), 1: (Mode.SLICED, 900000)}, 3)
    assert hint([0, 0, 0], status=status, use_room=False) == (token(1),)


def test_hint_skips_cards_held_in_another_mode() -> None:
    status = ledger({0: (Mode.EXCLUSIVE, 0)}, 2)
    assert hint(
        [RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS], units=0, mode=Mode.SHARED, status=status
    ) == (token(1),)


def test_hint_skips_cards_a_reservation_holds_in_another_mode() -> None:
    """A grant the ledger does not show yet (its record not on its Pod): the card it holds in
    another mode is not named, though the kubelet still offers it (#35)."""
    node, status = spec(2), ledger({}, 2)
    shared = decide_grant(node, status, {}, grant(Mode.SHARED, token(0), pod="a"), {})
    offered = (token(0), token(1))
    exclusive = PreferenceRequest(NV, Mode.EXCLUSIVE, offered)
    assert preferred_allocation(node, status, exclusive, {}) == (token(0),)
    assert preferred_allocation(node, status, exclusive, {}, reservations=[shared]) == (token(1),)
    # Its own mode stays on offer: shares pack onto the shared card.
    sharing = PreferenceRequest(NV, Mode.SHARED, offered)
    assert preferred_allocation(node, status, sharing, {}, reservations=[shared]) == (token(0),)
    # No other card: no hint, and Allocate refuses what the kubelet then picks.
    alone = PreferenceRequest(NV, Mode.EXCLUSIVE, (token(0),))
    assert preferred_allocation(node, status, alone, {}, reservations=[shared]) == ()


def test_hint_keeps_must_include_tokens_first() -> None:
    assert hint([RESOURCE_MAX_UNITS, 900000, RESOURCE_MAX_UNITS], size=2, must=(token(2),)) == (
        token(2),
        token(1),
    )


def test_hint_honours_preferred_cards() -> None:
    assert hint(
        [RESOURCE_MAX_UNITS, 900000, RESOURCE_MAX_UNITS], preferred=frozenset({"dev-2"})
    ) == (token(2),)
    # A preferred card that is not offered: the size is filled from the deferred cards,
    # which were deferred in packing order.
    assert hint([RESOURCE_MAX_UNITS, 900000], preferred=frozenset({"dev-9"})) == (token(1),)


def test_a_must_include_card_of_a_later_group_counts_toward_the_size() -> None:
    """Two card models on one node: the card kubelet must include is in the second group. The
    hint names as many devices as asked (it once took two of the first group, then the must)."""
    first = spec(2).groups[0]
    second = DevicesGroup("a100", NV, "NVIDIA A100", 40960, accelerators=(card(5),))
    node = DevicesSpec((first, second))
    rows = (AcceleratorAllocation("dev-5", 5, remaining=RESOURCE_MAX_UNITS),)
    status = DevicesStatus((*ledger({}, 2).groups, DevicesAllocationGroup("a100", NV, rows)))
    must = str(DeviceToken("a100", "dev-5", 0))
    request = PreferenceRequest(NV, Mode.EXCLUSIVE, (token(0), token(1)), (must,), 2)
    assert preferred_allocation(node, status, request, {}) == (token(0), must)


def test_a_multi_card_hint_asks_its_choice_among_the_ranked_cards() -> None:
    """`choose` gets the first tier in packing order, the must cards and the card count; with
    too few preferred cards, every preferred card is a must and the others are chosen from."""
    asked: list[tuple[tuple[str, ...], tuple[str, ...], int]] = []

    def last(ranked: Sequence[str], must: Sequence[str], size: int) -> Sequence[str]:
        asked.append((tuple(ranked), tuple(must), size))
        return (*must, *ranked[len(must) - size :])

    node, status = spec(4), ledger({}, 4)
    offered = tuple(token(n) for n in range(4))
    request = PreferenceRequest(NV, Mode.EXCLUSIVE, offered, (token(3),), 3)
    assert preferred_allocation(node, status, request, {}, last) == (token(3), token(1), token(2))
    assert asked[-1] == (("dev-0", "dev-1", "dev-2"), ("dev-3",), 3)
    preferring = PreferenceRequest(NV, Mode.EXCLUSIVE, offered, (), 3, 0, frozenset({"dev-2"}))
    assert preferred_allocation(node, status, preferring, {}, last) == (
        token(2),
        token(1),
        token(3),
    )
    assert asked[-1] == (("dev-0", "dev-1", "dev-3"), ("dev-2",), 3)
    # One card: packing alone, the choice is not asked.
    single = PreferenceRequest(NV, Mode.EXCLUSIVE, offered, (), 1)
    assert preferred_allocation(node, status, single, {}, last) == (token(0),)
    assert len(asked) == 2


def test_hint_gives_nothing_when_short() -> None:
    assert hint([RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS], size=3) == ()
    assert hint([RESOURCE_MAX_UNITS], mode=Mode.PARTITIONED) == ()
    assert hint([RESOURCE_MAX_UNITS], mode=Mode.VISIBILITY) == ()


def test_misfit_cards_fill_the_size_emptiest_first() -> None:
    assert hint([100000, 300000, 200000], size=2) == (token(1), token(2))


def test_preferred_cards_from_annotations() -> None:
    node = spec(4)
    assert preferred_cards({PREFERRED_ID_ANNOTATION: " dev-1, dev-3 ,"}, node, NV) == {
        "dev-1",
        "dev-3",
    }
    assert preferred_cards({PREFERRED_INDEX_ANNOTATION: "0,2,x,9"}, node, NV) == {"dev-0", "dev-2"}
    both = {PREFERRED_ID_ANNOTATION: "dev-1", PREFERRED_INDEX_ANNOTATION: "0"}
    assert preferred_cards(both, node, NV) == {"dev-1"}
    assert preferred_cards({}, node, NV) == frozenset()


# --- Visibility ---------------------------------------------------------------------------------


def owner_record(*cards: int) -> AllocationRecord:
    return decide_grant(
        spec(), ledger({}), {}, grant(Mode.EXCLUSIVE, *(token(n) for n in cards)), None
    )


def test_visibility_shows_the_owner_reservation_first() -> None:
    reserved, annotated = owner_record(1), owner_record(2)
    pod = PodAllocations(uid="p", records={"a": annotated})
    reservations = {Holder("p", "z"): reserved, Holder("p", "ssh"): owner_record(3)}
    owner = visibility_owner(Holder("p", "ssh"), pod, reservations, spec(), NV, 1)
    assert owner == (Holder("p", "z"), reserved)


def test_visibility_falls_back_to_the_lowest_named_annotated_container() -> None:
    pod = PodAllocations(uid="p", records={"b": owner_record(1), "a": owner_record(2, 3)})
    holder, owner = visibility_owner(Holder("p", "ssh"), pod, {}, spec(), NV, 2)
    assert holder == Holder("p", "a")
    assert [c.row.id for c in owner.claims()] == ["dev-2", "dev-3"]


def test_visibility_fails_closed() -> None:
    me = Holder("p", "ssh")
    broken = PodAllocations(uid="p", problem="not JSON")
    alone = PodAllocations(uid="p", records={"ssh": owner_record(1)})
    two = PodAllocations(uid="p", records={"a": owner_record(1, 2)})
    for pod in (broken, alone, None, two):
        with pytest.raises(Refusal) as caught:
            visibility_owner(me, pod, {}, spec(), NV, 1)
        assert caught.value.code == Code.FAILED_PRECONDITION
