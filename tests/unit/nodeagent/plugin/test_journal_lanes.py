"""A record that cannot land holds up nobody: each Pod's record has a lane of its own, a failed
write is retried on its own backoff (capped, longest once the API server refused it), a refusal
is told once per Pod (an Event) and counted, and the journal keeps the entry across a restart
until it lands or its Pod is gone. The probe that found it: a tenant's Pod with 60,000
annotations made an admission policy refuse its record, and the next Pod's record on the node
waited 60 s behind it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from kubeapi import KubeError
from nodeagent.metrics import REGISTRY
from nodeagent.plugin.journal import (
    COMPACT_LINES,
    FIRST_WRITE_THREADS,
    RECORD_LANDED,
    RECORD_REFUSED,
    Journal,
    JournaledWriter,
    failure_of,
    next_delay,
)
from tests.unit.nodeagent.plugin.fakes import GPU, FakeCluster

FOREVER = 10.0
"""Longer than any test waits: a refusal that never goes away while the test runs."""


class Api:
    """The API server's answers to record writes, by Pod: a Pod named in `refuse` gets that
    error on every write (after `slow` seconds of the policy's evaluation); the rest land. A
    write of a Pod named in `gates` is answered only once its event is set (an API server that
    takes as long as the test wants); `flying` counts the writes on their way, by Pod, and
    `most` the most on their way at once."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.refuse: dict[str, Exception] = {}
        self.slow: dict[str, float] = {}
        self.gates: dict[str, threading.Event] = {}
        self.tries: dict[str, list[float]] = {}
        self.landed: list[tuple[str, str]] = []
        self.flying: dict[str, int] = {}
        self.most = 0

    def write(self, namespace: str, name: str, value: str) -> None:
        with self.lock:
            self.tries.setdefault(name, []).append(time.monotonic())
            slow = self.slow.get(name, 0.0)
            gate = self.gates.get(name)
            self.flying[name] = self.flying.get(name, 0) + 1
            self.most = max(self.most, sum(self.flying.values()))
        try:
            time.sleep(slow)
            if gate is not None:
                gate.wait(FOREVER)  # bounded, so a failing test leaves no thread behind
            with self.lock:
                error = self.refuse.get(name)
            if error is not None:
                raise error
            self.cluster.write(namespace, name, value)
            with self.lock:
                self.landed.append((name, value))
        finally:
            with self.lock:
                self.flying[name] -= 1

    def count(self, name: str) -> int:
        with self.lock:
            return len(self.tries.get(name, []))


class Events:
    def __init__(self) -> None:
        self.told: list[tuple[str, str, str, str]] = []

    def event(self, regarding: Any, type_: str, reason: str, note: str, action: str = "") -> None:
        self.told.append((regarding["metadata"]["uid"], type_, reason, note))

    def reasons(self, uid: str) -> list[str]:
        return [reason for who, _, reason, _ in self.told if who == uid]


def _uid(cluster: FakeCluster) -> Callable[[str, str], str | None]:
    def uid(namespace: str, name: str) -> str | None:
        pod = next((p for p in cluster.pods() if p["metadata"]["name"] == name), None)
        return None if pod is None else str(pod["metadata"]["uid"])

    return uid


@dataclass
class Rig:
    """A node's Pods, the API server's answers, the Pods' Events, each call of `on_stuck`, and
    the writer over a journal in a temp dir."""

    cluster: FakeCluster
    api: Api
    events: Events
    moved: list[int]
    writer: JournaledWriter


def _rig(
    tmp_path: Path,
    pods: Sequence[str],
    refuse: Mapping[str, Exception],
    backoff: tuple[float, float] = (0.01, 0.05),
    refused_backoff: float = 0.1,
    compact_lines: int = COMPACT_LINES,
    answer_hold: float = 0.0,
) -> Rig:
    """`pods` on the node, the records of those in `refuse` failing with its error."""
    cluster = FakeCluster()
    for name in pods:
        cluster.add(name, ("main", {GPU: "1"}))
    api = Api(cluster)
    api.refuse.update(refuse)
    events, moved = Events(), []
    uid = _uid(cluster)
    writer = JournaledWriter(
        Journal(tmp_path / "journal", compact_lines),
        api,
        lambda ns, name: uid(ns, name) or "",
        uid,
        backoff=backoff,
        refused_backoff=refused_backoff,
        answer_hold=answer_hold,
        events=events,  # type: ignore[arg-type]
        on_stuck=lambda: moved.append(1),
        jitter=lambda: 0.0,
    )
    return Rig(cluster, api, events, moved, writer)


def _until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.005)
    return check()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_refused_record_holds_up_no_other_pods_record(tmp_path: Path) -> None:
    """(a) A's record is refused (403) forever, and each refusal takes the policy a while: B's
    record, journaled after A's, lands at once, and so does C's, journaled while A's retry is
    on its way."""
    refused = KubeError(403, "admission policy: the Pod's metadata is too large")
    rig = _rig(tmp_path, "abc", {"a": refused}, (0.01, 0.01), refused_backoff=FOREVER)
    rig.api.slow["a"] = 0.2
    try:
        rig.writer.write("default", "a", "record-a")
        rig.writer.write("default", "b", "record-b")
        assert _until(lambda: rig.cluster.annotation("b") == "record-b", 2.0)
        assert _until(lambda: rig.api.count("a") >= 2)  # A's first retry is on its way
        started = time.monotonic()
        rig.writer.write("default", "c", "record-c")
        assert _until(lambda: rig.cluster.annotation("c") == "record-c", 2.0)
        assert time.monotonic() - started < 0.15  # not behind A's 0.2 s refusal
        assert rig.cluster.annotation("a") == ""
        assert rig.writer.drain(1.0, failing=False)  # what an agent stopping waits for
        assert not rig.writer.drain(0.05)
        assert [entry.name for entry in rig.writer.journal.pending()] == ["a"]
        [(entry, failure)] = rig.writer.stuck()
        assert (entry.name, entry.value, failure.reason, failure.refused) == (
            "a",
            "record-a",
            "Forbidden",
            True,
        )
    finally:
        rig.writer.stop()


