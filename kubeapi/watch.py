"""List+watch of one kind into a thread-safe cache: a small informer over `Kube`.

A `Watcher` thread lists the kind once, then follows a watch from the list's resourceVersion
(`?watch=1&allowWatchBookmarks=true&timeoutSeconds=...`, one JSON event per line). The server
ends each watch after `timeoutSeconds`; the next one resumes from the last resourceVersion seen
(an object's or a BOOKMARK's), so no event is lost and nothing is listed again. Only a 410 Gone
(that version left the server's window) makes it list afresh. A broken connection or a refused
request is retried with a doubling backoff, each wait shortened at random by up to half
(`kubeapi.client.jittered`), so the watchers of many processes that lost the same API server
come back spread out rather than in step.

The `Cache` holds the latest object per namespace/name and counts changes; a consumer notes
`changes` before it reads and `wait`s for the count to move on, so a change that lands while it
works wakes it at once instead of being slept through.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import requests

from kubeapi.client import Kube, KubeError, Obj, jittered

log = logging.getLogger("kubeapi.watch")

WATCH_SECONDS = 300
"""How long the server keeps one watch open; the next resumes where it ended."""
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0

Key = tuple[str, str]


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _trimmed(obj: Obj) -> Obj:
    """The object without `metadata.managedFields`: server-side apply's bookkeeping is often
    the largest part of an object, and no reader of a cache needs it (writers send their own
    field manager), so a cache of every bound Pod would mostly hold it."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _version(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class Event:
    """One line of a watch: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and its object."""

    type: str
    object: Obj

    @classmethod
    def parse(cls, line: bytes | str) -> Event:
        try:
            body = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"watch event is not JSON ({err.msg})") from None
        if not isinstance(body, dict) or not isinstance(body.get("object"), dict):
            raise ValueError("watch event without an object")
        return cls(str(body.get("type", "")), body["object"])


def _set(flag: threading.Event | None) -> bool:
    return flag is not None and flag.is_set()


class Gone(Exception):
    """The watch's resourceVersion is too old (410): only a fresh list can resume."""


class Cache:
    """The latest object per (namespace, name), as the list and the watch events left it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._objects: dict[Key, Obj] = {}
        self._version = ""
        self._changes = 0
        self._synced = False
        self._touched: dict[Key, int] = {}
        """Key -> the change that last touched it (deletions too), oldest first."""
        self._forgotten = 0
        """Changes up to this one are no longer listed key by key (`changed_since`)."""

    @property
    def synced(self) -> bool:
        """True once a first list has filled the cache."""
        with self._cond:
            return self._synced

    @property
    def resource_version(self) -> str:
        with self._cond:
            return self._version

    @property
    def changes(self) -> int:
        with self._cond:
            return self._changes

    def items(self) -> list[Obj]:
        """The objects, ordered by namespace/name; callers must not modify them."""
        with self._cond:
            return [self._objects[k] for k in sorted(self._objects)]

    def get(self, key: Key) -> Obj | None:
        with self._cond:
            return self._objects.get(key)

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        """A fresh list: everything not in it is gone."""
        with self._cond:
            before = self._objects
            self._objects = {key_of(obj): _trimmed(obj) for obj in items}
            self._version = resource_version
            self._synced = True
            self._bump(*before, *self._objects)

    def apply(self, event: Event) -> None:
        """Fold one watch event in; ERROR is the caller's to handle."""
        with self._cond:
            version = _version(event.object)
            if event.type in ("ADDED", "MODIFIED"):
                key = key_of(event.object)
                self._objects[key] = _trimmed(event.object)
                self._bump(key)
            elif event.type == "DELETED":
                key = key_of(event.object)
                self._objects.pop(key, None)
                self._bump(key)
            elif event.type != "BOOKMARK":
                raise ValueError(f"unexpected watch event {event.type!r}")
            # A BOOKMARK moves the resume point only: no object changed, so nobody wakes.
            if version:
                self._version = version

    def wait(self, seen: int, timeout: float, stop: threading.Event | None = None) -> int:
        """Block until the change count differs from `seen`, `stop` is set (seen by the next
        `wake`) or `timeout` passes; the count."""
        with self._cond:
            self._cond.wait_for(lambda: self._changes != seen or _set(stop), timeout)
            return self._changes

    def wake(self) -> None:
        """Make every waiter look again, at its `stop` flag: a thread that follows the cache
        ends at once when told to, not after its tick."""
        with self._cond:
            self._cond.notify_all()

    def changed_since(self, seen: int) -> list[Key] | None:
        """The keys added, modified or deleted after change number `seen` (`changes` read
        earlier), oldest change first; None when that is further back than the cache keeps
        count of: read everything."""
        with self._cond:
            if seen < self._forgotten:
                return None
            found = []
            for key in reversed(self._touched):
                if self._touched[key] <= seen:
                    break
                found.append(key)
            found.reverse()
            return found

    def _bump(self, *keys: Key) -> None:
        self._changes += 1
        for key in keys:
            self._touched.pop(key, None)
            self._touched[key] = self._changes
        # Deleted keys are remembered for a while; past twice the live ones, they are
        # forgotten and a reader further back than that reads everything again.
        if len(self._touched) > 2 * len(self._objects) + 1024:
            self._touched = {k: n for k, n in self._touched.items() if k in self._objects}
            self._forgotten = self._changes
        self._cond.notify_all()


