"""The list+watch cache against a tiny local API server speaking the watch protocol."""

from __future__ import annotations

import json
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kubeapi import Kube
from kubeapi.client import JITTER
from kubeapi.watch import Cache, Event, Watcher

API = "kueue.x-k8s.io/v1beta2"
PATH = f"/apis/{API}/workloads"
NS_PATH = f"/apis/{API}/namespaces/team-a/workloads"
Obj = dict[str, Any]
Step = Obj | int | float
"""A scripted watch: an event to send, an HTTP status to answer instead (int), or a pause (s)."""


def workload(name: str, version: str, state: str = "Pending") -> Obj:
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": version},
        "status": {"state": state},
    }


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def bookmark(version: str) -> Obj:
    return event("BOOKMARK", {"kind": "Workload", "metadata": {"resourceVersion": version}})


class FakeApi:
    """Discovery, a list, and watches played from scripts; records every watch's query."""

    def __init__(self) -> None:
        self.items: list[Obj] = []
        self.list_version = "10"
        self.watches: queue.Queue[list[Step]] = queue.Queue()
        self.queries: list[dict[str, str]] = []
        self.list_queries: list[dict[str, str]] = []
        self.paths: list[str] = []
        """Every list's and watch's path, in order."""
        self.closing = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == f"/apis/{API}":
                    resources = [{"name": "workloads", "namespaced": True, "kind": "Workload"}]
                    self._json(200, {"resources": resources})
                elif url.path in (PATH, NS_PATH) and query.get("watch") != "1":
                    api.paths.append(url.path)
                    api.list_queries.append(query)
                    body = {"items": api.items, "metadata": {"resourceVersion": api.list_version}}
                    self._json(200, body)
                elif url.path in (PATH, NS_PATH):
                    api.paths.append(url.path)
                    api.queries.append(query)
                    self._watch(query)
                else:
                    self._json(404, {"message": "not found"})

            def _json(self, code: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, query: dict[str, str]) -> None:
                script: list[Step] = []
                deadline = time.monotonic() + float(query["timeoutSeconds"])
                while not api.closing.is_set() and time.monotonic() < deadline:
                    try:
                        script = api.watches.get(timeout=0.02)
                        break
                    except queue.Empty:
                        continue
                if script and isinstance(script[0], int) and not isinstance(script[0], bool):
                    self._json(script[0], {"kind": "Status", "code": script[0], "message": "x"})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for step in script:
                    if isinstance(step, float):
                        time.sleep(step)
                        continue
                    line = json.dumps(step).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")  # the server ends the watch (timeoutSeconds)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kube(self) -> Kube:
        return Kube(f"http://127.0.0.1:{self.server.server_address[1]}", Path("/nonexistent"))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    yield fake
    fake.close()


@pytest.fixture
def start(api: FakeApi) -> Iterator[Callable[[], Watcher]]:
    started: list[Watcher] = []

    def make() -> Watcher:
        watcher = Watcher(api.kube(), API, "Workload", watch_seconds=1, backoff=(0.05, 0.2))
        started.append(watcher.start())
        return watcher

    yield make
    api.closing.set()  # end the watches the server holds open with nothing to send
    for watcher in started:
        watcher.stop()


