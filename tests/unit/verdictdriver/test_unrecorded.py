"""A Pod whose allocation record the API server refused: the node agent charges its cards in the
ledger and lists the record beside it (`Devices.status.unrecorded`); the verdict reads that
record in place of the Pod's annotation, so the cards count once, from the ledger, and the Pod
is no longer a promise on top of them. Without the listing the Pod stays a promise (a lagging or
missing listing can only overstate what is taken)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from chain.ledger import UnrecordedRecord
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, with_unrecorded
from chain.queues import NODE_DEVICES_CHECK, NODE_DEVICES_CONTROLLER
from chain.units import RESOURCE_MAX_UNITS
from chain.verdicts import PROMISED
from tests.unit.hooks.admission.test_judge import devices, judge, node, related, rf, workload
from tests.unit.verdictdriver.test_driver import FakeKube, _driver, _state, pending
from tests.unit.verdictdriver.test_driver_caches import _allocated_pod

Obj = dict[str, Any]


def _node_with_a_stuck_pod(listed_uid: str | None, published: bool) -> FakeKube:
    """n1 (four cards) where w1's Pod holds cards 0 and 1 whose record never reached the Pod:
    the agent lists it under `listed_uid` (None: not listed) and, with `published`, its ledger
    rows charge the two cards."""
    flavor = rf()
    flavor["spec"]["nodeLabels"]["acceleratable.feature.gpustack.ai/nvidia-t4.count"] = "4"
    dev = devices("n1", [RESOURCE_MAX_UNITS] * 4)
    dev["metadata"]["labels"] = flavor["spec"]["nodeLabels"] | {}
    dev["metadata"]["labels"].pop("acceleratable.feature.gpustack.ai/nvidia-t4.count")
    pod = _allocated_pod("w1", 2)
    record = pod["metadata"]["annotations"].pop(ALLOCATED_ANNOTATION)  # refused: not on the Pod
    if published:
        for row in dev["status"]["groups"][0]["accelerators"][:2]:
            row.update({"mode": 1, "remaining": 0})
    if listed_uid is not None:
        entry = UnrecordedRecord(listed_uid, "team-a", "w1-pod", record, "nvidia", "Forbidden")
        dev["status"]["unrecorded"] = [entry.render()]
    ac = {
        "kind": "AdmissionCheck",
        "metadata": {"name": NODE_DEVICES_CHECK, "generation": 1},
        "spec": {"controllerName": NODE_DEVICES_CONTROLLER},
    }
    holder = workload(2, "n1", name="w1", admitted=True)
    return FakeKube(flavor, dev, node("n1"), ac, holder, pod)


@pytest.mark.parametrize("published", [True, False])
def test_a_listed_record_counts_its_cards_once_from_the_ledger(published: bool) -> None:
    """(h) Listed: w1's two cards are taken once (from the published rows, or from the listed
    record when the rows lag), so two of the four cards are left for w2, none for w3. Before,
    the refused Pod stayed a promise on top of the published rows: four cards taken, w2 answered
    Retry."""
    kube = _node_with_a_stuck_pod("uid-w1-pod", published)
    kube.put(pending(workload(2, "n1", name="w2")))
    _driver(kube).step()
    assert _state(kube, "w2")["state"] == "Ready"
    # Two cards from w1's listed record, two promised to w2: nothing is left for w3.
    kube.put(pending(workload(1, "n1", name="w3")))
    _driver(kube).step()
    assert _state(kube, "w3")["state"] == "Retry"


def test_an_unlisted_or_stale_listing_leaves_the_pod_a_promise() -> None:
    """Not listed, or listed for another Pod of that name (recreated): the Pod stays a promise,
    on top of whatever the rows charge, which overstates what is taken but never double-books."""
    for listed in (None, "uid-an-earlier-w1-pod"):
        kube = _node_with_a_stuck_pod(listed, published=True)
        kube.put(pending(workload(1, "n1", name="w2")))
        _driver(kube).step()
        retry = _state(kube, "w2")
        assert retry["state"] == "Retry" and retry["message"].endswith(PROMISED), listed


def test_only_a_listed_pod_of_that_uid_and_name_carries_the_listed_record() -> None:
    pod = _allocated_pod("w1", 1)
    other = copy.deepcopy(pod)
    other["metadata"].update({"name": "w9-pod", "uid": "uid-w9-pod"})
    entries = [
        UnrecordedRecord("uid-w1-pod", "team-a", "w1-pod", json.dumps({"main": {}})),
        UnrecordedRecord("uid-w9-pod", "team-a", "renamed", "ignored"),
    ]
    read = with_unrecorded([pod, other], entries)
    assert read[0]["metadata"]["annotations"][ALLOCATED_ANNOTATION] == '{"main": {}}'
    assert read[1] is other
    assert pod["metadata"]["annotations"][ALLOCATED_ANNOTATION] != '{"main": {}}'  # a copy
    assert with_unrecorded([pod], []) == [pod]


@pytest.mark.parametrize("listed", [True, False])
def test_the_judge_hook_reads_the_listing_as_the_driver_does(listed: bool) -> None:
    """`POST /judge` serves the same verdict from related objects: with the listing, w1's two
    cards count once and w2 (two cards) is Ready; without it, w1's Pod is a promise on top of
    the published rows and w2 waits."""
    kube = _node_with_a_stuck_pod("uid-w1-pod" if listed else None, published=True)
    everything = [obj for obj in kube.objects.values() if obj["kind"] != "AdmissionCheck"]
    status, answer = judge(
        {"workload": workload(2, "n1", name="w2"), "related": related(*everything)}
    )
    assert status == 200, answer
    assert answer["state"] == ("Ready" if listed else "Retry"), answer
