"""While an answer still changes its parent, the shell asks Metacontroller to sync it again
soon: Metacontroller v4 drops a parent write that met a 409, without an error or a requeue."""

from __future__ import annotations

from typing import Any

import pytest

from hooks.recheck import WRITE_RECHECK_SECONDS, with_write_recheck
from hooks.transport import make_app


def _request(labels: dict[str, str], status: Any = None) -> dict[str, Any]:
    parent: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "labels": labels, "annotations": {"a": "1"}},
    }
    if status is not None:
        parent["status"] = status
    return {"object": parent, "attachments": {}}


@pytest.mark.parametrize(
    ("answer", "outstanding"),
    [
        ({"labels": {"x": "1"}}, False),  # already there
        ({"labels": {"x": "2"}}, True),
        ({"labels": {"gone": None}}, False),  # removing what is absent
        ({"labels": {"x": None}}, True),  # removing what is there
        ({"annotations": {"a": "1"}}, False),
        ({"annotations": {"b": "1"}}, True),
        ({"status": {"ready": 1}}, True),
        ({"attachments": []}, False),
    ],
)
def test_a_recheck_while_the_answer_changes_the_parent(
    answer: dict[str, Any], outstanding: bool
) -> None:
    got = with_write_recheck(_request({"x": "1"}), answer)
    if outstanding:
        assert got == {**answer, "resyncAfterSeconds": WRITE_RECHECK_SECONDS}
    else:
        assert got == answer


def test_a_status_already_written_asks_nothing() -> None:
    answer = {"status": {"ready": 1}}
    assert with_write_recheck(_request({}, status={"ready": 1}), answer) == answer


@pytest.mark.parametrize(("asked", "kept"), [(0, WRITE_RECHECK_SECONDS), (60, 5.0), (2, 2)])
def test_the_hooks_own_resync_is_only_ever_shortened(asked: float, kept: float) -> None:
    answer = {"labels": {"x": "2"}, "resyncAfterSeconds": asked}
    assert with_write_recheck(_request({"x": "1"}), answer)["resyncAfterSeconds"] == kept


def test_the_shell_adds_it_on_hook_routes_and_never_on_webhooks() -> None:
    def hook(_body: dict[str, Any]) -> dict[str, Any]:
        return {"labels": {"x": "2"}}

    app = make_app("probe", {"/sync": hook, "/mutate": hook}, webhooks=frozenset({"/mutate"}))
    client = app.test_client()
    synced = client.post("/sync", json=_request({"x": "1"})).get_json()
    assert synced["resyncAfterSeconds"] == WRITE_RECHECK_SECONDS
    mutated = client.post("/mutate", json=_request({"x": "1"})).get_json()
    assert "resyncAfterSeconds" not in mutated


def _composite(status: Any, generation: int = 3) -> dict[str, Any]:
    """A CompositeController's sync request (its parent is `parent`, not `object`)."""
    parent: dict[str, Any] = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "lab", "namespace": "team-a", "generation": generation},
        "status": status,
    }
    return {"parent": parent, "children": {}}


def test_a_composite_status_counts_the_observed_generation_metacontroller_adds() -> None:
    """A CompositeController writes `status.observedGeneration` with every status, and the
    Instance CRD keeps it: a parent that shows the answer plus its generation is settled, one
    whose observed generation is behind is not."""
    answer = {"status": {"phase": "Running"}, "children": []}
    settled = _composite({"phase": "Running", "observedGeneration": 3})
    assert with_write_recheck(settled, answer) == answer
    behind = _composite({"phase": "Running", "observedGeneration": 2})
    assert with_write_recheck(behind, answer)["resyncAfterSeconds"] == WRITE_RECHECK_SECONDS


def test_a_customize_answer_claims_no_status_write() -> None:
    answer = {"relatedResources": []}
    assert with_write_recheck({"parent": _composite(None)["parent"]}, answer) == answer
