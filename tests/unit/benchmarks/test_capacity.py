"""The time-to-capacity benchmark's pure parts: first times a number was reached, percentiles,
the pool's numbers read from its objects, and the chain's writes counted from an audit log."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from benchmarks.capacity import Join, Pool, held_ledger
from benchmarks.capacity_events import (
    DRIVER,
    DRIVER_USER,
    METACONTROLLER,
    Series,
    Spread,
    chain_writes,
    fed_flavors,
    feeders_at,
    flavor_cards,
    minimum_per_node,
    objects_written,
    per_node,
    queue_cards,
    revision,
    view_cards,
    writes_by_kind,
)

T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"


def test_a_series_says_when_a_target_was_first_reached_after_a_moment() -> None:
    series = Series()
    for at, value in ((1.0, 8), (2.0, 8), (3.0, 16), (4.0, 8), (5.0, 24)):
        series.add(at, value)
    assert series.points == [(1.0, 8), (3.0, 16), (4.0, 8), (5.0, 24)]
    assert series.latest() == 24
    assert series.first_at_least(2.5, 16) == 0.5
    assert series.first_at_least(3.5, 16) == 0.0  # already there at that moment
    assert series.first_at_least(4.0, 24) == 1.0
    assert series.first_at_least(5.5, 32) is None


def test_spread_is_the_median_the_99th_percentile_and_the_worst() -> None:
    spread = Spread.of([0.1 * i for i in range(1, 101)])
    assert spread is not None
    assert (spread.count, round(spread.p50, 1), round(spread.p99, 1)) == (100, 5.1, 9.9)
    assert round(spread.worst, 1) == 10.0
    assert Spread.of([]) is None
    join = Join(flavor=0.5, quota=1.5, view=0.2, admitted=None)
    assert join.capacity == 1.5 and not join.complete


def test_the_pools_numbers_are_read_from_its_objects() -> None:
    flavor = {"metadata": {"labels": {f"{T4}.capacity": "24"}}}
    assert flavor_cards(flavor, T4) == 24 and flavor_cards({}, T4) == 0
    res = {"name": "credits.gpustack.ai/nvidia", "nominalQuota": "12800000"}
    flavors = [{"resources": [res]}, {"resources": [res]}]
    queue = {"spec": {"resourceGroups": [{"flavors": flavors}]}}
    assert queue_cards(queue, "credits.gpustack.ai/nvidia") == 16
    status = {"accelerator": {"capacity": "24", "remaining": "23"}}
    assert view_cards({"status": status}) == (24, 23) and view_cards({}) == (0, 0)
    summary = {"spec": {"flavors": [{"name": "a"}, {"name": "b"}]}}
    assert fed_flavors([summary, {}]) == {"a", "b"}


def test_who_still_fed_a_deleted_flavor_is_read_by_revision_not_by_arrival() -> None:
    generic, cpu = frozenset({"generic"}), frozenset({"cpu"})
    versions = {
        # labelled before the deletion (revision 20), its change delivered after it: not a feeder
        "n1": [(10, generic), (15, cpu)],
        # still generic at revision 20, labelled only after it: a feeder
        "n2": [(12, generic), (25, cpu)],
        # first seen after the deletion: not a feeder
        "n3": [(30, generic)],
        # deleted before: not a feeder
        "n4": [(5, generic), (18, frozenset())],
    }
    assert feeders_at(versions, "generic", 20) == ["n2"]
    assert feeders_at(versions, "generic", 11) == ["n1", "n4"]
    assert revision({"metadata": {"resourceVersion": "42"}}) == 42
    assert revision({}) == 0


def _versioned(kind: str, name: str, rev: int, **meta: object) -> dict[str, object]:
    return {"kind": kind, "metadata": {"name": name, "resourceVersion": str(rev), **meta}}


def test_a_flavor_held_by_a_finalizer_was_deleted_when_the_chain_asked() -> None:
    pool = Pool()
    summary = _versioned("NodeFlavors", "n1", 10)
    summary["spec"] = {"flavors": [{"name": "generic"}]}
    pool.on_summary("ADDED", summary, 1.0)
    pool.on_flavor("ADDED", _versioned("ResourceFlavor", "generic", 5), 1.0)
    labelled = _versioned("NodeFlavors", "n1", 15)
    labelled["spec"] = {"flavors": [{"name": "cpu"}]}
    pool.on_summary("MODIFIED", labelled, 2.0)
    deleting = _versioned("ResourceFlavor", "generic", 20, deletionTimestamp="now")
    pool.on_flavor("MODIFIED", deleting, 3.0)
    # a new node's summary names the flavor after the deletion was asked, before Kueue let go
    newcomer = _versioned("NodeFlavors", "n2", 25)
    newcomer["spec"] = {"flavors": [{"name": "generic"}]}
    pool.on_summary("ADDED", newcomer, 3.5)
    pool.on_flavor("DELETED", _versioned("ResourceFlavor", "generic", 30), 4.0)
    deleted = pool.flavors[-1]
    assert (deleted.kind, deleted.revision) == ("DELETED", 20)
    assert pool.feeders(deleted) == []


def test_a_held_ledger_takes_the_first_cards_whole() -> None:
    rows = held_ledger("n", 4, 1)["status"]["groups"][0]["accelerators"]
    assert [(r["mode"], r["remaining"]) for r in rows][:2] == [(1, 0), (0, 1_600_000)]


def _event(agent: str, user: str, verb: str, resource: str, at: str, **extra: object) -> str:
    return json.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "userAgent": agent,
            "user": {"username": user},
            "objectRef": {"resource": resource, "name": extra.get("name", "x"), **extra},
            "responseStatus": {"code": extra.get("code", 200)},
            "requestReceivedTimestamp": at,
        }
    )


def test_the_chains_writes_are_counted_from_the_audit_log() -> None:
    lines = [
        _event("metacontroller/v0.0.0", "admin", "update", "nodes", "2026-12-04T10:00:01.5Z"),
        _event("metacontroller/v0.0.0", "admin", "create", "nodeflavors", "2026-12-04T10:00:02Z"),
        _event("python-requests/2", DRIVER_USER, "patch", "poolcards", "2026-12-04T10:00:03Z"),
        _event("python-requests/2", "admin", "create", "nodes", "2026-12-04T10:00:03Z"),
        _event("kueue/v0.19.2", "admin", "update", "clusterqueues", "2026-12-04T10:00:03Z"),
        _event("metacontroller/v0.0.0", "admin", "update", "nodes", "2026-12-04T10:00:09Z"),
        "not json",
        json.dumps({"stage": "ResponseStarted"}),
    ]
    since = datetime(2026, 12, 4, 10, 0, 1, tzinfo=UTC)
    until = datetime(2026, 12, 4, 10, 0, 5, tzinfo=UTC)
    writes = chain_writes(lines, since, until)
    assert [(w.who, w.resource) for w in writes] == [
        (METACONTROLLER, "nodes"),
        (METACONTROLLER, "nodeflavors"),
        (DRIVER, "poolcards"),
    ]
    counts = writes_by_kind(writes)
    assert ((DRIVER, "patch", "poolcards", ""), 0.5) in per_node(counts, 2)
    assert objects_written(writes, "nodes") == {"x": 1}


def test_the_fewest_writes_per_node_fall_towards_two_as_more_join_at_once() -> None:
    assert minimum_per_node(1) == 9
    assert minimum_per_node(100) == 2.07
