"""A node-local journal of allocation records: durable before Allocate answers, written to the
Pod's annotation right after.

Why: the annotation PATCH is one API round trip on every Allocate's path (about 10 ms on the
testbed, most of the call). The record must outlive the agent before kubelet hears the answer:
kubelet starts the container on the cards, and a record lost with a crashed agent would leave
those cards charged to nobody, free for the next Pod. An append to a file on the host (the
agent's hostPath state dir) survives the agent's death, costs a few microseconds, and the
annotation follows from a thread of its own. On start, entries whose annotation did not land
become reservations again (so no card is promised twice while they are written) and are written.

Judgment call: the append is not fsync'ed. The failure between answer and annotation that
matters is the agent's death (a crash, an OOM kill, a rollout), and the kernel keeps what a dead
process wrote. A host crash loses the page cache, but it also ends every container: kubelet
admits the Pods again and asks Allocate again, and the new grants are journaled afresh.

Format: JSON lines. A record entry `{"seq", "namespace", "name", "uid", "value"}` carries the
Pod's whole annotation, so only a Pod's latest entry matters; `{"landed": seq}` marks an entry
written (or superseded by a later entry of its Pod). The file is emptied whenever nothing is left
to write, and rewritten with only the entries still to write once it holds `COMPACT_LINES` lines
(a record that cannot land must not let the file grow with every later grant of the node): the
copy is written beside it and renamed over it, so a crash leaves the old file or the new one.

Landing (`JournaledWriter`), one lane per Pod. First writes go out from a small pool of threads
(`FIRST_WRITE_THREADS`), started in journal order as threads come free, as fast as the API answers.
A Pod has at most one write on its way, always of its latest record (an earlier one is never
written after a later one), so a write the API server is slow to answer (an admission policy over a
tenant's 60,000 annotations: 5 s, 30 s under load) holds one thread and no other Pod's record: with
fewer slow Pods than threads, the others' first writes go on in the threads left, however slow
those Pods are; with every thread on a slow write, the queued writes start in journal order as
those end (each is bounded by the client's read timeout, and a timed-out one goes to the retries).
A write that fails is that Pod's alone: its lane moves to the retry threads with a backoff of its
own (doubling, jittered, capped: `backoff[1]` for a transient failure, `refused_backoff` once the
API server refused it), so it never holds up the records of other Pods behind it. A refusal for
that Pod (400, 403, 422: an admission policy, e.g. over a tenant's oversized annotations) is told
once per Pod (an Event, `AllocationRecordRefused`) and counted (`nodeagent.metrics`); 409, 429,
5xx, timeouts and an unreachable API server are transient and told only in the log and a counter. A
404 (or, before a retry, another uid under that name) means the Pod is gone: its entries are
dropped. Until a failed record lands, `stuck` lists it, and the agent publishes it in the node's
ledger (`Devices.status.unrecorded`, docs/nodeagent.md), which charges its cards meanwhile.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from chain.ledger_rebuild import Holder, PodAllocations, parse_allocated
from kubeapi.events import NORMAL, WARNING, EventRecorder
from nodeagent.metrics import RECORD_FAILURES, RECORD_REFUSALS, RECORDS_PENDING
from nodeagent.plugin.node import AnnotationWriter, Answers, NodeState, Pod

log = logging.getLogger(__name__)

JOURNAL_NAME = "allocations.journal"
NOT_FOUND = 404
ANSWER_HOLD_S = 0.05
"""The longest a record's write waits for an Allocate answer still on its way (`answering`)."""
REFUSED_BACKOFF_S = 60.0
"""How often a record the API server refused is tried again: the refusal may go away (the
tenant trims the Pod's annotations, the policy changes), and the Pod's cards are charged from
the journal meanwhile, so a minute costs nothing but the wait."""
JITTER = 0.2
"""A retry's delay is shortened by up to this share, so Pods refused together spread out."""
COMPACT_LINES = 4096
"""Past this many lines (and twice the entries still to write) the journal is rewritten."""
FIRST_WRITE_THREADS = 4
"""Pods whose first write may be on its way at once. More than one, so a Pod whose write the API
server is slow to answer (a tenant's oversized annotations) holds up no other Pod's record; four
leave the node's other records three threads with one such Pod on its way, and one with three.
Few, because each thread more is one more PATCH a node may send the API server at once
(a storm of grants would send that many together), and with `RETRY_THREADS` the writes stay
within the client session's connection pool (requests keeps 10 connections per host)."""
RETRY_THREADS = 2
REFUSED_REASONS = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}
"""Answers that refuse this Pod's record as it is: they will not change by trying again soon."""
TRANSIENT_REASONS = {409: "Conflict", 429: "TooManyRequests", 504: "Timeout"}
RECORD_REFUSED = "AllocationRecordRefused"
RECORD_LANDED = "AllocationRecorded"
EVENT_ACTION = "RecordAllocation"
MESSAGE_CHARS = 600
"""How much of the API server's message an Event or the ledger's listing keeps."""


