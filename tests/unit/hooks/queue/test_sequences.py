"""Whole sequences: the hook, a stand-in for Metacontroller applying its answers, a stand-in
for Kueue (status per generation, evictions under HoldAndDrain, workloads finishing under Hold,
the resource-in-use finalizer), and the lifecycle keeper's rules (`verdictdriver.stops`) applied
after each step. Each test checks the order of what the queue went through."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from flask.testing import FlaskClient

from hooks.queue.app import app
from tests.unit.hooks.queue.cases import T4, T4_GROUPS
from tests.unit.hooks.queue.world import (
    T4_1D,
    T4_2D,
    T4_LABELS,
    T4_SPEC,
    Obj,
    admission_check,
    instance_type,
    kueue_status,
    queue,
    request,
    served_queue,
    settings,
)
from verdictdriver.stops import stop_writes

FLAVORS = [T4_1D, T4_2D]


@dataclass
class Cluster:
    target: Obj
    flavors: list[Obj]
    workloads: int
    chain_settings: Obj = field(default_factory=settings)
    cq: Obj | None = None
    gone: bool = False
    log: list[tuple[str, bool, str]] = field(default_factory=list)
    """(stop policy, has groups, `spec.inactive` as "true" or "") after each step."""

    def _kueue(self) -> None:
        """Kueue's reaction to the queue as it now is."""
        if self.cq is None:
            return
        stop = self.cq["spec"]["stopPolicy"]
        if stop == "HoldAndDrain":
            self.workloads = 0
        elif self.workloads:
            self.workloads -= 1  # one admitted workload runs to its end per step (not evicted)
        if self.cq["metadata"].get("deletionTimestamp") and not self.workloads:
            self.cq = None  # resource-in-use finalizer removed, object gone
            return
        generation = self.cq["metadata"]["generation"]
        self.cq["status"] = kueue_status(
            generation, stopped=stop != "None", reserving=self.workloads, admitted=self.workloads
        )

    def _apply(self, desired: list[Obj]) -> None:
        """Metacontroller's InPlace update, create and delete of the one attachment."""
        if self.cq is not None and self.cq["metadata"].get("deletionTimestamp"):
            return  # pending deletion: left alone
        if not desired:
            if self.cq is not None:
                self.cq["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
            return
        want = desired[0]
        if self.cq is None:
            self.cq = served_queue(want, self.target, 1, None)
            return
        spec = {**want["spec"], "queueingStrategy": "BestEffortFIFO"}
        self.cq["metadata"]["annotations"].update(want["metadata"].get("annotations") or {})
        if spec != self.cq["spec"]:
            self.cq["spec"] = spec
            self.cq["metadata"]["generation"] += 1

    def _keeper(self) -> None:
        """The lifecycle keeper's writes, as it would make them now."""
        queues = [self.cq] if self.cq is not None else []
        for write in stop_writes(queues, {self.target["metadata"]["name"]: self.target}):
            obj = self.target if write.kind == "InstanceType" else self.cq
            assert obj is not None
            obj["spec"].update(write.patch["spec"])
            if obj is self.cq:
                obj["metadata"]["generation"] += 1

    def step(self, client: FlaskClient) -> Obj:
        deleting = bool(self.target["metadata"].get("deletionTimestamp"))
        body = request(
            self.target,
            [self.cq] if self.cq else [],
            self.flavors,
            admission_check(active=True),
            self.chain_settings,
            finalizing=deleting,
        )
        reply = client.post("/finalize" if deleting else "/sync", json=body)
        assert reply.status_code == 200, reply.get_json()
        answer: Obj = reply.get_json()
        if answer.get("finalized"):
            assert self.cq is None, "finalized while the queue still exists"
            self.gone = True
            return answer
        notes = self.target["metadata"].setdefault("annotations", {})
        for key, value in (answer.get("annotations") or {}).items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value
        self._apply(answer["attachments"])
        self._kueue()
        self._keeper()
        if self.cq is not None:
            spec = self.cq["spec"]
            mark = "true" if self.target["spec"].get("inactive") else ""
            self.log.append((spec["stopPolicy"], bool(spec.get("resourceGroups")), mark))
        return answer

    def settle(self, client: FlaskClient, limit: int = 12) -> None:
        """Step until two answers in a row change nothing (or the type is gone)."""
        previous: Any = None
        for _ in range(limit):
            before = copy.deepcopy((self.target, self.cq))
            self.step(client)
            if self.gone or (previous == before == (self.target, self.cq)):
                return
            previous = before
        raise AssertionError(f"did not settle: {self.log}")


def _running(workloads: int) -> Cluster:
    cluster = Cluster(instance_type(T4, T4_SPEC), list(FLAVORS), workloads)
    cluster.cq = served_queue(
        queue(T4, T4_LABELS, "None", T4_GROUPS, checks=True),
        cluster.target,
        1,
        kueue_status(1, reserving=workloads, admitted=workloads),
    )
    return cluster


def _phases(log: list[tuple[str, bool, str]]) -> list[tuple[str, bool, str]]:
    """The log without repeats."""
    return [entry for i, entry in enumerate(log) if i == 0 or log[i - 1] != entry]


def test_a_pool_drained_for_lack_of_flavors_reopens_when_they_return() -> None:
    """An uninstall and a reinstall (#35): the agents' namespace goes with their NodeFeatures,
    so the nodes lose their accelerator labels and the pool its flavors while the cards stay;
    the reinstalled hooks see that before the agents report again. The queue drains and empties,
    and once the agents report, the flavors and the queue come back with no admin's help: the
    type is never marked inactive."""
    client = app.test_client()
    cluster = _running(workloads=3)
    cluster.flavors = []
    cluster.settle(client)
    assert _phases(cluster.log) == [("HoldAndDrain", True, ""), ("Hold", False, "")]
    assert cluster.workloads == 0

    cluster.log.clear()
    cluster.flavors = list(FLAVORS)
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]