def test_a_slow_write_holds_up_no_other_pods_first_write(tmp_path: Path) -> None:
    """The probe that found it: the API server takes 5 s (30 s under load) to answer the PATCH
    of a tenant's Pod with 60,000 annotations, and every other Pod's first write on the node
    waited behind it. A's write is on its way until the test lets it end: B's and C's records,
    journaled after A's, land meanwhile; A's lands once it is answered."""
    rig = _rig(tmp_path, "abc", {})
    gate = rig.api.gates["a"] = threading.Event()
    queued = "gpustack_allocation_records_pending"
    try:
        rig.writer.write("default", "a", "record-a")
        assert _until(lambda: rig.api.count("a") == 1)  # A's write is on its way
        rig.writer.write("default", "b", "record-b")
        rig.writer.write("default", "c", "record-c")
        landed = [("b", "record-b"), ("c", "record-c")]
        # Generous for a loaded machine, and still well under A's write (until `gate`).
        assert _until(lambda: sorted(rig.api.landed) == landed, FOREVER / 2)
        assert rig.cluster.annotation("a") == "" and rig.api.count("a") == 1
        assert rig.writer.stuck() == []  # slow is not failed: nothing listed, nothing retried
        assert _until(lambda: _sample(queued, state="queued") == 1)  # A's record still to land
        assert not rig.writer.drain(0.01)
        gate.set()
        assert rig.writer.drain(5.0)
        assert rig.cluster.annotation("a") == "record-a"
        assert rig.writer.journal.pending() == [] and (tmp_path / "journal").read_text() == ""
        assert _sample(queued, state="queued") == 0
    finally:
        gate.set()
        rig.writer.stop()


