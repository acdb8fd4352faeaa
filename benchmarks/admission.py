"""How much the chain's AdmissionCheck slows Kueue's admissions, and how fast its verdicts come.

    python -m benchmarks.admission [--workloads 2000] [--nodes 100 1000] [--latency 200] [--quick]

One testbed run with the shipped manifests installed (as the e2e tests install them). The pool is
built the way the chain builds it: Node objects (no kubelets) with the NodeFeatures nfd-worker and
the node agent would publish, so the shipped hooks make the T4 pool's ResourceFlavor, Topology,
ClusterQueue and LocalQueue; each node's `Devices` spec and ledger are then written directly (no
node agents), every card free.

1. Without the check: no verdict driver runs, so the AdmissionCheck is not Active and the queue
   hook leaves it off the pool's ClusterQueue. Submit `--workloads` Workloads of one whole card
   each; time from the first create to the last `Admitted`.
2. With the check, `--rounds` times each, in alternating order: answered by
   `python -m verdictdriver` as the shipped ServiceAccount (the queue hook names the
   check once it is Active), and by `benchmarks.trivial_check`, which says Ready at once without
   judging (the limit any AdmissionCheck controller meets: Kueue's own writes per checked
   Workload). The same Workloads each time. The headline is driver / trivial.
3. Verdict latency: `--latency` Workloads at `--rate` per second for each of the driver and the
   trivial check, split over `--rounds` runs each in alternating order, on the first pool size
   and again after the pool grew to the second; QuotaReserved -> the check's entry Ready, as seen
   by a watch, and driver / trivial of its p50 and p99 (goal: p99 <= 1.2 at 1,000 nodes); and,
   from the driver's `gpustack_verdict_write_seconds`, how long its writes alone took (the API
   server's round trip, Kueue's validating webhook on `workloads/status` included), which any
   check pays.

Every Workload is deleted as soon as it is admitted (there is no job to run it), so cards never
run out. The API server's request counters around both runs show what the check costs per
Workload in requests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pstats
import queue
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import requests

from benchmarks.admission_events import (
    Buckets,
    RequestKey,
    Stages,
    admission_latencies,
    bucket_quantile,
    buckets_between,
    observed,
    per_workload,
    request_counts,
    served_between,
    throughput,
    verdict_latencies,
    verdict_pace,
    write_buckets,
)
from benchmarks.timing import percentile
from chain.labels import capacity_key, count_key
from chain.names import local_queue_name
from chain.quantity import parse_quantity
from chain.queues import NODE_DEVICES_CHECK
from chain.units import RESOURCE_MAX_UNITS, credits_to_accelerators
from kubeapi import Kube, Obj, wait_for
from kubeapi.watch import Cache, Event, Watcher, key_of
from testbed import build
from testbed.components import http_ok
from testbed.harness import Testbed, free_port
from testbed.install import install
from testbed.nodes import (
    T4_POOL,
    device_manager_feature,
    nfd_worker_feature,
    node_object,
    register_node,
)
from testbed.workloads import KUEUE, condition, gpu_workload, now

WORKER = "worker.gpustack.ai/v1alpha1"
T4_KEY = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
NAMESPACE = "bench"
DRIVER = "admission-driver"
TRIVIAL = "trivial-check"
SETTLE_S = 3.0
"""After a check's controller is up, before a run: what it does once on start (the driver's
first pool tally, its garbage-collector freeze) is not part of any verdict."""
DRIVER_ACCOUNT = ("gpustack-system", "gpustack-admission-driver")
THREADS = 8
LATENCY_RATIO_GOAL = 1.2
"""Verdict latency goal, driver / trivial check at p99 on 1,000 nodes: the absolute time of a
verdict is mostly the API server's write that any check pays, which a 2-core machine shared with
the control plane cannot bring under 50 ms; the ratio says what the driver's judging adds."""


# --- objects ----------------------------------------------------------------------------------