def test_flavors_back_midway_through_a_drain_lift_it() -> None:
    """The agents report again before the drain is over: the drain stops there, the queue
    reopens with its groups, and the type stays active."""
    client = app.test_client()
    cluster = _running(workloads=3)
    cluster.flavors = []
    cluster.step(client)
    assert cluster.log == [("HoldAndDrain", True, "")]
    cluster.flavors = list(FLAVORS)
    cluster.settle(client)
    assert _phases(cluster.log) == [("HoldAndDrain", True, ""), ("None", True, "")]


def test_an_admin_who_sets_inactive_during_a_drain_keeps_the_pool_held() -> None:
    """The drain marks nothing, but an admin's `spec.inactive` still holds the pool once its
    flavors return, until the admin clears it."""
    client = app.test_client()
    cluster = _running(workloads=2)
    cluster.flavors = []
    cluster.settle(client)
    cluster.target["spec"]["inactive"] = True
    cluster.log.clear()
    cluster.flavors = list(FLAVORS)
    cluster.settle(client)
    assert _phases(cluster.log) == [("Hold", True, "true")]

    cluster.log.clear()
    cluster.target["spec"]["inactive"] = False
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]


def test_an_admins_hold_is_kept_marks_the_type_and_is_released_by_clearing_inactive() -> None:
    client = app.test_client()
    cluster = _running(workloads=2)
    assert cluster.cq is not None
    cluster.cq["spec"]["stopPolicy"] = "Hold"
    cluster.cq["metadata"]["generation"] += 1
    cluster.settle(client)
    assert _phases(cluster.log) == [("Hold", True, "true")]
    assert cluster.workloads == 0  # they ran to their end: a Hold evicts nothing

    cluster.log.clear()
    cluster.target["spec"]["inactive"] = False
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]


def test_an_admins_hold_and_drain_stands_until_lifted_on_the_queue() -> None:
    client = app.test_client()
    cluster = _running(workloads=2)
    assert cluster.cq is not None
    cluster.cq["spec"]["stopPolicy"] = "HoldAndDrain"
    cluster.cq["metadata"]["generation"] += 1
    cluster.settle(client)
    assert _phases(cluster.log) == [("HoldAndDrain", True, "true")]

    cluster.log.clear()
    cluster.cq["spec"]["stopPolicy"] = "None"  # the admin lifts the drain on the queue
    cluster.settle(client)
    assert _phases(cluster.log) == [("Hold", True, "true")]  # the type is inactive now

    cluster.log.clear()
    cluster.target["spec"]["inactive"] = False
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]


def test_a_deleted_queue_is_drained_gone_and_made_again() -> None:
    """Kueue never evicts on delete; the keeper drains the Terminating queue, Kueue lets it go,
    and the type, still alive, gets a new queue. The drain marks nothing: the queue was gone
    when the type looked, and the new one is the hook's."""
    client = app.test_client()
    cluster = _running(workloads=3)
    assert cluster.cq is not None
    cluster.cq["metadata"]["deletionTimestamp"] = "2026-11-30T09:30:00Z"
    cluster.step(client)
    assert cluster.cq is not None and cluster.cq["spec"]["stopPolicy"] == "HoldAndDrain"
    cluster.step(client)  # Kueue evicts, drops its finalizer: the queue is gone
    assert cluster.cq is None
    cluster.settle(client)
    assert cluster.cq is not None and cluster.cq["spec"]["stopPolicy"] == "None"
    assert not cluster.target["spec"].get("inactive")


def test_without_drain_setting_workloads_finish_and_nothing_is_stopped_meanwhile() -> None:
    """Switch off gates the drain only: the queue is neither held nor drained while its
    workloads run to their end; then its groups go and the empty queue is held."""
    client = app.test_client()
    cluster = _running(workloads=2)
    cluster.chain_settings = settings(instance_type_drain_when_no_flavors=False)
    cluster.flavors = []
    cluster.settle(client)
    phases = _phases(cluster.log)
    assert all(stop != "HoldAndDrain" for stop, _, _ in phases)
    assert phases[0] == ("None", True, "") and phases[-1] == ("Hold", False, "")
    assert [stop for stop, groups, _ in phases if groups] == ["None"]

    cluster.log.clear()
    cluster.flavors = list(FLAVORS)
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]


def test_finalize_drains_deletes_and_only_then_releases_the_type() -> None:
    client = app.test_client()
    cluster = _running(workloads=2)
    cluster.target["metadata"]["deletionTimestamp"] = "2026-11-30T09:00:00Z"
    cluster.settle(client)
    assert cluster.gone and cluster.cq is None
    assert cluster.log[0][0] == "HoldAndDrain"
    assert all(stop == "HoldAndDrain" for stop, _, _ in cluster.log)


def test_a_new_type_waits_on_hold_for_its_first_flavors() -> None:
    client = app.test_client()
    cluster = Cluster(instance_type(T4, T4_SPEC), [], 0)
    cluster.settle(client)
    assert _phases(cluster.log) == [("Hold", False, "")]
    cluster.log.clear()
    cluster.flavors = list(FLAVORS)
    cluster.settle(client)
    assert _phases(cluster.log) == [("None", True, "")]