def test_slow_pods_hold_one_thread_each_and_the_queue_goes_on_in_journal_order(
    tmp_path: Path,
) -> None:
    """The bound with as many slow Pods as threads, or more: each slow Pod holds one thread of
    the pool (`FIRST_WRITE_THREADS`), never two, and no more writes than the pool are on their
    way at once; the queued first writes start in journal order, one as each write on its way
    ends. So B, queued behind N slow Pods (N >= the pool), starts once N - pool + 1 of them have
    ended and not before, however long the others take; with fewer than the pool on their way,
    B never waits for them (the test above). A slow Pod's later record waits for its own write
    on its way, never takes a second thread, and lands after the earlier one."""
    pool = FIRST_WRITE_THREADS
    slow = [f"s{n}" for n in range(pool + 1)]
    rig = _rig(tmp_path, [*slow, "b"], {})
    gates = {name: threading.Event() for name in slow}
    rig.api.gates.update(gates)
    try:
        for name in slow:
            rig.writer.write("default", name, f"record-{name}")
        rig.writer.write("default", "b", "record-b")
        assert _until(lambda: all(rig.api.count(name) == 1 for name in slow[:pool]))
        time.sleep(0.05)  # room for a thread beyond the pool, were there one, to start more
        assert rig.api.count(slow[pool]) == 0 and rig.api.count("b") == 0

        gates[slow[0]].set()  # one thread comes free: it starts the next in journal order
        assert _until(lambda: rig.api.count(slow[pool]) == 1)
        time.sleep(0.05)
        assert rig.api.count("b") == 0 and rig.cluster.annotation(slow[0]) == f"record-{slow[0]}"

        gates[slow[1]].set()  # N - pool + 1 = 2 slow writes ended: B goes
        assert _until(lambda: rig.cluster.annotation("b") == "record-b")
        assert all(rig.cluster.annotation(name) == "" for name in slow[2:])

        rig.writer.write("default", slow[2], "record-later")  # a thread is free for it
        time.sleep(0.05)
        assert rig.api.count(slow[2]) == 1  # still only the write on its way
        for gate in gates.values():
            gate.set()
        assert rig.writer.drain(5.0)
    finally:
        for gate in gates.values():
            gate.set()
        rig.writer.stop()
    assert rig.api.most == pool
    assert [value for name, value in rig.api.landed if name == slow[2]] == [
        f"record-{slow[2]}",
        "record-later",
    ]
    assert rig.cluster.annotation(slow[2]) == "record-later"
    assert rig.writer.journal.pending() == []


def test_a_record_replaced_while_its_write_is_held_is_not_written(tmp_path: Path) -> None:
    """A thread has taken A's first write and holds it for an Allocate answer on its way; a later
    grant of A comes meanwhile: only the later record is written (the earlier is superseded in
    the journal, never sent)."""
    rig = _rig(tmp_path, "a", {}, answer_hold=FOREVER)
    try:
        answered = rig.writer.answering()
        rig.writer.write("default", "a", "first")
        time.sleep(0.05)  # a thread takes the write and holds it
        rig.writer.write("default", "a", "second")
        assert rig.api.count("a") == 0
        answered()
        assert rig.writer.drain(5.0)
        assert rig.api.landed == [("a", "second")]
        assert rig.writer.journal.pending() == [] and (tmp_path / "journal").read_text() == ""
    finally:
        rig.writer.stop()


def test_a_failed_record_is_retried_with_a_growing_capped_backoff(tmp_path: Path) -> None:
    """(b) Doubling from the first delay, then at the cap: the refused cap for a refusal."""
    assert [next_delay(d, 0.05, 5.0) for d in (0.0, 0.05, 1.6, 3.2, 5.0)] == [
        0.05,
        0.1,
        3.2,
        5.0,
        5.0,
    ]
    refused = KubeError(422, "metadata.annotations: Too long")
    rig = _rig(tmp_path, "a", {"a": refused}, (0.02, 0.04), refused_backoff=0.16)
    try:
        rig.writer.write("default", "a", "record-a")
        assert _until(lambda: rig.api.count("a") >= 7, 5.0)
    finally:
        rig.writer.stop()
    tries = rig.api.tries["a"][:7]
    gaps = [later - earlier for earlier, later in itertools.pairwise(tries)]
    expected = [0.02, 0.04, 0.08, 0.16, 0.16, 0.16]
    assert all(gap >= want - 0.005 for gap, want in zip(gaps, expected, strict=True)), gaps
    assert gaps[5] < 0.32, gaps  # uncapped, it would be 0.64 by now


