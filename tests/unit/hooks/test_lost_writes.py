"""Lost parent writes under Metacontroller v4 and v1.5.20, emulated (#12 item 11).

v4's DecoratorController gives up on a 409 from the parent's update without an error or a
requeue; v1.5.20 returns an error and retries. v4 cannot be built on the testbed (the module
proxy does not serve it), so this emulates both loops around the real hook app: a node's first
sync meets a concurrent write of the Node (its kubelet's status, say) and its label update gets
a 409. The parent must still converge within seconds under both, which only the shell's recheck
(`hooks.recheck.with_write_recheck`) gives v4; without it, v4 waits for the resync period.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, Response, jsonify, request

from hooks.flavor.app import app as flavor_app
from hooks.flavor.node import sync as node_sync
from hooks.recheck import WRITE_RECHECK_SECONDS
from hooks.request import DecoratorRequest

Obj = dict[str, Any]
FIXTURE = Path(__file__).parent / "flavor" / "fixtures" / "node-epyc-2xt4.json"
RESYNC_PERIOD = 300.0
"""`gpustack-flavor-nodes`'s resyncPeriodSeconds (manifests/controllers/flavor-nodes.yaml)."""


class Decorator:
    """One parent's sync loop, the way each Metacontroller version runs it."""

    def __init__(self, app: Flask, version: str) -> None:
        self.client = app.test_client()
        self.version = version
        fixture = json.loads(FIXTURE.read_text())
        self.body: Obj = fixture["request"]
        self.parent: Obj = copy.deepcopy(self.body["object"])
        self.conflicts = 1
        """Parent updates that will meet a concurrent write (then 409)."""

    def converged_at(self, until: float) -> float | None:
        """Sync from t=0 until `until`; when the parent first shows every label the hook asks
        for, or None."""
        now, due = 0.0, 0.0
        while due <= until:
            now = due
            body = {**self.body, "object": copy.deepcopy(self.parent)}
            answer = self.client.post("/node/sync", json=body).get_json()
            wanted = {k: v for k, v in (answer.get("labels") or {}).items()}
            resync = float(answer.get("resyncAfterSeconds") or 0)
            # Metacontroller queues the hook's resync before it writes the parent.
            due = now + (resync if resync > 0 else RESYNC_PERIOD)
            if wanted:
                if self.conflicts:
                    self.conflicts -= 1  # 409: the parent moved since it was read
                    if self.version == "v1.5.20":
                        due = now + 0.005  # an error: requeued with the rate limiter's backoff
                    continue  # v4: "ignoring update status due to outdated resourceVersion"
                labels = self.parent["metadata"].setdefault("labels", {})
                for key, value in wanted.items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
            if self.shows(wanted):
                return now
        return None

    def shows(self, wanted: Obj) -> bool:
        labels = self.parent["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in wanted.items() if v is not None)


def _without_recheck() -> Flask:
    """The same hook function served bare, without the shell's recheck (the hooks before)."""
    bare = Flask("flavor-bare")

    @bare.post("/node/sync")
    def sync() -> Response:
        return jsonify(node_sync(DecoratorRequest.parse(request.get_json())))

    return bare


@pytest.mark.parametrize("version", ["v4.17.2", "v1.5.20"])
def test_a_lost_label_write_converges_within_seconds(version: str) -> None:
    at = Decorator(flavor_app, version).converged_at(until=60)
    assert at is not None and at <= WRITE_RECHECK_SECONDS + 0.01


def test_without_the_recheck_v4_waits_for_the_resync_period() -> None:
    decorator = Decorator(_without_recheck(), "v4.17.2")
    assert decorator.converged_at(until=60) is None
    assert Decorator(_without_recheck(), "v4.17.2").converged_at(until=400) == RESYNC_PERIOD
