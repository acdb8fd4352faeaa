"""A change another writer makes to the Node while a report runs is not lost (#35).

An agent moved to another namespace starts on a Node whose accelerator labels went with its old
NodeFeature (nfd-master drops them when the old namespace is deleted) and which still carries
the old agent's `.sliced.*` counting keys. Its first report reads the Node, sees no accelerator
label and nulls the keys; the NodeFeature the same report writes makes nfd-master put the labels
back, sometimes before the report's last write returns. The report used to take the Node its
own write returned as what it had reported on, labels included: neither the label waker nor a
monitor round saw a change, and the keys stayed away until the next re-detection (10 minutes).
The kubelet's `<base>.sliced` count, which the sliced keys follow, lands the same way when the
plugins register just before a report. Here the other writer lands deterministically, inside the
report, right after the write that provokes it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chain.devices import DevicesGroup
from chain.labels import ACCELERATABLE_PREFIX
from kubeapi.watch import Cache
from nodeagent.agent import label_waker
from nodeagent.detect.loop import DetectionRound
from nodeagent.detect.remembered import DetectionPass
from nodeagent.report import NODE_FEATURE_KIND
from tests.unit.nodeagent.test_slicing_gate import (
    SLICED,
    Events,
    FakeApi,
    reporter_for,
    sliced_keys,
    stage,
    t4,
)

UNITS = SLICED + ".units"
WAKE_WAIT_S = 60.0
"""How long the test waits for the label waker to end a long sleep on its own (it ends at
once when it works; the wait only bounds a failing run)."""


class RacingApi(FakeApi):
    """The API server, with another writer's change landing right after the report writes
    `provoking` (nfd-master after the NodeFeature, the kubelet after the Devices spec)."""

    def __init__(self, group: DevicesGroup, provoking: str) -> None:
        super().__init__(group)
        self.provoking = provoking
        self.landing: dict[str, Any] = {}
        """The other writer's change: labels and capacity entries merged into the Node."""

    def apply(self, obj: Any, manager: str = "", subresource: str | None = None) -> Any:
        written = super().apply(obj, manager, subresource)
        if obj["kind"] == self.provoking and self.landing:
            meta, status = self.node["metadata"], self.node["status"]
            meta["labels"] = {**meta["labels"], **self.landing.get("labels", {})}
            status["capacity"] = {**status["capacity"], **self.landing.get("capacity", {})}
            self.landing = {}
        return written


def moved_agent_node(group: DevicesGroup) -> RacingApi:
    """The Node as the old agent left it: its keys, without the accelerator label that went
    with the old NodeFeature; nfd-master brings the label back once the new one is written."""
    api = RacingApi(group, NODE_FEATURE_KIND)
    label = ACCELERATABLE_PREFIX + group.accelerator_key
    del api.node["metadata"]["labels"][label]
    api.node["status"]["capacity"] = {SLICED: "4", UNITS: str(4 * 1_600_000)}
    api.landing = {"labels": {label: "true"}}
    return api


def unregistered_node(group: DevicesGroup) -> RacingApi:
    """The Node once the kubelet dropped the old agent's sliced tokens (its grace period over):
    no `<base>.sliced` count, the old keys still there; the count lands as the plugins of the
    new agent register."""
    api = RacingApi(group, "Devices")
    api.node["status"]["capacity"] = {UNITS: str(4 * 1_600_000)}
    api.landing = {"capacity": {SLICED: "4"}}
    return api


@pytest.mark.parametrize(
    "node", [moved_agent_node, unregistered_node], ids=["nfd-labels", "kubelet-count"]
)
def test_a_change_landing_during_a_report_is_reported_on_the_next_round(
    tmp_path: Path, node: Any
) -> None:
    group, lib = t4(), tmp_path / "lib"
    stage(lib, group)
    api = node(group)
    reporter = reporter_for(api, lib, Events())
    detected = DetectionRound((DetectionPass("nvidia", (group,)),))

    reporter(detected)
    assert not api.landing, "the other writer did not land during the report"
    assert sliced_keys(api) == {}  # decided from the Node as read: the keys nulled
    # The next monitor round sees that the Node moved after the report read it...
    assert reporter.node_changed()
    reporter(detected)
    # ... and the keys are back, from the Node as it is now.
    assert sliced_keys(api)[UNITS] == str(4 * 1_600_000)
    assert not reporter.node_changed()


def test_labels_landing_during_a_report_wake_the_loop(tmp_path: Path) -> None:
    """The label waker compares the Node's labels with those the report acted on."""
    group, lib = t4(), tmp_path / "lib"
    stage(lib, group)
    api = moved_agent_node(group)
    reporter = reporter_for(api, lib, Events())
    reporter(DetectionRound((DetectionPass("nvidia", (group,)),)))
    nodes = Cache()
    nodes.replace([api.node], "1")
    stopping = threading.Event()
    sleep = label_waker(stopping, nodes, "n1", lambda: reporter.reported_labels)
    woke: list[bool] = []

    def run() -> None:
        sleep(3600)
        woke.append(not stopping.is_set())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(WAKE_WAIT_S)
    stopping.set()  # releases a sleep that did not end on its own
    thread.join()
    assert woke == [True], "the labels nfd-master wrote during the report did not wake the loop"