@dataclass(frozen=True)
class Entry:
    seq: int
    namespace: str
    name: str
    uid: str
    value: str


class Journal:
    """The append-only file; every method is safe from any thread."""

    def __init__(self, path: Path, compact_lines: int = COMPACT_LINES) -> None:
        self.path = path
        self.compact_lines = compact_lines
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        entries, lines, last = self._read()
        self._pending = {entry.seq: entry for entry in entries}
        self._seq = last
        self._lines = lines
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _read(self) -> tuple[list[Entry], int, int]:
        """The entries not marked landed, a Pod's latest only (a torn last line is skipped),
        the file's line count and the highest seq it names (a new entry never reuses one)."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return [], 0, 0
        entries: dict[int, Entry] = {}
        latest: dict[tuple[str, str], int] = {}
        """Each Pod's latest entry, landed or not: an earlier one is superseded by it (and is
        not marked in the file when a previous agent replayed only the latest)."""
        for line in lines:
            try:
                item = json.loads(line)
                if "landed" in item:
                    entries.pop(int(item["landed"]), None)
                else:
                    entry = Entry(**item)
                    entries[int(entry.seq)] = entry
                    key = (entry.namespace, entry.name)
                    latest[key] = max(latest.get(key, 0), int(entry.seq))
            except (ValueError, TypeError, KeyError):
                log.warning("skipping an unreadable journal line: %r", line[:200])
        pending = [e for e in entries.values() if latest[(e.namespace, e.name)] == e.seq]
        return sorted(pending, key=_seq), len(lines), max(latest.values(), default=0)

    @staticmethod
    def _line(item: object) -> bytes:
        return (json.dumps(item, separators=(",", ":")) + "\n").encode()

    def _append(self, item: object) -> None:
        os.write(self._fd, self._line(item))
        self._lines += 1

    def append(self, namespace: str, name: str, uid: str, value: str) -> Entry:
        with self._lock:
            self._seq += 1
            entry = Entry(self._seq, namespace, name, uid, value)
            self._append(asdict(entry))
            self._pending[entry.seq] = entry
            return entry

    def landed(self, entry: Entry) -> None:
        """`entry` was written (or needs writing no more); empties the file once none is left,
        and compacts it once it has grown long around entries that stay."""
        with self._lock:
            if self._pending.pop(entry.seq, None) is None:
                return
            if not self._pending:
                os.ftruncate(self._fd, 0)
                self._lines = 0
            elif self._lines >= max(self.compact_lines, 2 * len(self._pending)):
                self._compact()
            else:
                self._append({"landed": entry.seq})

    def _compact(self) -> None:
        """Rewrite the file with the entries still to write: written beside it, then renamed
        over it (atomic), so a crash at any point leaves a file that reads the same."""
        body = b"".join(self._line(asdict(e)) for e in sorted(self._pending.values(), key=_seq))
        copy = self.path.with_name(self.path.name + ".compacting")
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(copy, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._lines = len(self._pending)

    def pending(self) -> list[Entry]:
        with self._lock:
            return sorted(self._pending.values(), key=_seq)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def _seq(entry: Entry) -> int:
    return entry.seq


@dataclass(frozen=True)
class Failure:
    """Why a record's write did not land."""

    reason: str
    """`Forbidden`, `Invalid`, `BadRequest` (refused), or a transient reason."""
    message: str
    refused: bool
    """The API server refused this Pod's record as it is: told once, retried at the longest
    backoff. Otherwise transient (the API server busy, away, or in a conflict)."""