def test_a_refusal_is_told_once_per_pod_and_counted(tmp_path: Path) -> None:
    """(c) 403 and 422 are refusals: one Warning Event per Pod however often it is tried again,
    with the API server's message; every refused try is counted by reason."""
    refuse = {
        "a": KubeError(403, "denied by policy gpustack-tenant-limits"),
        "b": KubeError(422, "metadata.annotations: Too long: must have at most 262144 bytes"),
    }
    forbidden = _sample("gpustack_allocation_record_refusals_total", reason="Forbidden")
    invalid = _sample("gpustack_allocation_record_refusals_total", reason="Invalid")
    rig = _rig(tmp_path, "ab", refuse, (0.01, 0.01), refused_backoff=0.02)
    try:
        rig.writer.write("default", "a", "record-a")
        rig.writer.write("default", "b", "record-b")
        rig.writer.write("default", "a", "record-a-2")  # a later grant of A: still one Event
        assert _until(lambda: rig.api.count("a") >= 5 and rig.api.count("b") >= 5)
        assert _until(lambda: _sample("gpustack_allocation_records_pending", state="refused") == 2)
    finally:
        rig.writer.stop()
    assert rig.events.reasons("uid-a") == [RECORD_REFUSED]
    assert rig.events.reasons("uid-b") == [RECORD_REFUSED]
    [(_, type_, _, note)] = [told for told in rig.events.told if told[0] == "uid-a"]
    assert type_ == "Warning" and "denied by policy gpustack-tenant-limits" in note
    refused = _sample("gpustack_allocation_record_refusals_total", reason="Forbidden")
    assert refused - forbidden >= 4
    assert _sample("gpustack_allocation_record_refusals_total", reason="Invalid") - invalid >= 4


def test_a_pod_that_is_gone_drops_its_entry(tmp_path: Path) -> None:
    """(d) A 404 drops the entry at once; a refused Pod deleted meanwhile is dropped at its next
    retry (read afresh first), and leaves the stuck list."""
    refuse = {"a": KubeError(404, 'pods "a" not found'), "b": KubeError(403, "refused")}
    rig = _rig(tmp_path, "ab", refuse)
    try:
        rig.writer.write("default", "a", "record-a")
        rig.writer.write("default", "b", "record-b")
        assert _until(lambda: [e.name for e, _ in rig.writer.stuck()] == ["b"])
        assert rig.api.count("a") == 1
        rig.cluster.remove("b")
        assert rig.writer.drain(5.0)
        assert rig.writer.journal.pending() == [] and rig.writer.stuck() == []
        assert (tmp_path / "journal").read_text() == ""
        assert len(rig.moved) == 2  # b listed once, then gone
        assert rig.events.reasons("uid-a") == []
    finally:
        rig.writer.stop()


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (KubeError(500, "etcdserver: request timed out"), "ServerError"),
        (KubeError(429, "too many requests"), "TooManyRequests"),
        (KubeError(409, "the object has been modified"), "Conflict"),
        (requests.ReadTimeout("read timed out"), "Timeout"),
    ],
)
def test_a_transient_failure_is_retried_without_a_refusal(
    tmp_path: Path, error: Exception, reason: str
) -> None:
    """(e) 5xx, 429, 409, a timeout: retried at the short backoff, listed as stuck while it
    fails, counted as a failure, never told as a refusal; it lands once the API answers."""
    failure = failure_of(error)
    assert failure is not None and (failure.reason, failure.refused) == (reason, False)
    before = _sample("gpustack_allocation_record_failures_total", reason=reason)
    refused = _refusals()
    rig = _rig(tmp_path, "ab", {"a": error}, (0.01, 0.02))
    try:
        rig.writer.write("default", "a", "record-a")
        rig.writer.write("default", "b", "record-b")
        assert _until(lambda: rig.api.count("a") >= 4)
        assert rig.cluster.annotation("b") == "record-b"
        [(entry, stuck)] = rig.writer.stuck()
        assert (entry.name, stuck.reason, stuck.refused) == ("a", reason, False)
        del rig.api.refuse["a"]
        assert rig.writer.drain(5.0)
        assert rig.cluster.annotation("a") == "record-a"
    finally:
        rig.writer.stop()
    assert rig.events.told == []
    assert _sample("gpustack_allocation_record_failures_total", reason=reason) - before >= 3
    assert _refusals() == refused


def _refusals() -> float:
    return sum(
        _sample("gpustack_allocation_record_refusals_total", reason=reason)
        for reason in ("Forbidden", "Invalid", "BadRequest")
    )


