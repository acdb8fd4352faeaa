"""The agent's side of a record the API server refused: the Pod is told (one Event), the ledger
charges its cards from the journal and lists the record (`Devices.status.unrecorded`) until it
lands, and every agent of the node carries the others' listings along."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chain.allocation import GrantRequest, decide_grant
from chain.devices import Devices, DevicesSpec
from chain.ledger import DevicesStatus, Mode, UnrecordedRecord
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, Holder, render_allocated
from kubeapi import KubeError
from nodeagent.plugin.journal import RECORD_REFUSED
from nodeagent.plugin.running import DevicePlugins, NodeRecords
from tests.unit.nodeagent.plugin.fakes import GPU, NVIDIA, FakeCluster, FakeKube, t4_spec
from tests.unit.nodeagent.test_slicing_gate import Events, FakeApi, reporter_for


def _record(spec: DevicesSpec, uid: str, card: int) -> str:
    """The annotation of a Pod granted one whole card (`card`: its place in the spec)."""
    group, found = list(spec.cards())[card]
    token = f"{group.id}:{found.id}:0000"
    granted = GrantRequest(NVIDIA.name, Mode.EXCLUSIVE, (token,), Holder(uid, "main"))
    return render_allocated({"main": decide_grant(spec, DevicesStatus(), {}, granted, None)})


def _until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not check():
        time.sleep(0.01)
    return check()


def test_the_ledger_charges_and_lists_what_the_journal_cannot_land(tmp_path: Path) -> None:
    spec = t4_spec()
    [group] = spec.groups
    api = FakeApi(group)
    cluster = FakeCluster()
    for name in ("a", "b", "c"):
        cluster.add(name, ("main", {GPU: "1"}))
    cluster.write("default", "b", _record(spec, "uid-b", 1))  # b's record landed
    # Listed before by this agent (d, gone since), and by another agent of the node (c, live;
    # e, gone): each agent rewrites the whole ledger, so c's listing must be carried along.
    theirs = UnrecordedRecord("uid-c", "default", "c", _record(spec, "uid-c", 2), "amd", "Invalid")
    earlier = [
        theirs,
        UnrecordedRecord("uid-d", "default", "d", _record(spec, "uid-d", 3), "nvidia"),
        UnrecordedRecord("uid-e", "default", "e", _record(spec, "uid-e", 3), "amd"),
    ]
    api.objects["Devices"] = Devices("n1", spec, unrecorded=tuple(earlier)).render()
    refused = UnrecordedRecord("uid-a", "default", "a", _record(spec, "uid-a", 0), "", "Forbidden")
    stuck = [refused]
    reporter = reporter_for(api, tmp_path, Events())
    reporter.pods, reporter.unrecorded = cluster.pods, lambda: stuck
    reporter.write_ledger()
    devices = api.devices()
    ours = UnrecordedRecord("uid-a", "default", "a", refused.record, "nvidia", "Forbidden")
    assert devices.unrecorded == (ours, theirs)
    modes = [row.mode for _, row in devices.status.rows()]
    assert modes == [Mode.EXCLUSIVE, Mode.EXCLUSIVE, Mode.EXCLUSIVE, Mode.NONE]
    assert devices.status.rows().__next__()[1].remaining == 0
    assert Devices.parse(devices.render()) == devices  # the listing survives a report's round

    # a's record lands: charged from its annotation now, listed no more.
    cluster.write("default", "a", refused.record)
    stuck.clear()
    reporter.write_ledger()
    after = api.devices()
    assert after.unrecorded == (theirs,)
    assert after.status == devices.status


class RefusingKube(FakeKube):
    """`FakeKube` whose API server refuses the records of the Pods named in `refused`, and
    answers Pod reads (what a retry checks first)."""

    def __init__(self, cluster: FakeCluster, spec: DevicesSpec) -> None:
        super().__init__(cluster, spec)
        self.refused: dict[str, KubeError] = {}

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        if kind == "Pod":
            found = [p for p in self.cluster.pods() if p["metadata"]["name"] == name]
            return copy.deepcopy(found[0]) if found else None
        return super().get(api_version, kind, name, namespace)

    def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if kind == "Pod" and name in self.refused:
            raise self.refused[name]
        return super().merge_patch(api_version, kind, name, patch, *args, **kwargs)


def test_the_plugins_tell_the_pod_and_write_the_ledger_when_a_record_is_refused(
    tmp_path: Path,
) -> None:
    spec = t4_spec()
    cluster = FakeCluster()
    cluster.add("a", ("main", {GPU: "1"}))
    cluster.add("b", ("main", {GPU: "1"}))
    kube = RefusingKube(cluster, spec)
    kube.refused["a"] = KubeError(403, "denied by a tenant policy: metadata too large")
    records = NodeRecords.connect(
        kube,  # type: ignore[arg-type]
        "node-a",
        journal=tmp_path / "journal",
    )
    ledgers: list[int] = []
    plugins = DevicePlugins(
        records,
        {},
        plugin_dir=str(tmp_path / "plugins"),
        on_pods=lambda: ledgers.append(len(records.unrecorded())),
    )
    assert records.writer is not None
    records.writer.refused_backoff = 0.05  # tried again often while the test looks
    try:
        plugins.node.writer.write("default", "a", _record(spec, "uid-a", 0))
        plugins.node.writer.write("default", "b", _record(spec, "uid-b", 1))
        assert _until(lambda: cluster.annotation("b") != "")
        assert _until(lambda: ledgers == [1])  # the ledger was written once a's listing began
        [listed] = records.unrecorded()
        assert (listed.uid, listed.reason) == ("uid-a", "Forbidden")
        assert "metadata too large" in listed.message
        assert _until(lambda: len(cluster.events) >= 1)
        time.sleep(0.2)  # several more refused tries: still the one Event
        [event] = cluster.events
        assert event["reason"] == RECORD_REFUSED and event["type"] == "Warning"
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "a",
            "uid": "uid-a",
            "namespace": "default",
        }
        assert "metadata too large" in event["note"]
        del kube.refused["a"]
        assert records.writer.drain(5.0)
        assert cluster.annotation("a") != ""
        assert _until(lambda: ledgers[-1:] == [0])  # and once more when it landed
        assert ALLOCATED_ANNOTATION in cluster.pods()[0]["metadata"]["annotations"]
    finally:
        plugins.stop()