def failure_of(error: BaseException) -> Failure | None:
    """What a failed write says; None when it says the Pod is gone (404)."""
    status = getattr(error, "status", None)
    message = str(getattr(error, "message", "") or error)[:MESSAGE_CHARS]
    if status == NOT_FOUND:
        return None
    if isinstance(status, int):
        if status in REFUSED_REASONS:
            return Failure(REFUSED_REASONS[status], message, True)
        if status in TRANSIENT_REASONS:
            return Failure(TRANSIENT_REASONS[status], message, False)
        return Failure("ServerError" if status >= 500 else f"HTTP{status}", message, False)
    if isinstance(error, (requests.Timeout, TimeoutError)):
        return Failure("Timeout", message, False)
    if isinstance(error, (requests.ConnectionError, ConnectionError)):
        return Failure("Unreachable", message, False)
    return Failure(type(error).__name__, message, False)


def next_delay(previous: float, first: float, cap: float) -> float:
    """The backoff after `previous` (0: none yet): doubling from `first`, never past `cap`."""
    return min(first if previous <= 0 else previous * 2, cap)


@dataclass
class _Lane:
    """One Pod's records on their way: only the latest is ever written."""

    entry: Entry
    flying: Entry | None = None
    """The entry being written now (a Pod has at most one write on its way)."""
    failure: Failure | None = None
    """The failure in force since the lane last landed (its message as first given)."""
    failures: int = 0
    """Failed tries since the lane last landed: from the first, its writes are retried."""
    delay: float = 0.0
    turn: int = 0
    """The lane's current retry; queued retries of an earlier turn are stale."""
    reported: bool = False
    """The refusal was told (an Event) for this Pod."""


_LANDED = "landed"
_GONE = "gone"


