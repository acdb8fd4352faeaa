"""The physical limit of any AdmissionCheck controller: one that says Ready at once, unjudged.

    python -m benchmarks.trivial_check --kubeconfig KUBECONFIG [--writers 4]

What `benchmarks.admission` measures the verdict driver against, in the same testbed: the same
watch-fed Workload cache, the same apply of only its own `admissionChecks` entries (the driver's
field manager, `force`, the resourceVersion read), the same writer threads, the same
ServiceAccount; it keeps the same AdmissionCheck Active. It judges nothing, holds no Lease,
reads no Devices, Nodes or Pods: whatever the driver costs beyond it is the price of judging.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial

import logline as logs
from chain.apis import ADMISSION_CHECK, KUEUE_API
from chain.apis import WORKLOAD as WORKLOAD_KIND
from chain.queues import NODE_DEVICES_CONTROLLER
from chain.verdicts import Verdict
from chain.workload_state import State
from kubeapi import Kube, KubeError, Obj
from kubeapi.watch import Cache, Watcher, all_synced, key_of, start_all
from verdictdriver.driver import FIELD_MANAGER, write_verdict
from verdictdriver.entries import active_patch, now_text, verdict_patch
from verdictdriver.workloads import controllers, owned_checks, to_judge
from verdictdriver.writes import Writers

READY = Verdict(State.READY, "ready without a look (benchmarks.trivial_check)")


class TrivialCheck:
    """Every pending entry of the check made Ready, once per Workload version."""

    def __init__(self, kube: Kube, writers: Writers | None) -> None:
        self.kube = kube
        self.writers = writers
        self.workloads = Cache()
        self.checks = Cache()
        self.answered: dict[tuple[str, str], str] = {}
        self.seen: int | None = None

    def start(self) -> TrivialCheck:
        start_all(
            [
                Watcher(self.kube, KUEUE_API, WORKLOAD_KIND, cache=self.workloads),
                Watcher(self.kube, KUEUE_API, ADMISSION_CHECK, cache=self.checks),
            ]
        )
        return self

    def keep_active(self) -> None:
        for check in self.checks.items():
            if (check.get("spec") or {}).get("controllerName") == NODE_DEVICES_CONTROLLER:
                body = active_patch(check, now_text())
                if body is not None:
                    self.kube.apply(body, FIELD_MANAGER, subresource="status")

    def _write(self, body: Obj) -> Callable[[Kube], Obj]:
        return partial(write_verdict, body=body)  # the driver's very write

    def answer_once(self, everyone: bool = True) -> int:
        """Ready for every Workload waiting on the check (only those that changed since the
        last pass, unless `everyone`: as cheap per event as the driver's event passes); the
        count sent."""
        if not all_synced((self.workloads, self.checks)):
            return 0
        checks = controllers(self.checks.items())
        mark = self.workloads.changes
        changed = None if everyone or self.seen is None else self.workloads.changed_since(self.seen)
        if changed is None:
            workloads = self.workloads.items()
            present = {key_of(w) for w in workloads}
            self.answered = {k: v for k, v in self.answered.items() if k in present}
        else:
            found = [self.workloads.get(key) for key in changed]
            workloads = [w for w in found if w is not None]
        self.seen = mark
        sent = 0
        for wl in to_judge(workloads, checks):
            version = str(wl["metadata"].get("resourceVersion", ""))
            if self.answered.get(key_of(wl)) == version:
                continue
            body = verdict_patch(wl, owned_checks(wl, checks), READY, now_text())
            if body is None:
                continue
            self.answered[key_of(wl)] = version
            if self.writers is not None:
                self.writers.submit(self._write(body))
            else:
                try:
                    self._write(body)(self.kube)
                except KubeError:
                    self.answered.pop(key_of(wl), None)
            sent += 1
        return sent

    def run(self, period: float) -> None:
        next_tick = time.monotonic()
        while True:
            seen = self.workloads.changes
            tick = time.monotonic() >= next_tick
            if tick:
                next_tick = time.monotonic() + period
                self.keep_active()
                self.answered.clear()  # a lost write is answered again on the tick
            self.answer_once(everyone=tick)
            self.workloads.wait(seen, max(0.0, next_tick - time.monotonic()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trivial_check")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args(argv)
    logs.setup()
    kube = Kube.from_environment(args.kubeconfig)
    writers = (
        Writers.threads(lambda: Kube.from_environment(args.kubeconfig), args.writers)
        if args.writers > 0
        else None
    )
    TrivialCheck(kube, writers).start().run(args.period)


if __name__ == "__main__":
    main()
