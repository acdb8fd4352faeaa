"""The churn benchmark's short profile (issue #35, item 3): a couple of hundred Pod lifecycles
of every mode through the agent's real gRPC plugins leave nothing behind. Only invariants are
asserted, never a time or a memory figure (those are the benchmark's printout)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from benchmarks.churn import (
    PROFILES,
    MemoryApi,
    audit,
    churn,
    limits_for,
    pod_manifest,
    report,
)
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    AllocationRecord,
    rebuild_status,
    render_allocated,
)
from chain.units import RESOURCE_MAX_UNITS
from kubeapi.client import KubeError
from tests.unit.nodeagent.plugin.fakes import t4_spec

SPEC = t4_spec()
GROUP = SPEC.groups[0]
CARD = next(card.id for _, card in SPEC.cards())


def test_the_short_profile_leaves_nothing_behind_and_never_holds_a_card_twice() -> None:
    profile = PROFILES["short"]
    result = churn(profile)
    printed = "\n".join(report(result))  # every assertion says what the run printed
    # The ledger equals the records at every sample and at the end; nothing is left.
    assert result.problems() == [], printed
    assert result.left() == dict.fromkeys(result.left(), 0), printed
    outcomes = result.outcomes
    granted = sum(outcomes.granted.values())
    refused = sum(outcomes.refused.values())
    assert granted + refused == profile.lifecycles + 1, printed  # and the held Pod
    assert set(outcomes.granted) == {"exclusive", "shared", "sliced", "partitioned"}, printed
    # A refusal is the kubelet's count or the plugin's precondition, never an error.
    assert {code for _, code in outcomes.refused} <= {
        "Insufficient",
        "StatusCode.FAILED_PRECONDITION",
    }
    # Bounded: the held Pod's failing record kept the journal from emptying, so compaction did.
    lines = max(sample.journal_lines for sample in result.samples)
    assert lines <= profile.compact_lines + 1, printed
    assert any(sample.look.stuck for sample in result.samples), printed


def _pod(api: MemoryApi, name: str, record: AllocationRecord) -> dict[str, Any]:
    pod = api.add(pod_manifest(name, {"nvidia.com/gpu": "1"}))
    api.merge_patch("v1", "Pod", name, _annotation(record), namespace="churn")
    return dict(api.get("v1", "Pod", name, "churn") or pod)


def _annotation(record: AllocationRecord) -> dict[str, Any]:
    return {"metadata": {"annotations": {ALLOCATED_ANNOTATION: render_allocated({"main": record})}}}


def _exclusive() -> AllocationRecord:
    row = AcceleratorAllocation(id=CARD, index=0, mode=Mode.EXCLUSIVE, allocated=RESOURCE_MAX_UNITS)
    group = DevicesAllocationGroup(GROUP.id, GROUP.manufacturer, (row,))
    return AllocationRecord(DevicesStatus((group,)))


def test_audit_finds_a_card_held_twice_and_a_ledger_that_is_not_the_records() -> None:
    api = MemoryApi("n", [])
    pods = [_pod(api, "a", _exclusive()), _pod(api, "b", _exclusive())]
    free = rebuild_status(SPEC, []).status  # a ledger that charges nothing
    problems = audit(SPEC, pods, (), free)
    assert f"{CARD} held exclusively by 2 containers" in problems
    assert f"{CARD} promised {2 * RESOURCE_MAX_UNITS} units of {RESOURCE_MAX_UNITS}" in problems
    assert any(p.startswith(f"{CARD}: the ledger says NONE") for p in problems)
    assert audit(SPEC, [], (), free) == []


def test_memory_api_refuses_the_records_of_a_failing_pod_and_forgets_deleted_ones() -> None:
    api = MemoryApi("n", [])
    api.add(pod_manifest("held", limits_for(Mode.SLICED, random.Random(1))))
    api.failing.add("held")
    with pytest.raises(KubeError) as refused:
        api.merge_patch("v1", "Pod", "held", _annotation(_exclusive()), namespace="churn")
    assert refused.value.status == 500
    api.remove("churn", "held")
    assert api.get("v1", "Pod", "held", "churn") is None  # a retry finds the Pod gone