def workload(name: str, cards: int = 1) -> Obj:
    """A bare Workload of one Pod asking for `cards` whole T4 cards on the pool's queue."""
    return gpu_workload(name, NAMESPACE, local_queue_name(T4_POOL), cards)


def devices(node: str, labels: dict[str, str], cards: int) -> Obj:
    """The node agent's `Devices` spec for `cards` Tesla T4s, labelled as the flavor selects."""
    accelerators = [
        {
            "id": f"{node}-gpu-{i}",
            "index": i,
            "topology": {"pciBusId": f"0000:{i:02x}:00.0"},
            "status": {"unhealthy": False, "logicalSliced": {"count": 128}},
        }
        for i in range(cards)
    ]
    group = {
        "id": "tesla-t4",
        "manufacturer": "nvidia",
        "name": "Tesla T4",
        "memory": 15360,
        "accelerators": accelerators,
    }
    return {
        "apiVersion": WORKER,
        "kind": "Devices",
        "metadata": {"name": node, "labels": labels},
        "spec": {"groups": [group]},
    }


def free_ledger(node: str, cards: int) -> Obj:
    """The device plugin's ledger with every card free."""
    rows = [
        {"id": f"{node}-gpu-{i}", "index": i, "mode": 0, "remaining": RESOURCE_MAX_UNITS}
        for i in range(cards)
    ]
    return {
        "apiVersion": WORKER,
        "kind": "Devices",
        "metadata": {"name": node},
        "status": {"groups": [{"id": "tesla-t4", "manufacturer": "nvidia", "accelerators": rows}]},
    }


# --- the shell --------------------------------------------------------------------------------


class Clients:
    """One API client per thread: a `requests.Session` is not meant to be shared."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._local = threading.local()

    def get(self) -> Kube:
        kube: Kube | None = getattr(self._local, "kube", None)
        if kube is None:
            kube = Kube.from_kubeconfig(self.kubeconfig)
            self._local.kube = kube
        return kube


def in_parallel(action: Callable[[str], object], names: list[str]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(action, names):
            pass


def pool_flavor(kube: Kube, cards: int) -> Obj | None:
    """The T4 pool's ResourceFlavor for nodes of `cards` cards, once the pools hook made it."""
    for rf in kube.list(KUEUE, "ResourceFlavor"):
        if (rf["spec"].get("nodeLabels") or {}).get(count_key(T4_KEY)) == str(cards):
            return rf
    return None


def grow_pool(bed: Testbed, clients: Clients, names: list[str], cards: int, total: int) -> None:
    """Register `names` as T4 nodes, wait until the pool counts `total` nodes, write ledgers."""

    def add(name: str) -> None:
        kube = clients.get()
        register_node(kube, node_object(name, cpu="16", capacity={"nvidia.com/gpu": str(cards)}))
        kube.apply(nfd_worker_feature(name))
        kube.apply(device_manager_feature(name, cards))

    in_parallel(add, names)
    kube = bed.kube
    flavor = wait_for(lambda: pool_flavor(kube, cards), 300, "the T4 pool's ResourceFlavor")
    name = flavor["metadata"]["name"]

    def sized() -> bool:
        rf = kube.get(KUEUE, "ResourceFlavor", name) or {}
        labels = rf.get("metadata", {}).get("labels") or {}
        return labels.get(capacity_key(T4_KEY)) == str(total * cards)

    wait_for(sized, 600, f"the pool's flavor to count {total} nodes", interval=1)
    # The verdict finds a flavor's Devices by its node labels less the counts.
    selector = {k: v for k, v in flavor["spec"]["nodeLabels"].items() if not k.endswith(".count")}

    def ledger(node: str) -> None:
        kube = clients.get()
        kube.apply(devices(node, selector, cards))
        kube.apply(free_ledger(node, cards), subresource="status")

    in_parallel(ledger, names)
    wait_for(lambda: _quota_cards(kube) == total * cards, 300, "the queue's credits", interval=1)


