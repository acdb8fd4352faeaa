"""A storm: 200 admissions in random mixes of modes over 8 simulated cards on 4 nodes, through
kubelet emulators and real gRPC, with Pods leaving now and then. After every step no card is
promised past M units or its slice slots, no card is held in two modes, and the ledger rebuilt
from the written annotations equals the sum of those annotations."""

from __future__ import annotations

import random
from collections import defaultdict
from contextlib import ExitStack

from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import PodAllocations, rebuild_status
from chain.units import RESOURCE_MAX_UNITS
from testbed.kubelet import AdmissionError
from tests.unit.nodeagent.plugin.fakes import GPU, SHARED, SLICED, Rig, rig, t4_spec

STEPS = 200
NODES = 4


def request(draw: random.Random) -> dict[str, str]:
    mode = draw.choice(["exclusive", "shared", "sliced", "sliced"])
    if mode == "exclusive":
        return {GPU: "1"}
    if mode == "shared":
        return {SHARED: "1"}
    units = draw.choice([100000, 400000, 800000, 1200000])
    return {SLICED: "1", SLICED + ".units": str(units), SLICED + ".memory-percentage": "10"}


def check(r: Rig, spec: DevicesSpec) -> int:
    """The invariants on one node; returns how many claims it holds."""
    pods = [PodAllocations.from_pod(pod) for pod in r.cluster.pods()]
    units: dict[str, int] = defaultdict(int)
    modes: dict[str, set[Mode]] = defaultdict(set)
    slices: dict[str, int] = defaultdict(int)
    claims = 0
    for pod in pods:
        assert not pod.problem
        for record in pod.records.values():
            for claim in record.claims():
                claims += 1
                units[claim.row.id] += claim.row.allocated
                modes[claim.row.id].add(claim.row.mode)
                slices[claim.row.id] += claim.row.mode == Mode.SLICED
    rebuilt = rebuild_status(spec, pods)
    assert rebuilt.problems == ()
    for group, card in spec.cards():
        assert units[card.id] <= RESOURCE_MAX_UNITS, f"{card.id} over-promised: {units[card.id]}"
        assert len(modes[card.id]) <= 1, f"{card.id} held in {modes[card.id]}"
        assert slices[card.id] <= card.status.logical_sliced.count
        row = rebuilt.status.row(group.manufacturer, group.id, card.id)
        assert row is not None
        assert row.remaining == RESOURCE_MAX_UNITS - units[card.id]
        assert row.mode == next(iter(modes[card.id]), Mode.NONE)
    live = {pod.uid: pod for pod in pods}
    for holder, reserved in dict(r.node.reserved()).items():
        pod = live.get(holder.pod_uid)  # a vanished Pod's reservation waits for the next prune
        assert pod is None or pod.records.get(holder.container) in (reserved, None)
    return claims


def test_storm_keeps_every_card_consistent() -> None:
    draw = random.Random(20261130)
    spec = DevicesSpec(t4_spec("l4x2").groups)
    assert len(list(spec.cards())) == 2  # 2 cards x 4 nodes = 8 cards
    granted = refused = 0
    codes: dict[str, int] = defaultdict(int)
    with ExitStack() as stack:
        rigs = [stack.enter_context(rig(spec=spec)) for _ in range(NODES)]
        for r in rigs:
            r.ready()
        admitted: list[list[dict[str, object]]] = [[] for _ in rigs]
        for step in range(STEPS):
            n = draw.randrange(NODES)
            r = rigs[n]
            if admitted[n] and draw.random() < 0.25:
                gone = admitted[n].pop(draw.randrange(len(admitted[n])))
                r.cluster.remove(str(gone["metadata"]["name"]))  # type: ignore[index]
                r.kubelet.forget(gone)
                r.node.notify()  # what the Pod watch does when a Pod is deleted
            pod = r.cluster.add(f"s{step}", ("main", request(draw)))
            try:
                r.kubelet.admit(pod)
                granted += 1
                admitted[n].append(pod)
            except AdmissionError as error:
                refused += 1
                codes[str(error.code)] += 1
                r.cluster.remove(f"s{step}")  # a failed admission is final
            for other, spec_rig in zip(rigs, [spec] * NODES, strict=True):
                check(other, spec_rig)
    assert granted + refused == STEPS
    # Refusals are capacity (kubelet sees too few healthy tokens) or the plugin's own
    # FailedPrecondition (cross-mode, sliced gate); never a failed identification or a timeout.
    assert set(codes) <= {"Insufficient", "StatusCode.FAILED_PRECONDITION"}
    assert granted > STEPS // 4