class JournaledWriter:
    """An `AnnotationWriter` that journals the record and writes the annotation from threads of
    its own: first writes from a pool, started in journal order, a failed one retried on its own
    (the module's docstring), until it lands or the Pod is gone (or is another Pod of that
    name)."""

    def __init__(
        self,
        journal: Journal,
        target: AnnotationWriter,
        uid_of: Callable[[str, str], str],
        current_uid: Callable[[str, str], str | None],
        backoff: tuple[float, float] = (0.05, 5.0),
        answer_hold: float = ANSWER_HOLD_S,
        refused_backoff: float = REFUSED_BACKOFF_S,
        events: EventRecorder | None = None,
        on_stuck: Callable[[], None] | None = None,
        retry_threads: int = RETRY_THREADS,
        jitter: Callable[[], float] = random.random,
        first_write_threads: int = FIRST_WRITE_THREADS,
    ) -> None:
        """`uid_of(namespace, name)` is the uid of the Pod being granted (from the cache the
        grant was decided on); `current_uid` reads the Pod afresh (None: gone) before a retry;
        a write waits up to `answer_hold` seconds for the answers on their way (`answering`).
        `events` gets the refusal Events; `on_stuck` is called (from a writer thread; it must
        not block) whenever what `stuck` lists changes. `jitter()` in [0, 1) shortens each
        retry's delay by up to `JITTER` of it. `first_write_threads` and `retry_threads` size
        the two pools."""
        self.journal = journal
        self.target = target
        self.uid_of = uid_of
        self.current_uid = current_uid
        self.backoff = backoff
        self.answer_hold = answer_hold
        self.refused_backoff = max(refused_backoff, backoff[1])
        self.events = events
        self.on_stuck = on_stuck or (lambda: None)
        self.jitter = jitter
        self._idle = threading.Condition()
        """Guards every lane, the first-write queue and the retry heap."""
        self._answers = Answers(self._idle)
        """Allocate answers on their way: the journal made their records durable, so their
        writes wait until the answers have left (woken at once, the write would share the
        interpreter with the answer it follows: built, encoded and sent by other threads)."""
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._fresh: deque[Entry] = deque()
        """First writes, in journal order."""
        self._retries: list[tuple[float, int, tuple[str, str], int]] = []
        """A heap of (due, seq, lane key, turn): the lanes whose writes failed."""
        self._stopped = False
        # First writes, started in journal order; failed ones, each when its backoff has passed.
        pools = (
            ("annotations", first_write_threads, self._claim, False),
            ("annotation-retries", retry_threads, self._due, True),
        )
        self._threads = [
            threading.Thread(
                target=self._work, args=(claim, recheck), name=f"{name}-{n}", daemon=True
            )
            for name, threads, claim, recheck in pools
            for n in range(max(threads, 1))
        ]
        for thread in self._threads:
            thread.start()

    def write(self, namespace: str, name: str, value: str) -> None:
        entry = self.journal.append(namespace, name, self.uid_of(namespace, name), value)
        self._submit(entry)

    def answering(self) -> Callable[[], None]:
        """An Allocate is answering: writes wait (at most `answer_hold`) until every answer
        on its way has left. Call what this returns once it has; a second call does nothing."""
        return self._answers.begin()

    def replay(self) -> None:
        """Write again every entry a previous agent did not see land."""
        for entry in self.journal.pending():
            self._submit(entry)

    def drain(self, timeout: float, failing: bool = True) -> bool:
        """Wait until every submitted entry has landed (or was dropped); False on timeout.
        Without `failing`, the lanes that have failed are not waited for (an agent stopping
        leaves them to the journal and the next agent rather than wait out a refusal)."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not any(failing or not lane.failures for lane in self._lanes.values()),
                timeout,
            )

    def stop(self) -> None:
        with self._idle:
            self._stopped = True
            self._idle.notify_all()

    def stuck(self) -> list[tuple[Entry, Failure]]:
        """Each Pod whose record failed to land and has not landed since: its latest entry and
        the failure in force, in journal order."""
        with self._idle:
            found = [(lane.entry, lane.failure) for lane in self._lanes.values() if lane.failure]
        return sorted(found, key=lambda item: item[0].seq)

    # --- lanes (every method below that touches them runs under `_idle`) ------------------

    def _submit(self, entry: Entry) -> None:
        superseded: Entry | None = None
        moved = False
        with self._idle:
            key = (entry.namespace, entry.name)
            lane = self._lanes.get(key)
            if lane is None:
                self._lanes[key] = _Lane(entry)
                self._fresh.append(entry)
            else:
                if lane.entry is not lane.flying:
                    superseded = lane.entry  # never written now: the later entry says it all
                if lane.entry.uid != entry.uid:  # another Pod of that name: its own story
                    moved = lane.failure is not None  # the gone Pod's listing goes
                    lane.failure, lane.failures, lane.delay, lane.reported = None, 0, 0.0, False
                lane.entry = entry
                if lane.failures:
                    # The Pod's writes are on the retry threads (they may be slow for it): the
                    # later record goes there too, at once, and is listed as stuck meanwhile.
                    lane.delay = 0.0
                    moved = True
                    if lane.flying is None:
                        self._schedule(lane, 0.0)
                else:
                    self._fresh.append(entry)
            if superseded is not None:
                self.journal.landed(superseded)
            self._measure()
            self._idle.notify_all()
        if moved:
            self.on_stuck()

    def _schedule(self, lane: _Lane, delay: float) -> None:
        lane.turn += 1
        due = time.monotonic() + delay
        heapq.heappush(self._retries, (due, lane.entry.seq, _key(lane.entry), lane.turn))
        self._idle.notify_all()

    def _measure(self) -> None:
        states = {"queued": 0, "retrying": 0, "refused": 0}
        for lane in self._lanes.values():
            failure = lane.failure
            state = "queued" if failure is None else "refused" if failure.refused else "retrying"
            states[state] += 1
        for state, count in states.items():
            RECORDS_PENDING.labels(state).set(count)

    # --- the threads --------------------------------------------------------------------------

    def _hold(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._answers.count == 0, self.answer_hold)

    def _work(self, claim: Callable[[], tuple[_Lane, Entry] | None], recheck: bool) -> None:
        """A writer thread: claim a Pod's write (under the lock; None: stopped), write its latest
        record (before a retry, only if the Pod is still there) and settle the lane."""
        while True:
            with self._idle:
                claimed = claim()
            if claimed is None:
                return
            lane, entry = claimed
            self._attempt(lane, self._latest(lane, entry), recheck)

    def _claim(self) -> tuple[_Lane, Entry] | None:
        """Wait for the next queued first write and claim its lane (None: stopped). Claimed
        under the lock as it leaves the queue, so the pool starts writes in journal order and
        a Pod's write on its way is seen by every other thread."""
        while not self._stopped:
            while self._fresh:
                entry = self._fresh.popleft()
                lane = self._lanes.get(_key(entry))
                # A later entry of the Pod came meanwhile (queued behind), its lane failed once
                # (the retry threads write it now), or a write of the Pod is on its way (its
                # latest entry is queued again once that ends): not written from here now.
                if lane is None or lane.entry is not entry or lane.failures or lane.flying:
                    continue
                lane.flying = entry
                return lane, entry
            self._idle.wait()
        return None

    def _latest(self, lane: _Lane, claimed: Entry) -> Entry:
        """Hold the claimed write for the answers on their way, then the entry to write: the
        Pod's latest. One that came during the hold is written in place of the claimed one,
        which it supersedes (no write of a record already replaced); the lane stays this
        thread's meanwhile, so no other write of the Pod starts."""
        self._hold()
        with self._idle:
            if lane.entry is not claimed:
                self.journal.landed(claimed)
                lane.flying = lane.entry
            return lane.entry

    def _due(self) -> tuple[_Lane, Entry] | None:
        """Wait for the next lane whose retry is due, earliest first, and claim its write
        (None: stopped)."""
        while not self._stopped:
            while self._retries:
                _, _, key, turn = self._retries[0]
                lane = self._lanes.get(key)
                if lane is not None and lane.turn == turn and lane.flying is None:
                    break
                heapq.heappop(self._retries)  # landed, dropped, rescheduled or being written
            if not self._retries:
                self._idle.wait()
                continue
            wait = self._retries[0][0] - time.monotonic()
            if wait > 0:
                self._idle.wait(wait)
                continue
            _, _, key, _ = heapq.heappop(self._retries)
            lane = self._lanes[key]
            lane.flying = lane.entry
            return lane, lane.entry
        return None

    def _attempt(self, lane: _Lane, entry: Entry, recheck: bool) -> None:
        """Write `entry` (before a retry, only if its Pod is still there) and settle the lane."""
        outcome: str | Failure
        if recheck and self._gone(entry):
            outcome = _GONE
        else:
            try:
                self.target.write(entry.namespace, entry.name, entry.value)
                outcome = _LANDED
            except Exception as error:
                outcome = failure_of(error) or _GONE
        self._settle(lane, entry, outcome)

    def _gone(self, entry: Entry) -> bool:
        try:
            uid = self.current_uid(entry.namespace, entry.name)
        except Exception as error:  # the API may be away: keep the entry, try the write
            log.warning("cannot read %s before writing its record: %s", _where(entry), error)
            return False
        return uid != entry.uid

    def _settle(self, lane: _Lane, entry: Entry, outcome: str | Failure) -> None:
        done: list[Entry] = []
        told: list[tuple[str, str, str]] = []
        moved = False
        with self._idle:
            lane.flying = None
            later = lane.entry is not entry
            if later:
                done.append(entry)  # a later entry of the Pod came while this one was written
            if isinstance(outcome, Failure):
                if later:
                    self._follow(lane)
                else:
                    moved, told = self._failed(lane, outcome)
            elif later and not (outcome == _GONE and lane.entry.uid == entry.uid):
                self._follow(lane)
            else:
                # Landed, or the Pod is gone (and with it any later entry of its uid).
                done.append(lane.entry)
                del self._lanes[_key(entry)]
                moved = lane.failures > 0
                if outcome == _GONE:
                    log.info("dropping the record for %s: the Pod is gone", _where(entry))
                elif lane.failures:
                    log.info(
                        "the record of %s landed after %d failed writes",
                        _where(entry),
                        lane.failures,
                    )
                    if lane.reported:
                        note = (
                            f"the allocation record of this Pod landed after {lane.failures} "
                            "failed writes: the node's ledger charges its cards from it now"
                        )
                        told.append((NORMAL, RECORD_LANDED, note))
            # Marked in the file before anyone waiting (`drain`) hears the lane is done.
            for finished in done:
                self.journal.landed(finished)
            self._measure()
            self._idle.notify_all()
        self._tell(entry, told)
        if moved:
            self.on_stuck()

    def _follow(self, lane: _Lane) -> None:
        """A later entry waited behind the write that just ended: on the retry threads, at
        once, if the lane has failed before; else queued for a first write (again: the queued
        copy may have been passed over while the earlier write was on its way, and a copy
        found written already is passed over)."""
        if lane.failures:
            self._schedule(lane, 0.0)
        else:
            self._fresh.append(lane.entry)

    def _failed(self, lane: _Lane, failure: Failure) -> tuple[bool, list[tuple[str, str, str]]]:
        """Count a failure of the lane's latest entry and schedule its retry; whether what
        `stuck` lists changed, and the Events to tell."""
        entry = lane.entry
        changed = lane.failure is None or lane.failure.reason != failure.reason
        if changed:
            lane.failure = failure  # the message as first given: the ledger's listing is stable
        lane.failures += 1
        cap = self.refused_backoff if failure.refused else self.backoff[1]
        lane.delay = next_delay(lane.delay, self.backoff[0], cap)
        delay = lane.delay * (1 - JITTER * self.jitter())
        self._schedule(lane, delay)
        told: list[tuple[str, str, str]] = []
        if failure.refused:
            RECORD_REFUSALS.labels(failure.reason).inc()
            if not lane.reported:
                lane.reported = True
                told.append((WARNING, RECORD_REFUSED, self._refused_note(failure)))
        else:
            RECORD_FAILURES.labels(failure.reason).inc()
        level = logging.WARNING if changed else logging.DEBUG
        log.log(
            level,
            "writing the record of %s failed (%s: %s); retrying in %.2fs, other Pods' records "
            "go on",
            _where(entry),
            failure.reason,
            failure.message,
            delay,
        )
        return changed, told

    def _refused_note(self, failure: Failure) -> str:
        return (
            f"the API server refused this Pod's allocation record ({failure.reason}). The kubelet "
            "granted its cards: the node agent keeps them charged in its node's ledger (listed "
            "in the node's Devices status.unrecorded) and writes the record again every "
            f"{self.refused_backoff:g} s until it lands or the Pod is deleted. The API server "
            f"said: {failure.message}"
        )

    def _tell(self, entry: Entry, told: Sequence[tuple[str, str, str]]) -> None:
        if self.events is None:
            return
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": entry.namespace, "name": entry.name, "uid": entry.uid},
        }
        for type_, reason, note in told:
            self.events.event(pod, type_, reason, note, action=EVENT_ACTION)


def _key(entry: Entry) -> tuple[str, str]:
    return entry.namespace, entry.name


def _where(entry: Entry) -> str:
    return f"{entry.namespace}/{entry.name}"


def recover(journal: Journal, node: NodeState, pods: Sequence[Pod]) -> int:
    """Hold again, as reservations, what the journal's unlanded entries granted to Pods still
    on the node (`pods`, read afresh), before any Allocate is served; drop the rest. The count
    of Pods whose records came back."""
    live = {(p.namespace, p.name): p.uid for p in (PodAllocations.from_pod(pod) for pod in pods)}
    restored = 0
    for entry in journal.pending():
        if live.get((entry.namespace, entry.name)) != entry.uid:
            journal.landed(entry)  # the Pod is gone (or is another Pod now): nothing to hold
            continue
        records = parse_allocated(entry.value).items()
        node.restore({Holder(entry.uid, container): record for container, record in records})
        restored += 1
    return restored