def until(probe: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def names(cache: Cache) -> dict[str, str]:
    return {o["metadata"]["name"]: o["status"]["state"] for o in cache.items()}


def test_list_then_added_modified_deleted(api: FakeApi, start: Callable[[], Watcher]) -> None:
    api.items = [workload("a", "5")]
    api.watches.put(
        [
            event("ADDED", workload("b", "11")),
            event("MODIFIED", workload("a", "12", "Ready")),
            event("DELETED", workload("b", "13")),
        ]
    )
    watcher = start()
    until(lambda: watcher.cache.resource_version == "13")
    assert names(watcher.cache) == {"a": "Ready"}
    assert api.queries[0]["resourceVersion"] == "10"  # from the list, not from an item
    assert api.queries[0]["allowWatchBookmarks"] == "true"
    assert watcher.lists == 1


def test_an_event_wakes_a_waiting_reader_without_waiting_for_the_watch_to_end(
    api: FakeApi, start: Callable[[], Watcher]
) -> None:
    api.watches.put([0.3, event("ADDED", workload("a", "11")), 0.7])
    watcher = start()
    until(lambda: watcher.cache.synced)
    seen = watcher.cache.changes
    began = time.monotonic()
    assert watcher.cache.wait(seen, 5.0) != seen
    assert time.monotonic() - began < 0.6  # the stream is still open for another 0.7 s
    assert names(watcher.cache) == {"a": "Pending"}


def test_selectors_scope_the_list_and_every_watch(api: FakeApi) -> None:
    api.items = [workload("a", "5")]
    watcher = Watcher(
        api.kube(),
        API,
        "Workload",
        watch_seconds=1,
        backoff=(0.05, 0.2),
        label_selector="team=a",
        field_selector="spec.nodeName=n1",
    ).start()
    try:
        until(lambda: len(api.queries) >= 1)
        scoped = {"labelSelector": "team=a", "fieldSelector": "spec.nodeName=n1"}
        assert api.list_queries == [{**scoped, "limit": "500"}]  # a list comes in pages
        assert {k: api.queries[0][k] for k in scoped} == scoped
    finally:
        api.closing.set()
        watcher.stop()


def test_a_namespace_scopes_the_list_and_every_watch(api: FakeApi) -> None:
    """A role granting `list` and `watch` in one namespace allows no cluster-wide request."""
    api.items = [workload("a", "5")]
    api.watches.put([event("ADDED", workload("b", "11"))])
    watcher = Watcher(
        api.kube(), API, "Workload", watch_seconds=1, backoff=(0.05, 0.2), namespace="team-a"
    ).start()
    try:
        until(lambda: len(api.queries) >= 2)
        assert set(api.paths) == {NS_PATH}
        assert sorted(o["metadata"]["name"] for o in watcher.cache.items()) == ["a", "b"]
    finally:
        api.closing.set()
        watcher.stop()


def test_a_bookmark_moves_the_resume_point_and_wakes_nobody(
    api: FakeApi, start: Callable[[], Watcher]
) -> None:
    api.watches.put([bookmark("42")])
    api.watches.put([event("ADDED", workload("a", "43"))])
    watcher = start()
    until(lambda: watcher.cache.synced)
    seen = watcher.cache.changes
    until(lambda: len(api.queries) >= 2)
    assert api.queries[1]["resourceVersion"] == "42"
    until(lambda: watcher.cache.resource_version == "43")
    assert watcher.cache.changes == seen + 1  # the ADDED, not the BOOKMARK
    assert watcher.lists == 1  # resuming after the watch ended needs no list


@pytest.mark.parametrize("gone", ["error event", "status"])
def test_gone_lists_afresh(api: FakeApi, start: Callable[[], Watcher], gone: str) -> None:
    api.items = [workload("a", "5"), workload("b", "6")]
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    watcher = start()
    until(lambda: watcher.cache.synced)
    api.items = [workload("b", "20", "Ready")]  # a was deleted while the watch was away
    api.list_version = "21"
    # Only now is the watch told its version is gone: given before, the list it makes again
    # could come before the lines above on a busy machine, and read the old items.
    api.watches.put([event("ERROR", status)] if gone == "error event" else [410])
    until(lambda: watcher.lists == 2)
    until(lambda: watcher.cache.resource_version == "21")
    assert names(watcher.cache) == {"b": "Ready"}
    until(lambda: len(api.queries) >= 2)
    assert api.queries[1]["resourceVersion"] == "21"


def test_a_refused_watch_is_retried_from_the_same_version(
    api: FakeApi, start: Callable[[], Watcher]
) -> None:
    api.watches.put([500])
    api.watches.put([event("ADDED", workload("a", "11"))])
    watcher = start()
    until(lambda: watcher.cache.resource_version == "11")
    assert [q["resourceVersion"] for q in api.queries[:2]] == ["10", "10"]
    assert watcher.lists == 1


def test_failed_watches_back_off_doubling_capped_and_shortened_by_the_jitter(
    api: FakeApi,
) -> None:
    """Waits are recorded, not slept: each is its step less `JITTER` times the jitter drawn."""
    for _ in range(4):
        api.watches.put([500])
    api.watches.put([event("ADDED", workload("a", "11"))])
    draws = iter([0.0, 1.0, 0.5, 0.2] + [0.0] * 100)
    watcher = Watcher(
        api.kube(), API, "Workload", watch_seconds=1, backoff=(1.0, 4.0), jitter=lambda: next(draws)
    )
    waits: list[float] = []

    class Recorded(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(float(timeout or 0))
            return self.is_set()

    watcher._stop = Recorded()
    watcher.start()
    until(lambda: watcher.cache.resource_version == "11")
    watcher.stop()
    # Steps 1, 2, 4, 4 (capped); shortened by half of 0, 1, 0.5 and 0.2.
    assert waits[:4] == pytest.approx([1.0, 1.0, 3.0, 3.6])


def test_the_jitter_draws_from_the_random_module_by_default() -> None:
    watcher = Watcher(Kube("http://127.0.0.1:1", Path("/nonexistent")), API, "Workload")
    assert watcher.jitter is random.random and 0 < JITTER <= 0.5


def test_stop_ends_an_open_watch(api: FakeApi) -> None:
    api.watches.put([event("ADDED", workload("a", "11")), 30.0])
    watcher = Watcher(api.kube(), API, "Workload", watch_seconds=60).start()
    until(lambda: watcher.cache.resource_version == "11")
    began = time.monotonic()
    watcher.stop()
    assert watcher._thread is not None and not watcher._thread.is_alive()
    assert time.monotonic() - began < 5


def test_event_parsing() -> None:
    assert Event.parse(b'{"type": "ADDED", "object": {"a": 1}}') == Event("ADDED", {"a": 1})
    for broken in (b"{", b"[]", b'{"type": "ADDED"}'):
        with pytest.raises(ValueError):
            Event.parse(broken)
    cache = Cache()
    with pytest.raises(ValueError):
        cache.apply(Event("SURPRISE", {}))


def test_the_cache_keeps_no_managed_fields() -> None:
    cache = Cache()
    heavy = workload("a", "1")
    heavy["metadata"]["managedFields"] = [{"manager": "kueue", "fieldsV1": {"f:status": {}}}]
    cache.replace([heavy], "1")
    assert "managedFields" not in cache.items()[0]["metadata"]
    cache.apply(Event("MODIFIED", heavy))
    [kept] = cache.items()
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["name"] == "a"
    assert "managedFields" in heavy["metadata"]  # the caller's object is left as it was


def _wl(name: str, version: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


def test_the_cache_says_which_keys_changed_since_a_change_number() -> None:
    cache = Cache()
    cache.replace([_wl("a"), _wl("b")], "1")
    listed = cache.changes
    assert cache.changed_since(0) == [("ns", "a"), ("ns", "b")]
    cache.apply(Event("MODIFIED", _wl("b", "2")))
    cache.apply(Event("ADDED", _wl("c", "3")))
    cache.apply(Event("DELETED", _wl("a", "4")))
    cache.apply(Event("MODIFIED", _wl("b", "5")))  # listed once, at its latest change
    assert cache.changed_since(listed) == [("ns", "c"), ("ns", "a"), ("ns", "b")]
    assert cache.changed_since(cache.changes) == []
    # A fresh list touches what it brings and what it drops.
    now = cache.changes
    cache.replace([_wl("b", "6")], "6")
    assert sorted(cache.changed_since(now) or []) == [("ns", "b"), ("ns", "c")]


def test_a_reader_further_back_than_the_cache_remembers_reads_everything() -> None:
    cache = Cache()
    cache.replace([], "1")
    start = cache.changes
    for number in range(1100):  # deleted keys pile up past twice the live ones, plus 1,024
        cache.apply(Event("ADDED", _wl(f"w{number}")))
        cache.apply(Event("DELETED", _wl(f"w{number}")))
    assert cache.changed_since(start) is None
    latest = cache.changes
    cache.apply(Event("ADDED", _wl("x")))
    assert cache.changed_since(latest) == [("ns", "x")]