def _interrupt(response: requests.Response) -> None:
    """Shut the socket under a read blocked on the next event. Closing the response would not
    do: it waits for that very read to return, which can take the whole watch."""
    connection = getattr(response.raw, "_connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class Watcher:
    """Keeps a `Cache` of one kind current from a background thread."""

    def __init__(
        self,
        kube: Kube,
        api_version: str,
        kind: str,
        cache: Cache | None = None,
        watch_seconds: int = WATCH_SECONDS,
        backoff: tuple[float, float] = (BACKOFF_MIN, BACKOFF_MAX),
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """`namespace`: follow that namespace's objects only (a role that grants `list` and
        `watch` in one namespace allows no more); every namespace's when None. `jitter()`, in
        [0, 1), picks how much of `kubeapi.client.JITTER` shortens each backoff wait."""
        self.kube = kube
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        # The same selectors on the list and on every watch: an object that stops matching
        # arrives as DELETED, one that starts matching as ADDED (the API server's rule).
        self.selectors = {
            name: value
            for name, value in (
                ("labelSelector", label_selector),
                ("fieldSelector", field_selector),
            )
            if value
        }
        self.cache = cache or Cache()
        self.watch_seconds = watch_seconds
        self.backoff = backoff
        self.jitter = jitter
        self.lists = 0
        """Lists made so far (the first, then one per 410)."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._response: requests.Response | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.kind}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            if self._response is not None:
                _interrupt(self._response)
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        delay = self.backoff[0]
        fresh = True
        while not self._stop.is_set():
            try:
                if fresh:
                    self.relist()
                    fresh = False
                began = time.monotonic()
                self.watch_once()
                delay = self.backoff[0]
                if time.monotonic() - began < delay:
                    self._pause(delay)  # a server ending every watch at once: no hot loop
            except Gone:
                log.info("%s watch expired (410): listing again", self.kind)
                fresh = True
            except Exception as err:
                # Whatever broke (a refused request, a dropped connection, a garbled line, a
                # stream closed under the read), a dead thread would freeze the cache silently.
                if self._stop.is_set():
                    break
                log.warning("%s watch failed: %s; again in %.1fs at most", self.kind, err, delay)
                self._pause(delay)
                delay = min(delay * 2, self.backoff[1])

    def _pause(self, delay: float) -> None:
        """Wait `delay`, shortened by the jitter, or until stopped."""
        self._stop.wait(jittered(delay, self.jitter))

    def relist(self) -> None:
        listing = self.kube.list_object(
            self.api_version,
            self.kind,
            namespace=self.namespace,
            label_selector=self.selectors.get("labelSelector"),
            field_selector=self.selectors.get("fieldSelector"),
        )
        self.lists += 1
        meta = listing.get("metadata") or {}
        self.cache.replace(listing.get("items") or [], str(meta.get("resourceVersion") or ""))

    def watch_once(self) -> None:
        """Follow one watch until the server ends it; Gone when it must list afresh."""
        path = self.kube.resource(self.api_version, self.kind).path(self.namespace)
        params = {
            "watch": "1",
            "resourceVersion": self.cache.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_seconds),
            **self.selectors,
        }
        try:
            response = self.kube.stream(path, params, read_timeout=self.watch_seconds + 30)
        except KubeError as err:
            if err.status == 410:
                raise Gone from err
            raise
        with self._lock:
            self._response = response
        try:
            if self._stop.is_set():
                return  # stopped while connecting: `stop` found nothing to interrupt
            # chunk_size=None: each event as its chunk arrives, not once a buffer fills.
            for line in response.iter_lines(chunk_size=None):
                if self._stop.is_set():
                    return
                if line:
                    self._fold(Event.parse(line))
        finally:
            with self._lock:
                self._response = None
            response.close()

    def _fold(self, event: Event) -> None:
        if event.type == "ERROR":
            code = int(event.object.get("code") or 0)
            if code == 410:
                raise Gone
            raise KubeError(code, str(event.object.get("message", "watch error")))
        self.cache.apply(event)


def start_all(watchers: Iterable[Watcher]) -> list[Watcher]:
    """Start every watcher; the list, for `stop_all`."""
    return [watcher.start() for watcher in watchers]


def stop_all(watchers: Iterable[Watcher]) -> None:
    for watcher in watchers:
        watcher.stop()


def all_synced(caches: Iterable[Cache]) -> bool:
    """True once every cache has been listed: nothing may be decided from a partial view."""
    return all(cache.synced for cache in caches)