def first_pool(bed: Testbed, clients: Clients, nodes: int, cards: int) -> None:
    """The benchmark's namespace and a T4 pool of `nodes` nodes, its LocalQueue there, and its
    ClusterQueue Active without the check (no controller answers it yet)."""
    kube = bed.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    grow_pool(bed, clients, [f"t4-{i:04d}" for i in range(nodes)], cards, nodes)
    wait_for(
        lambda: kube.get(KUEUE, "LocalQueue", local_queue_name(T4_POOL), NAMESPACE),
        120,
        "the pool's LocalQueue",
    )
    wait_for(lambda: queue_ready(kube, False), 120, "the queue without the check")


def _quota_cards(kube: Kube) -> int:
    """Whole cards the T4 ClusterQueue's nvidia credits stand for."""
    cq = kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res["name"] == "credits.gpustack.ai/nvidia":
                    return int(credits_to_accelerators(parse_quantity(str(res["nominalQuota"]))))
    return 0


def queue_checks(kube: Kube) -> list[str]:
    spec = (kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}).get("spec") or {}
    strategy = spec.get("admissionChecksStrategy") or {}
    return [str(c["name"]) for c in strategy.get("admissionChecks") or []]


def queue_ready(kube: Kube, with_check: bool) -> bool:
    cq = kube.get(KUEUE, "ClusterQueue", T4_POOL)
    named = NODE_DEVICES_CHECK in queue_checks(kube)
    return condition(cq, "Active") == "True" and named == with_check


@dataclass
class Run:
    """One batch of Workloads: what was seen of each, keyed by name."""

    stages: dict[str, Stages] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    admitted: queue.Queue[str] = field(default_factory=queue.Queue)

    def created(self, name: str, at: float) -> None:
        with self.lock:
            self.stages[name] = Stages(created=at)

    def event(self, obj: Obj) -> None:
        at = time.monotonic()
        name = obj["metadata"]["name"]
        with self.lock:
            before = self.stages.get(name, Stages())
            after = observed(before, obj, at)
            self.stages[name] = after
        if before.admitted is None and after.admitted is not None:
            self.admitted.put(name)


class Stamped(Cache):
    """A Workload cache that also hands each of the namespace's changes to `run` as it lands."""

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run

    def apply(self, event: Event) -> None:
        super().apply(event)
        if event.type in ("ADDED", "MODIFIED") and key_of(event.object)[0] == NAMESPACE:
            self.run.event(event.object)


def submit(
    clients: Clients, prefix: str, count: int, rate: float | None, timeout: float
) -> dict[str, Stages]:
    """Create `count` Workloads (all at once, or `rate` per second), delete each once admitted,
    and return what the watch saw of them."""
    run = Run()
    stop = threading.Event()
    names = [f"{prefix}-{i:05d}" for i in range(count)]
    kube = Kube.from_kubeconfig(clients.kubeconfig)
    watcher = Watcher(kube, KUEUE, "Workload", cache=Stamped(run)).start()
    wait_for(lambda: watcher.cache.synced, 30, "the Workload watch")
    time.sleep(0.5)  # the list is done; let the watch request go out before the first create
    deleter = threading.Thread(target=_release, args=(clients, run, stop), daemon=True)
    deleter.start()
    started = time.monotonic()

    def create(index_name: tuple[int, str]) -> None:
        index, name = index_name
        if rate:
            time.sleep(max(0.0, started + index / rate - time.monotonic()))
        run.created(name, time.monotonic())
        clients.get().create(workload(name))

    with ThreadPoolExecutor(THREADS) as pool:
        for _ in pool.map(create, enumerate(names)):
            pass
    try:
        wait_for(
            lambda: all(run.stages[n].admitted is not None for n in names),
            timeout,
            f"{count} Workloads admitted",
            interval=0.5,
        )
    finally:
        stop.set()
        watcher.stop()
        deleter.join(timeout=60)
    return {n: run.stages[n] for n in names}


def _release(clients: Clients, run: Run, stop: threading.Event) -> None:
    """Play the Workloads' owner: a job that is done with them (no job runs here)."""
    kube = clients.get()
    while not (stop.is_set() and run.admitted.empty()):
        try:
            name = run.admitted.get(timeout=0.2)
        except queue.Empty:
            continue
        kube.delete(KUEUE, "Workload", name, NAMESPACE)