def test_a_refused_record_lands_once_the_refusal_goes_away(tmp_path: Path) -> None:
    """(f) The tenant trims the Pod's annotations: the record lands at the next retry, the
    journal empties, the stuck list too, and the Pod is told."""
    rig = _rig(tmp_path, "a", {"a": KubeError(403, "refused")})
    try:
        rig.writer.write("default", "a", "record-a")
        assert _until(lambda: rig.api.count("a") >= 2)
        assert not rig.writer.drain(0.05)
        del rig.api.refuse["a"]
        assert rig.writer.drain(5.0)
        assert rig.cluster.annotation("a") == "record-a"
        assert rig.writer.stuck() == [] and rig.writer.journal.pending() == []
        assert (tmp_path / "journal").read_text() == ""
        assert rig.moved == [1, 1]
        assert rig.events.reasons("uid-a") == [RECORD_REFUSED, RECORD_LANDED]
    finally:
        rig.writer.stop()


def test_a_pods_earlier_record_never_lands_after_its_later_one(tmp_path: Path) -> None:
    """A later grant of a refused Pod (its record in flight, slow) replaces the earlier one:
    once the refusal goes away only the later record is written, never the earlier after it."""
    rig = _rig(tmp_path, "a", {"a": KubeError(403, "refused")})
    rig.api.slow["a"] = 0.1
    try:
        rig.writer.write("default", "a", "first")
        assert _until(lambda: rig.api.count("a") >= 1)
        rig.writer.write("default", "a", "second")  # while the first's write is on its way
        del rig.api.refuse["a"]
        assert rig.writer.drain(5.0)
        assert rig.cluster.annotation("a") == "second"
        values = [value for name, value in rig.api.landed if name == "a"]
        assert values[-1] == "second" and "first" not in values[values.index("second") :]
        assert rig.writer.journal.pending() == []
    finally:
        rig.writer.stop()


def test_a_refused_entry_survives_a_restart_and_the_journal_stays_short(tmp_path: Path) -> None:
    """(g) The entry of a refused record stays in the file while others land around it (the
    file compacted rather than growing with every later grant); a restarted agent reads it,
    holds it again and writes it once the refusal has gone."""
    others = [f"p{n}" for n in range(40)]
    refused = {"a": KubeError(403, "refused")}
    rig = _rig(tmp_path, ["a", *others], refused, refused_backoff=FOREVER, compact_lines=8)
    try:
        rig.writer.write("default", "a", "record-a")
        for n, name in enumerate(others):
            rig.writer.write("default", name, f"record-{n}")
        assert _until(lambda: rig.cluster.annotation("p39") == "record-39")
        assert _until(lambda: [e.name for e in rig.writer.journal.pending()] == ["a"])
    finally:
        rig.writer.stop()
        rig.writer.journal.close()
    assert len((tmp_path / "journal").read_text().splitlines()) <= 8
    [entry] = Journal(tmp_path / "journal").pending()
    assert (entry.name, entry.uid, entry.value) == ("a", "uid-a", "record-a")

    del rig.api.refuse["a"]
    uid = _uid(rig.cluster)
    again = JournaledWriter(
        Journal(tmp_path / "journal"), rig.api, lambda ns, n: uid(ns, n) or "", uid
    )
    try:
        again.replay()
        assert again.drain(5.0)
        assert rig.cluster.annotation("a") == "record-a"
        assert (tmp_path / "journal").read_text() == ""
    finally:
        again.stop()


def test_a_new_entry_after_a_compaction_never_reuses_a_seq(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal")
    kept = journal.append("ns", "a", "uid-a", "one")
    later = journal.append("ns", "b", "uid-b", "two")
    journal.landed(later)
    journal.close()
    reopened = Journal(tmp_path / "journal")
    assert reopened.append("ns", "c", "uid-c", "three").seq > later.seq
    assert reopened.pending()[0].seq == kept.seq


def test_a_restart_never_brings_back_a_record_a_later_one_superseded(tmp_path: Path) -> None:
    """An agent replays a Pod's latest entry only and marks only that one landed; while another
    entry (a refused one) keeps the file from emptying, the earlier entry must not come back as
    the Pod's record at the next restart."""
    journal = Journal(tmp_path / "journal")
    journal.append("ns", "a", "uid-a", "first")
    journal.append("ns", "a", "uid-a", "second")
    journal.close()
    again = Journal(tmp_path / "journal")
    [second] = again.pending()
    assert second.value == "second"
    again.append("ns", "b", "uid-b", "refused")
    again.landed(second)
    again.close()
    assert [e.value for e in Journal(tmp_path / "journal").pending()] == ["refused"]
