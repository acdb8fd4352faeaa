"""Lost members kept listed for the grace (docs/fleet.md, "A member turning inactive"): the pure
rule from the JSON fixtures in `fixtures/lost/`, then the gateway's pass keeping a lost member in
the pool's members (what the MultiKueueConfig lists) while it leaves every sum."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from chain.fleet_pools import FLEET_POOL, MAX_MEMBERS, MEMBERS_LOST_SINCE, FleetPoolView
from workergateway.lost import (
    keep_lost,
    parse_lost_since,
    render_lost_since,
)

from .test_gateway import START, Fleet

CASES = Path(__file__).parent / "fixtures" / "lost"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"


def _cases() -> list[str]:
    return sorted(path.stem for path in CASES.glob("*.json"))


def test_there_are_cases() -> None:
    assert len(_cases()) >= 10


@pytest.mark.parametrize("case", _cases())
def test_case(case: str) -> None:
    fixture: dict[str, Any] = json.loads((CASES / f"{case}.json").read_text())
    assert fixture["description"]
    now = datetime.strptime(fixture["now"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    if "error" in fixture:
        with pytest.raises(ValueError) as raised:
            parse_lost_since(fixture["annotation"])
        assert str(raised.value).startswith(fixture["error"])
        return
    kept = keep_lost(
        fixture["listed"],
        fixture["current"],
        fixture["lost"],
        parse_lost_since(fixture["annotation"]),
        now,
        timedelta(seconds=fixture["graceSeconds"]),
        room=fixture.get("room", MAX_MEMBERS - len(fixture["current"])),
    )
    expected = fixture["expected"]
    assert list(kept.members) == expected["members"]
    assert (render_lost_since(kept.lost_since) if kept.lost_since else None) == expected[
        "annotation"
    ]
    assert list(kept.dropped) == expected["dropped"]


def test_what_is_rendered_reads_back() -> None:
    lost = {"b": START, "a": START + timedelta(seconds=61)}
    assert parse_lost_since(render_lost_since(lost)) == lost
    assert render_lost_since(lost).index('"a"') < render_lost_since(lost).index('"b"')


def _annotation(fleet: Fleet) -> str | None:
    obj = fleet.manager.of_kind(FLEET_POOL)[T4]
    found: str | None = (obj["metadata"].get("annotations") or {}).get(MEMBERS_LOST_SINCE)
    return found


def test_a_lost_member_stays_listed_for_the_grace_and_leaves_every_sum_at_once() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    report = fleet.gateway.run_pass()
    spec = fleet.pools()[T4]
    summed: dict[str, Any] = fleet.expected(leave_out={"east"})[T4]  # type: ignore[assignment]
    assert report.kept_lost == {T4: ["east"]}
    assert spec["members"] == ["west", "east"]  # what the MultiKueueConfig lists
    assert spec["memberSummary"] == "1/2 west"
    for key in ("accelerator", "acceleratorShared", "acceleratorSliced", "quota", "memberViews"):
        assert spec[key] == summed[key]
    assert _annotation(fleet) == '{"east": "2026-12-04T15:00:00Z"}'
    FleetPoolView.parse(fleet.manager.of_kind(FLEET_POOL)[T4])  # the hooks read it
    fleet.now = START + timedelta(seconds=899)
    fleet.manager.calls.clear()
    fleet.gateway.run_pass()
    assert fleet.pools()[T4]["members"] == ["west", "east"]
    assert [call for call in fleet.manager.calls if call[0] != "list"] == []  # nothing new
    fleet.now = START + timedelta(seconds=900)
    fleet.gateway.run_pass()
    assert fleet.pools()[T4] == summed
    assert _annotation(fleet) is None


def test_a_member_back_within_the_grace_is_summed_and_its_entry_cleared() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    fleet.gateway.run_pass()
    fleet.now = START + timedelta(seconds=300)
    fleet.set_active("east", True)
    report = fleet.gateway.run_pass()
    assert report.kept_lost == {}
    assert fleet.pools() == fleet.fixture["fleet"]
    assert _annotation(fleet) is None


def test_an_unreadable_member_is_kept_as_a_lost_one() -> None:
    """Kueue may still reach a member the gateway cannot read: its Workloads there are Kueue's
    to follow, so it stays listed too."""
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.unreachable.add("east")
    report = fleet.gateway.run_pass()
    assert "east" in report.unreadable
    assert fleet.pools()[T4]["members"] == ["west", "east"]


def test_the_time_survives_a_restarted_gateway() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    fleet.gateway.run_pass()
    restarted = Fleet("two-members", grace=900)
    restarted.manager = fleet.manager
    restarted.now = START + timedelta(seconds=600)
    restarted.gateway.manager = fleet.manager
    restarted.gateway.clock = lambda: restarted.now
    restarted.gateway.run_pass()
    assert _annotation(restarted) == '{"east": "2026-12-04T15:00:00Z"}'
    restarted.now = START + timedelta(seconds=900)
    restarted.gateway.run_pass()
    assert restarted.pools()[T4]["members"] == ["west"]


def test_a_malformed_annotation_counts_from_now_and_is_written_over() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    fleet.gateway.run_pass()
    obj = fleet.manager.of_kind(FLEET_POOL)[T4]
    obj["metadata"]["annotations"] = {MEMBERS_LOST_SINCE: "east=long ago"}
    fleet.manager.put(obj)
    fleet.now = START + timedelta(seconds=600)
    fleet.gateway.run_pass()
    # Kept longer, never shorter: the grace now runs from this pass.
    assert fleet.pools()[T4]["members"] == ["west", "east"]
    assert _annotation(fleet) == '{"east": "2026-12-04T15:10:00Z"}'