def api_requests(kube: Kube) -> Counter[RequestKey]:
    reply = kube.session.get(kube.server + "/metrics", timeout=30)
    reply.raise_for_status()
    return request_counts(reply.text)


def start_driver(bed: Testbed, period: float, profile: Path | None) -> str:
    """The driver as the shipped ServiceAccount, by its command line (under cProfile when
    `profile` names where to write the profile); the URL of its `/metrics`."""
    kubeconfig = bed.service_account_kubeconfig(*DRIVER_ACCOUNT)
    wrap = [] if profile is None else ["benchmarks.profiled", str(profile)]
    argv = [sys.executable, "-m", *wrap, "verdictdriver", "--kubeconfig", str(kubeconfig)]
    port = free_port()
    bed.run(DRIVER, [*argv, "--period", str(period), "--health-port", str(port)])
    # Healthy once every cache is listed: a run measures verdicts, not the driver's start.
    url = f"http://127.0.0.1:{port}/healthz"
    wait_for(partial(http_ok, url), 120, "the driver's caches to be listed")
    _wait_check_named(bed, "the driver")
    return f"http://127.0.0.1:{port}/metrics"


def start_trivial(bed: Testbed, period: float) -> None:
    """`benchmarks.trivial_check` as the driver's ServiceAccount, with the driver's writers."""
    kubeconfig = bed.service_account_kubeconfig(*DRIVER_ACCOUNT)
    argv = [sys.executable, "-m", "benchmarks.trivial_check", "--kubeconfig", str(kubeconfig)]
    bed.run(TRIVIAL, [*argv, "--period", str(period)])
    _wait_check_named(bed, "the trivial check")


def _wait_check_named(bed: Testbed, who: str) -> None:
    kube = bed.kube
    wait_for(
        lambda: (
            condition(kube.get(KUEUE, "AdmissionCheck", NODE_DEVICES_CHECK), "Active") == "True"
        ),
        60,
        f"{who} to mark the AdmissionCheck Active",
    )
    wait_for(lambda: queue_ready(kube, True), 120, "the queue to name the check", interval=1)
    time.sleep(SETTLE_S)


@contextlib.contextmanager
def checking(bed: Testbed, who: str, period: float, profile: Path | None) -> Iterator[str | None]:
    """The check answered by `who` (DRIVER or TRIVIAL) for the block, stopped after it (the
    AdmissionCheck stays Active, so the queue keeps naming it); the driver's `/metrics` URL."""
    metrics = None
    if who == DRIVER:
        metrics = start_driver(bed, period, profile)
    else:
        start_trivial(bed, period)
    try:
        yield metrics
    finally:
        if who == DRIVER and profile is not None:
            print_profile(bed, profile)
        bed.stop(who)


