"""Verdict writes off the driver's loop.

The driver decides one Workload at a time, and each decision sees the promises of the ones
before it; but it need not wait out each write's round trip (most of a verdict's time once the
reads come from caches) before deciding the next. A few threads apply the verdicts, each with its
own API client (a `requests.Session` is not meant to be shared between threads). The driver
counts a Ready as promised from the moment it decides it, and takes the promise back if the write
fails: meanwhile later verdicts counted those cards as taken, which can only overstate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass

from chain.verdicts import Verdict
from kubeapi import Kube, Obj


@dataclass(frozen=True)
class Write:
    """One verdict on its way: the Workload as judged, the verdict, the pending reply."""

    workload: Obj
    verdict: Verdict
    reply: Future[Obj]


class Writers:
    """Runs writes on an executor's threads, giving each thread its own client."""

    def __init__(self, connect: Callable[[], Kube], executor: Executor) -> None:
        self.connect = connect
        self.executor = executor
        self._local = threading.local()

    @classmethod
    def threads(cls, connect: Callable[[], Kube], count: int) -> Writers:
        return cls(connect, ThreadPoolExecutor(count, thread_name_prefix="verdict-writer"))

    def submit(self, write: Callable[[Kube], Obj]) -> Future[Obj]:
        return self.executor.submit(self._run, write)

    def _run(self, write: Callable[[Kube], Obj]) -> Obj:
        kube: Kube | None = getattr(self._local, "kube", None)
        if kube is None:
            kube = self._local.kube = self.connect()
        return write(kube)
