"""Properties of the allocator and the ledger over random histories on an 8-card node.

A small kubelet model hands out tokens (never one a running container still holds); the allocator
decides each grant against the ledger, the reservations and the Pods; grants are persisted into
annotations later, Pods finish and vanish in any order. After every step:

- no running container's card is promised past M units;
- no card is held in two modes;
- the rebuilt ledger is exactly the sum of the charging annotations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from chain.accelerators import Accelerator, AcceleratorStatus, LogicalSliced
from chain.allocation import (
    Code,
    GrantRequest,
    PreferenceRequest,
    Refusal,
    card_tokens,
    decide_grant,
    preferred_allocation,
    sliced_occupancy,
    sliced_room,
    units_per_token,
)
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import (
    AllocationRecord,
    CardRef,
    Holder,
    PodAllocations,
    charged_part,
    node_holdings,
    rebuild_status,
)
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.topology.choice import UNKNOWN_LINKS, best_connected

NV = "nvidia"
UNITS = (0, 1, 160000, 400000, 800000, 1200000, RESOURCE_MAX_UNITS)


class Node(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.spec = DevicesSpec()
        self.release = True
        self.pods: dict[str, PodAllocations] = {}
        self.reservations: dict[Holder, AllocationRecord] = {}
        self.serial = 0

    @initialize(slots=st.lists(st.integers(1, 6), min_size=8, max_size=8), release=st.booleans())
    def build(self, slots: list[int], release: bool) -> None:
        cards = tuple(
            Accelerator(
                id=f"GPU-{n}",
                index=n,
                status=AcceleratorStatus(logical_sliced=LogicalSliced(count, True)),
            )
            for n, count in enumerate(slots)
        )
        self.spec = DevicesSpec(
            (DevicesGroup("a10g", NV, "NVIDIA A10G", 24576, accelerators=cards),)
        )
        self.release = release

    # --- the world ------------------------------------------------------------------------------

    def _holdings(self) -> dict[Holder, AllocationRecord]:
        return node_holdings(self.pods.values(), self.reservations, self.release)

    def _running(self) -> list[AllocationRecord]:
        """Records of containers whose Pod has not finished (reserved or annotated)."""
        live = {uid for uid, pod in self.pods.items() if not pod.terminal}
        annotated = [r for uid in live for r in self.pods[uid].records.values()]
        reserved = [r for h, r in self.reservations.items() if h.pod_uid in live]
        return annotated + reserved

    def _kubelet_free(self, mode: Mode) -> list[str]:
        used = {token for record in self._running() for token in record.device_ids}
        tokens = [
            str(t)
            for group in self.spec.groups
            for card in group.accelerators
            for t in card_tokens(group.id, card, mode)
        ]
        return [t for t in tokens if t not in used]

    @staticmethod
    def _unknown(ranked: Sequence[str], must: Sequence[str], size: int) -> Sequence[str]:
        return best_connected(ranked, must, size, UNKNOWN_LINKS)

    # --- steps ----------------------------------------------------------------------------------

    @rule(
        data=st.data(),
        mode=st.sampled_from((Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED)),
        count=st.integers(1, 2),
        units=st.sampled_from(UNITS),
        use_hint=st.booleans(),
    )
    def allocate(
        self, data: st.DataObject, mode: Mode, count: int, units: int, use_hint: bool
    ) -> None:
        free = self._kubelet_free(mode)
        if len(free) < count:
            return
        self.serial += 1
        holder = Holder(f"pod-{self.serial}", "main")
        holdings = self._holdings()
        occupancy = sliced_occupancy(holdings)
        status = rebuild_status(self.spec, self.pods.values(), self.release).status
        chosen: tuple[str, ...] = ()
        if use_hint:
            room = {
                CardRef(NV, card.id): sliced_room(occupancy, CardRef(NV, card.id), holder)
                for _, card in self.spec.cards()
            }
            request = PreferenceRequest(
                NV, mode, tuple(free), (), count, min(units, RESOURCE_MAX_UNITS)
            )
            chosen = preferred_allocation(self.spec, status, request, room)
            # The best-connected choice over an unknown matrix is the packing hint exactly.
            unknown = preferred_allocation(self.spec, status, request, room, self._unknown)
            assert unknown == chosen
        if not chosen:
            chosen = tuple(data.draw(st.permutations(free))[:count])
        grant = GrantRequest(NV, mode, chosen, holder, units_per_token(units))
        try:
            record = decide_grant(self.spec, status, self.reservations, grant, occupancy)
        except Refusal as refusal:
            assert refusal.code == Code.FAILED_PRECONDITION, refusal.message
            return
        self.pods[holder.pod_uid] = PodAllocations(uid=holder.pod_uid, name=holder.pod_uid)
        self.reservations[holder] = record

    @rule(data=st.data())
    def persist(self, data: st.DataObject) -> None:
        if not self.reservations:
            return
        holder = data.draw(st.sampled_from(sorted(self.reservations)))
        pod = self.pods[holder.pod_uid]
        records = {**pod.records, holder.container: self.reservations.pop(holder)}
        self.pods[holder.pod_uid] = replace(pod, records=records)

    @rule(data=st.data(), phase=st.sampled_from(("Succeeded", "Failed")))
    def finish(self, data: st.DataObject, phase: str) -> None:
        if self.pods:
            uid = data.draw(st.sampled_from(sorted(self.pods)))
            self.pods[uid] = replace(self.pods[uid], phase=phase)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        if self.pods:
            uid = data.draw(st.sampled_from(sorted(self.pods)))
            del self.pods[uid]
            self.reservations = {h: r for h, r in self.reservations.items() if h.pod_uid != uid}

    # --- invariants -----------------------------------------------------------------------------

    @invariant()
    def running_cards_are_never_over_promised_nor_mixed(self) -> None:
        units: dict[str, int] = {}
        modes: dict[str, set[Mode]] = {}
        for record in self._running():
            for claim in record.claims():
                units[claim.row.id] = units.get(claim.row.id, 0) + claim.row.allocated
                modes.setdefault(claim.row.id, set()).add(claim.row.mode)
        assert all(total <= RESOURCE_MAX_UNITS for total in units.values()), units
        assert all(len(held) == 1 for held in modes.values()), modes

    @invariant()
    def charging_cards_are_held_in_one_mode(self) -> None:
        modes: dict[str, set[Mode]] = {}
        for record in self._holdings().values():
            for claim in record.claims():
                modes.setdefault(claim.row.id, set()).add(claim.row.mode)
        assert all(len(held) == 1 for held in modes.values()), modes

    @invariant()
    def ledger_is_the_sum_of_the_annotations(self) -> None:
        rebuilt = rebuild_status(self.spec, self.pods.values(), self.release)
        assert rebuilt.problems == ()
        assert rebuilt.live_pod_uids == set(self.pods)
        expected: dict[str, tuple[Mode, int, int]] = {}
        for pod in self.pods.values():
            for record in pod.records.values():
                for claim in charged_part(record, pod.terminal, self.release).claims():
                    _, used, slices = expected.get(claim.row.id, (Mode.NONE, 0, 0))
                    expected[claim.row.id] = (
                        claim.row.mode,
                        used + claim.row.allocated,
                        slices + (claim.row.mode == Mode.SLICED),
                    )
        for _, row in rebuilt.status.rows():
            mode, used, slices = expected.get(row.id, (Mode.NONE, 0, 0))
            assert (row.mode, row.remaining, row.allocated_slices) == (
                mode,
                max(RESOURCE_MAX_UNITS - used, 0),
                slices,
            )


Node.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestNode = Node.TestCase
