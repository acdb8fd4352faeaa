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
written. The file is emptied whenever nothing is left to write.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from chain.ledger_rebuild import Holder, PodAllocations, parse_allocated
from nodeagent.plugin.node import AnnotationWriter, Answers, NodeState, Pod

log = logging.getLogger(__name__)

JOURNAL_NAME = "allocations.journal"
NOT_FOUND = 404
ANSWER_HOLD_S = 0.05
"""The longest a record's write waits for an Allocate answer still on its way (`answering`)."""


@dataclass(frozen=True)
class Entry:
    seq: int
    namespace: str
    name: str
    uid: str
    value: str


class Journal:
    """The append-only file; every method is safe from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._pending = {entry.seq: entry for entry in self._read()}
        self._seq = max(self._pending, default=0)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _read(self) -> list[Entry]:
        """The entries not marked landed, a Pod's latest only; a torn last line is skipped."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        entries: dict[int, Entry] = {}
        for line in lines:
            try:
                item = json.loads(line)
                if "landed" in item:
                    entries.pop(int(item["landed"]), None)
                else:
                    entries[int(item["seq"])] = Entry(**item)
            except (ValueError, TypeError, KeyError):
                log.warning("skipping an unreadable journal line: %r", line[:200])
        latest: dict[tuple[str, str], Entry] = {}
        for entry in sorted(entries.values(), key=lambda e: e.seq):
            latest[(entry.namespace, entry.name)] = entry
        return sorted(latest.values(), key=lambda e: e.seq)

    def _append(self, item: object) -> None:
        os.write(self._fd, (json.dumps(item, separators=(",", ":")) + "\n").encode())

    def append(self, namespace: str, name: str, uid: str, value: str) -> Entry:
        with self._lock:
            self._seq += 1
            entry = Entry(self._seq, namespace, name, uid, value)
            self._append(asdict(entry))
            self._pending[entry.seq] = entry
            return entry

    def landed(self, entry: Entry) -> None:
        """`entry` was written (or needs writing no more); empties the file once none is left."""
        with self._lock:
            self._pending.pop(entry.seq, None)
            if self._pending:
                self._append({"landed": entry.seq})
            else:
                os.ftruncate(self._fd, 0)

    def pending(self) -> list[Entry]:
        with self._lock:
            return sorted(self._pending.values(), key=lambda e: e.seq)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


class JournaledWriter:
    """An `AnnotationWriter` that journals the record and writes the annotation from a thread:
    in order, retried with backoff until it lands or the Pod is gone (or is another Pod of the
    same name)."""

    def __init__(
        self,
        journal: Journal,
        target: AnnotationWriter,
        uid_of: Callable[[str, str], str],
        current_uid: Callable[[str, str], str | None],
        backoff: tuple[float, float] = (0.05, 5.0),
        answer_hold: float = ANSWER_HOLD_S,
    ) -> None:
        """`uid_of(namespace, name)` is the uid of the Pod being granted (from the cache the
        grant was decided on); `current_uid` reads the Pod afresh (None: gone) before a retry;
        a write waits up to `answer_hold` seconds for the answers on their way (`answering`)."""
        self.journal = journal
        self.target = target
        self.uid_of = uid_of
        self.current_uid = current_uid
        self.backoff = backoff
        self.answer_hold = answer_hold
        self._queue: queue.Queue[Entry | None] = queue.Queue()
        self._idle = threading.Condition()
        self._answers = Answers(self._idle)
        """Allocate answers on their way: the journal made their records durable, so their
        writes wait until the answers have left (woken at once, the write would share the
        interpreter with the answer it follows: built, encoded and sent by other threads)."""
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="annotations", daemon=True)
        self._thread.start()

    def write(self, namespace: str, name: str, value: str) -> None:
        entry = self.journal.append(namespace, name, self.uid_of(namespace, name), value)
        self._submit(entry)

    def answering(self) -> Callable[[], None]:
        """An Allocate is answering: writes wait (at most `answer_hold`) until every answer
        on its way has left. Call what this returns once it has; a second call does nothing."""
        return self._answers.begin()

    def _submit(self, entry: Entry) -> None:
        with self._idle:
            self._busy += 1
        self._queue.put(entry)

    def replay(self) -> None:
        """Write again every entry a previous agent did not see land."""
        for entry in self.journal.pending():
            self._submit(entry)

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted entry has landed (or was dropped); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def stop(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        while (entry := self._queue.get()) is not None:
            with self._idle:
                self._idle.wait_for(lambda: self._answers.count == 0, self.answer_hold)
            self._land(entry)
            self.journal.landed(entry)
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _land(self, entry: Entry) -> None:
        delay = self.backoff[0]
        where = f"{entry.namespace}/{entry.name}"
        first = True
        while True:
            if not first:
                try:
                    uid = self.current_uid(entry.namespace, entry.name)
                except Exception as error:  # the API may be away: keep the entry, try again
                    log.warning("cannot read %s before writing its record: %s", where, error)
                    uid = entry.uid
                if uid != entry.uid:
                    log.info("dropping the record for %s: the Pod is gone", where)
                    return
            first = False
            try:
                self.target.write(entry.namespace, entry.name, entry.value)
                return
            except Exception as error:
                if getattr(error, "status", None) == NOT_FOUND:
                    log.info("dropping the record for %s: the Pod is gone", where)
                    return
                log.warning("writing the record of %s failed (%s); retrying", where, error)
            threading.Event().wait(delay)
            delay = min(delay * 2, self.backoff[1])


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
        for container, record in parse_allocated(entry.value).items():
            node.reservations[Holder(entry.uid, container)] = record
        restored += 1
    return restored
