"""The lifecycle keeper's stop rules: which queues it drains and which types it marks inactive."""

from __future__ import annotations

from typing import Any

import pytest

from verdictdriver.stops import stop_writes

Obj = dict[str, Any]
RECORD = "schedule.gpustack.ai/stop-policy"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"


def _queue(
    stop: str, decided: str | None, deleting: bool = False, chain: bool = True, name: str = T4
) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": "7", "annotations": {}, "labels": {}}
    if decided is not None:
        meta["annotations"][RECORD] = decided
    if chain:
        meta["labels"]["resource.gpustack.ai/type"] = "instancetypes"
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"stopPolicy": stop}}


def _type(inactive: bool = False, deleting: bool = False, name: str = T4) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": "42"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"inactive": inactive}}


def _what(queue: Obj, it: Obj | None) -> list[tuple[str, Obj]]:
    types = {} if it is None else {it["metadata"]["name"]: it}
    return [(w.kind, w.patch) for w in stop_writes([queue], types)]


BACKFILL = [("InstanceType", {"metadata": {"resourceVersion": "42"}, "spec": {"inactive": True}})]
DRAIN = [
    ("ClusterQueue", {"metadata": {"resourceVersion": "7"}, "spec": {"stopPolicy": "HoldAndDrain"}})
]


@pytest.mark.parametrize(
    ("queue", "it", "expected"),
    [
        # Stopped by hand on an active type: marked, whatever the stop.
        (_queue("Hold", "None"), _type(), BACKFILL),
        (_queue("HoldAndDrain", "None"), _type(), BACKFILL),
        (_queue("Hold", "HoldAndDrain"), _type(), BACKFILL),
        # The hook's own drain of a pool that lost every flavor: nothing. Its nodes may only
        # have gone out of sight (their agents uninstalled, their cards still there); marked,
        # the pool would stay closed after a reinstall until an admin cleared it (#35).
        (_queue("HoldAndDrain", "HoldAndDrain"), _type(), []),
        (_queue("HoldAndDrain", None), _type(), []),
        # The hook's own Hold: an admin reactivating, or an empty pool. Nothing.
        (_queue("Hold", "Hold"), _type(), []),
        # No record (a queue from before the record existed): taken as the hook's own.
        (_queue("Hold", None), _type(), []),
        (_queue("None", "None"), _type(), []),
        (_queue("None", "Hold"), _type(), []),
        # Already inactive, being deleted, or gone: nothing to mark.
        (_queue("Hold", "None"), _type(inactive=True), []),
        (_queue("HoldAndDrain", "None"), _type(deleting=True), []),
        (_queue("Hold", "None"), None, []),
        # Not a chain queue: never touched.
        (_queue("Hold", "None", chain=False), _type(), []),
        (_queue("None", "None", deleting=True, chain=False), _type(), []),
        # Deleted queues drain (Kueue will not evict on delete), and mark nothing.
        (_queue("None", "None", deleting=True), _type(), DRAIN),
        (_queue("Hold", "Hold", deleting=True), _type(), DRAIN),
        (_queue("HoldAndDrain", "HoldAndDrain", deleting=True), _type(), []),
    ],
)
def test_rules(queue: Obj, it: Obj | None, expected: list[tuple[str, Obj]]) -> None:
    assert _what(queue, it) == expected


def test_the_type_is_found_by_the_queues_controller_reference() -> None:
    queue = _queue("Hold", "None", name="renamed-by-hand")
    queue["metadata"]["ownerReferences"] = [
        {"kind": "InstanceType", "name": T4, "controller": True, "apiVersion": "x", "uid": "u"}
    ]
    [write] = stop_writes([queue], {T4: _type()})
    assert (write.kind, write.name) == ("InstanceType", T4)