def print_profile(bed: Testbed, profile: Path) -> None:
    """Ask the profiled driver for its profile so far; print where its wall time went."""
    os.kill(bed.state.processes[DRIVER].pid, signal.SIGUSR1)
    wait_for(lambda: profile.is_file() and profile.stat().st_size > 0, 30, "the driver's profile")
    time.sleep(1)  # written in one go, but let it finish
    print("the driver's wall time by function (cumulative, its own code and the API client):")
    stats = pstats.Stats(str(profile), stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(r"verdictdriver/driver\.py|kubeapi/client\.py", 14)


# --- report -----------------------------------------------------------------------------------


def _ms(samples: list[float], fraction: float) -> str:
    return f"{percentile(samples, fraction) * 1e3:.0f} ms" if samples else "-"


def report_run(label: str, stages: dict[str, Stages]) -> float:
    values = list(stages.values())
    rate = throughput(values)
    waits = admission_latencies(values)
    verdicts = verdict_latencies(values)
    retried = sum(s.retried for s in values)
    line = (
        f"{label}: {len(values)} Workloads, {rate:.1f}/s; create->Admitted p50 "
        f"{_ms(waits, 0.5)}, p99 {_ms(waits, 0.99)}"
    )
    if verdicts:
        line += (
            f"; QuotaReserved->verdict p50 {_ms(verdicts, 0.5)}, p99 {_ms(verdicts, 0.99)}"
            f" ({len(verdicts)} judged, {retried} with a Retry)"
        )
    print(line, flush=True)
    return rate


def alternated(rounds: int) -> list[tuple[int, str]]:
    """(round, who answers) for `rounds` runs each of the driver and the trivial check, the order
    swapped every round, so neither always runs first (on a cooler or a warmer testbed)."""
    return [
        (turn, who)
        for turn in range(rounds)
        for who in ((DRIVER, TRIVIAL) if turn % 2 == 0 else (TRIVIAL, DRIVER))
    ]


def compare(
    bed: Testbed,
    clients: Clients,
    count: int,
    pool: str,
    period: float,
    profile: Path | None,
    timeout: float,
    rounds: int,
) -> None:
    """The same burst of Workloads without the check, then with it: answered by the driver and
    by the trivial check in turn (`rounds` of each, the order alternated).

    Prints every throughput, the headline driver / trivial, with/without, and what the check
    adds in API requests (driver runs)."""
    kube = bed.kube
    before = api_requests(kube)
    without = submit(clients, "plain", count, None, timeout)
    plain_requests = served_between(before, api_requests(kube))
    plain = report_run(f"without the check ({pool})", without)

    rates: dict[str, list[float]] = {DRIVER: [], TRIVIAL: []}
    checked_requests: Counter[RequestKey] = Counter()
    paces = []
    for turn, who in alternated(rounds):
        with checking(bed, who, period, profile if who == DRIVER else None):
            before = api_requests(kube)
            run = submit(clients, f"{who}-{turn}", count, None, timeout)
            if who == DRIVER:
                checked_requests += served_between(before, api_requests(kube))
                paces.append(verdict_pace(run.values()))
            rates[who].append(report_run(f"with the check, {who} ({pool})", run))
    driver = statistics.mean(rates[DRIVER])
    trivial = statistics.mean(rates[TRIVIAL])
    print(
        f"throughput driver / trivial check: {driver / trivial:.2f} (goal >= 0.95);"
        f" with the check (driver) / without: {driver / plain:.2f}; the driver wrote a verdict"
        f" every {statistics.median(paces) * 1e3:.0f} ms (median) while busy",
        flush=True,
    )
    print("extra API requests per Workload with the check (verb resource/subresource):")
    for (verb, resource, sub), n in per_workload(
        checked_requests - _times(plain_requests, rounds), count * rounds
    ):
        print(f"  {n:6.2f}  {verb} {resource}{'/' + sub if sub else ''}")


def _times(counts: Counter[RequestKey], n: int) -> Counter[RequestKey]:
    return Counter({key: value * n for key, value in counts.items()})


def latency(
    bed: Testbed, clients: Clients, pool: str, args: argparse.Namespace, timeout: float
) -> None:
    """Paced Workloads answered by the driver and by the trivial check (the floor) in turn:
    `args.rounds` runs of each, the order alternated, each of `args.latency / rounds` Workloads;
    then each one's verdict latency over all its runs, and driver / trivial of the p50 and p99
    (the machine's quiet and busy spells fall on both alike)."""
    rounds = max(1, args.rounds)
    per_run = max(1, args.latency // rounds)
    pooled: dict[str, list[float]] = {DRIVER: [], TRIVIAL: []}
    writes: Counter[float] = Counter()
    for turn, who in alternated(rounds):
        with checking(bed, who, args.period, None) as metrics:
            before = _write_times(metrics)
            paced = submit(clients, f"paced-{pool}-{who}-{turn}", per_run, args.rate, timeout)
            writes.update(buckets_between(before, _write_times(metrics)))
            label = f"verdict latency, {pool} nodes, {args.rate:g}/s, {who}, round {turn + 1}"
            report_run(label, paced)
            pooled[who] += verdict_latencies(paced.values())
    for who, samples in pooled.items():
        print(
            f"verdict latency, {pool} nodes, {who}, all {len(samples)}: p50 {_ms(samples, 0.5)},"
            f" p99 {_ms(samples, 0.99)}",
            flush=True,
        )
    bounds = [bucket_quantile(writes, q) for q in (0.5, 0.99)]
    if None not in bounds:
        print(
            f"verdict latency, {pool} nodes: the driver's writes alone (its round trip to the API"
            f" server, Kueue's validating webhook on workloads/status included), p50 <="
            f" {_bound(bounds[0])}, p99 <= {_bound(bounds[1])}",
            flush=True,
        )
    driver, trivial = pooled[DRIVER], pooled[TRIVIAL]
    if driver and trivial:
        ratios = [percentile(driver, q) / percentile(trivial, q) for q in (0.5, 0.99)]
        print(
            f"verdict latency, {pool} nodes, driver / trivial check: p50 {ratios[0]:.2f},"
            f" p99 {ratios[1]:.2f} (goal: p99 <= {LATENCY_RATIO_GOAL:.2f} at 1,000 nodes)",
            flush=True,
        )


def _write_times(metrics: str | None) -> Buckets:
    """The driver's write-time histogram (`gpustack_verdict_write_seconds`); none for the
    trivial check."""
    if metrics is None:
        return {}
    reply = requests.get(metrics, timeout=30)
    reply.raise_for_status()
    return write_buckets(reply.text)


def _bound(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.0f} ms"


@contextlib.contextmanager
def testbed() -> Iterator[Testbed]:
    build.ensure()
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-bench-admission-")))
    bed.up()
    try:
        install(bed)
        yield bed
    finally:
        bed.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads", type=int, help="per throughput run (default 2000; 0: latency runs only)"
    )
    parser.add_argument("--nodes", type=int, nargs=2, help="the two pool sizes (100 1000)")
    parser.add_argument(
        "--latency", type=int, help="Workloads per latency run (default 200; 0: none)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs each of driver and trivial check, alternated (throughput and latency)",
    )
    parser.add_argument("--rate", type=float, default=2.0, help="latency runs: creates per s")
    parser.add_argument("--cards", type=int, default=8, help="T4 cards per node")
    parser.add_argument("--period", type=float, default=0.5, help="the driver's --period")
    parser.add_argument("--quick", action="store_true", help="200 Workloads, 20/100 nodes, 50")
    parser.add_argument(
        "--profile", action="store_true", help="run the driver under cProfile (slower)"
    )
    args = parser.parse_args()
    count = args.workloads if args.workloads is not None else (200 if args.quick else 2000)
    small, large = args.nodes or ((20, 100) if args.quick else (100, 1000))
    if args.latency is None:
        args.latency = 50 if args.quick else 200
    timeout = max(300.0, float(count))

    began = time.monotonic()
    with testbed() as bed:
        clients = Clients(bed.kubeconfig)
        first_pool(bed, clients, small, args.cards)
        print(
            f"testbed ready in {time.monotonic() - began:.0f}s: {small} nodes x {args.cards} T4,"
            f" queue {T4_POOL}",
            flush=True,
        )

        profile = bed.root / "driver.prof" if args.profile else None
        if count:
            pool = f"{small} nodes"
            compare(bed, clients, count, pool, args.period, profile, timeout, args.rounds)

        if args.latency:
            latency(bed, clients, str(small), args, timeout)
        grown = [f"t4-{i:04d}" for i in range(small, large)]
        growing = time.monotonic()
        grow_pool(bed, clients, grown, args.cards, large)
        print(f"pool grown to {large} nodes in {time.monotonic() - growing:.0f}s", flush=True)
        if args.latency:
            latency(bed, clients, str(large), args, timeout)
        print(f"done in {time.monotonic() - began:.0f}s ({now()})", flush=True)


if __name__ == "__main__":
    main()
