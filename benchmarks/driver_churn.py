"""The verdict driver's memory under churn (issue #35, item 3): a long stream of Workloads judged,
admitted and finished, and the driver's resident memory along it.

    flock /tmp/gpustack-testbed.lock python -m benchmarks.driver_churn   # 5,000 Workloads
    flock /tmp/gpustack-testbed.lock python -m benchmarks.driver_churn --quick

The testbed and pool of `benchmarks.admission` (the shipped manifests; Node objects with the
NodeFeatures nfd-worker and the agent would publish, each node's `Devices` spec and free ledger
written directly), and the driver by its command line as the shipped ServiceAccount. Then
`--rounds` bursts of Workloads of one whole card each: created at once, judged by the driver,
admitted by Kueue, and deleted as soon as admitted (the owner's job is done), until the namespace
holds none; so every Workload passes through the driver's watch cache, its holdings, its promises
and its judged map, and must leave them all.

Printed: the driver's RSS (with its threads and open files, from /proc) once its caches are
listed, and after every round once the namespace is empty again; end / warm-up, where warm-up is
the sample after `--warmup` rounds (imports, the first verdicts' code paths and the caches' first
growth settle), and the goal: at most 1.10.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from benchmarks.admission import (
    DRIVER,
    NAMESPACE,
    Clients,
    first_pool,
    start_driver,
    submit,
    testbed,
)
from benchmarks.churn import GOAL_RSS_RATIO, proc_status
from benchmarks.timing import percentile
from chain.apis import KUEUE_API as KUEUE
from kubeapi import Kube, wait_for
from testbed.workloads import now


@dataclass(frozen=True)
class Sample:
    """The driver's process after `workloads` Workloads went through it."""

    workloads: int
    rss_kib: int
    threads: int
    fds: int


def sample(pid: int, workloads: int) -> Sample:
    status = proc_status(pid)
    return Sample(workloads, status["VmRSS"], status["Threads"], status["fds"])


def emptied(kube: Kube, timeout: float) -> None:
    """Wait until the namespace holds no Workload: each one finished has left the cluster."""
    wait_for(
        lambda: not kube.list(KUEUE, "Workload", NAMESPACE),
        timeout,
        "the finished Workloads to be gone",
        interval=0.5,
    )


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def report(samples: list[Sample], warmup: int, rounds: int) -> list[str]:
    """The table of samples and the ratio: the first sample is the driver at start, the one at
    index `warmup` the warm-up, the middle one after half the rounds, the last the end."""
    lines = [f"{'Workloads':>9}  {'RSS':>10}  {'threads':>7}  {'fds':>4}"]
    for s in samples:
        lines.append(f"{s.workloads:>9}  {_mib(s.rss_kib):>10}  {s.threads:>7}  {s.fds:>4}")
    start, warm, middle, end = samples[0], samples[warmup], samples[rounds // 2], samples[-1]
    ratio = end.rss_kib / warm.rss_kib
    verdict = "met" if ratio <= GOAL_RSS_RATIO else "MISSED"
    after = [s.rss_kib for s in samples[warmup:]]
    lines.append(
        f"RSS: start {_mib(start.rss_kib)}, warm-up ({warm.workloads} Workloads)"
        f" {_mib(warm.rss_kib)}, middle ({middle.workloads}) {_mib(middle.rss_kib)}, end"
        f" ({end.workloads}) {_mib(end.rss_kib)}; after the warm-up lowest {_mib(min(after))},"
        f" highest {_mib(max(after))}; end / warm-up {ratio:.3f}"
        f" (goal <= {GOAL_RSS_RATIO:.2f}: {verdict})"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, help="in all (default 5000; --quick 600)")
    parser.add_argument("--rounds", type=int, help="bursts they come in (default 20; --quick 6)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds before the warm-up sample")
    parser.add_argument("--nodes", type=int, default=20, help="T4 nodes in the pool")
    parser.add_argument("--cards", type=int, default=8, help="T4 cards per node")
    parser.add_argument("--period", type=float, default=0.5, help="the driver's --period")
    parser.add_argument("--quick", action="store_true", help="600 Workloads in 6 rounds")
    args = parser.parse_args()
    total = args.workloads or (600 if args.quick else 5000)
    rounds = args.rounds or (6 if args.quick else 20)
    if not 0 < args.warmup < rounds:
        parser.error("--warmup must be at least 1 and less than --rounds")
    per_round = max(1, total // rounds)
    timeout = max(300.0, float(per_round))

    began = time.monotonic()
    with testbed() as bed:
        kube = bed.kube
        clients = Clients(bed.kubeconfig)
        first_pool(bed, clients, args.nodes, args.cards)
        start_driver(bed, args.period, None)
        pid = bed.state.processes[DRIVER].pid
        print(
            f"testbed ready in {time.monotonic() - began:.0f}s: {args.nodes} nodes x {args.cards}"
            f" T4, the driver (pid {pid}) listed; {rounds} rounds of {per_round} Workloads",
            flush=True,
        )
        samples = [sample(pid, 0)]
        rates = []
        waits: list[float] = []
        retried = 0
        for turn in range(rounds):
            started = time.monotonic()
            stages = submit(clients, f"churn-{turn:03d}", per_round, None, timeout)
            emptied(kube, timeout)
            seconds = time.monotonic() - started
            rates.append(per_round / seconds)
            waits += [s.admitted - s.created for s in stages.values() if s.admitted and s.created]
            retried += sum(s.retried for s in stages.values())
            samples.append(sample(pid, (turn + 1) * per_round))
            print(
                f"round {turn + 1}/{rounds}: {per_round} Workloads judged, admitted and gone in"
                f" {seconds:.0f}s; driver RSS {_mib(samples[-1].rss_kib)}",
                flush=True,
            )
        bed.check_alive()
        print(
            f"{rounds * per_round} Workloads at {statistics.median(rates):.1f} /s (median round);"
            f" create -> Admitted p50 {percentile(waits, 0.5):.2f} s,"
            f" p99 {percentile(waits, 0.99):.2f} s; {retried} given a Retry on the way",
            flush=True,
        )
        for line in report(samples, args.warmup, rounds):
            print(line, flush=True)
        print(f"done in {time.monotonic() - began:.0f}s ({now()})", flush=True)


if __name__ == "__main__":
    main()
