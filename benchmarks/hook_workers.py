"""How many gunicorn workers, of which kind, a hook replica should run: measured under load.

    python -m benchmarks.hook_workers [--seconds 4] [--rounds 3] [--clients 1 8]

Serves two routes the way the Deployments do (`gunicorn ... <app>`), once per worker setting,
all at the same time on loopback: the Node decorator's `/node/sync` of the flavor hook (one
call per Node change, from Metacontroller's sync workers) and the Pod webhook's `/mutate-pods`
(one call per Pod created in a queue, from the API server). Then, round after round with the
settings' order alternated (the machine is noisy: only ratios measured together mean
something), `--clients` concurrent clients post the same request for `--seconds` to each
setting. Prints per setting: requests per second, p50 and p99 latency, the workers' memory, and
the throughput relative to the shipped setting (2 sync workers).

`--peaks` measures memory instead: one sync worker per app serves the largest requests
Metacontroller sends it (the pools decorator's and the InstanceType status hook's, at the given
cluster sizes) and the worker's peak resident memory (VmHWM) is printed: two workers at that peak
must fit the Deployment's memory limit.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks.timing import percentile
from builders.cluster import node_request, random_cluster
from testbed.harness import free_port

GPU = "nvidia.com/gpu"
POOL = "gpustack--nvidia-t4-linux-amd64"


@dataclass(frozen=True)
class Setting:
    name: str
    args: tuple[str, ...]


SETTINGS = (
    Setting("sync x1", ("--workers=1",)),
    Setting("sync x2 (shipped)", ("--workers=2",)),
    Setting("sync x4", ("--workers=4",)),
    Setting("gthread x2 x4 threads", ("--workers=2", "--worker-class=gthread", "--threads=4")),
)
SHIPPED = SETTINGS[1].name


@dataclass
class Samples:
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def catalog_file(folder: Path) -> Path:
    """The pool catalog the Pod webhook reads: one T4 pool."""
    pool = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {
            "name": POOL,
            "labels": {"schedule.gpustack.ai/queue-entrance": f"{POOL}-entrance"},
        },
        "spec": {"acceleratable": True, "acceleratorGroup": "nvidia-t4"},
        "status": {"detail": {"manufacturer": "nvidia", "memory": "16Gi"}},
    }
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pool]}))
    return path


def pod_review() -> bytes:
    container = {
        "name": "main",
        "image": "vllm",
        "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "serve-0",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": f"{POOL}-entrance"},
        },
        "spec": {"containers": [container]},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "team-a",
            "operation": "CREATE",
            "object": pod,
        },
    }
    return json.dumps(review).encode()


ROUTES = {
    # route -> (app, body)
    "/node/sync": ("hooks.flavor.app:app", lambda: json.dumps(node_request(random_cluster(1)[0]))),
    "/mutate-pods": ("hooks.admission.app:app", lambda: pod_review().decode()),
}


@contextmanager
def servers(app: str, env: dict[str, str]) -> Iterator[dict[str, tuple[int, int]]]:
    """Every setting served at once: name -> (port, arbiter pid)."""
    procs: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    try:
        for setting in SETTINGS:
            port = free_port()
            argv = [sys.executable, "-m", "gunicorn", f"--bind=127.0.0.1:{port}", "--timeout=30"]
            procs[setting.name] = (
                port,
                subprocess.Popen(
                    [*argv, *setting.args, app],
                    env={**os.environ, **env},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        for port, _ in procs.values():
            _wait_listening(port)
        yield {name: (port, proc.pid) for name, (port, proc) in procs.items()}
    finally:
        for _, proc in procs.values():
            proc.terminate()
        for _, proc in procs.values():
            proc.wait(10)


def _wait_listening(port: int) -> None:
    for _ in range(300):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"gunicorn on port {port} did not come up")


def post(port: int, path: str, body: bytes) -> float:
    start = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    reply.read()
    if reply.status != 200:
        raise RuntimeError(f"{path} answered {reply.status}")
    connection.close()
    return time.perf_counter() - start


def load(port: int, path: str, body: bytes, clients: int, seconds: float, into: Samples) -> None:
    """`clients` threads posting back to back for `seconds`."""
    end = time.monotonic() + seconds
    lock = threading.Lock()

    def client() -> None:
        mine: list[float] = []
        while time.monotonic() < end:
            mine.append(post(port, path, body))
        with lock:
            into.latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    into.seconds += time.monotonic() - start


def _workers_status(arbiter: int) -> Iterator[dict[str, str]]:
    """`/proc/<pid>/status` fields of each worker process the gunicorn arbiter forked."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == arbiter:
            yield fields


def _mib(fields: dict[str, str], key: str) -> float:
    return int(fields.get(key, "0 kB").split()[0]) / 1024


def workers_rss_mib(arbiter: int) -> float:
    """Resident memory of the arbiter's worker processes, summed."""
    return sum(_mib(fields, "VmRSS") for fields in _workers_status(arbiter))


def run(path: str, clients: list[int], seconds: float, rounds: int) -> None:
    app, make_body = ROUTES[path]
    body = make_body().encode()
    with tempfile.TemporaryDirectory() as folder:
        env = {"GPUSTACK_ADMISSION_CATALOG": str(catalog_file(Path(folder)))}
        with servers(app, env) as served:
            for port, _ in served.values():
                post(port, path, body)  # warm every worker's imports
            for count in clients:
                samples = {name: Samples() for name in served}
                for index in range(rounds):
                    order = list(served) if index % 2 == 0 else list(reversed(served))
                    for name in order:
                        load(served[name][0], path, body, count, seconds, samples[name])
                report(
                    path, count, samples, {n: workers_rss_mib(p) for n, (_, p) in served.items()}
                )


def report(path: str, clients: int, samples: dict[str, Samples], rss: dict[str, float]) -> None:
    shipped = samples[SHIPPED].rate
    print(f"\n{path}, {clients} concurrent client(s), {os.cpu_count()} cores")
    print("| setting | req/s | p50 ms | p99 ms | workers' RSS MiB | req/s vs shipped |")
    print("|---|---|---|---|---|---|")
    for name, got in samples.items():
        p50 = percentile(got.latencies, 0.5) * 1000
        p99 = percentile(got.latencies, 0.99) * 1000
        ratio = got.rate / shipped if shipped else 0.0
        print(
            f"| {name} | {got.rate:.0f} | {p50:.1f} | {p99:.1f} | {rss[name]:.0f} | {ratio:.2f} |"
        )


def peak_rss_mib(arbiter: int) -> float:
    """The highest peak resident memory among the arbiter's workers."""
    return max((_mib(fields, "VmHWM") for fields in _workers_status(arbiter)), default=0.0)


def peaks(sizes: list[int]) -> None:
    from benchmarks import instancetype_hook, pools_hook

    big = {
        "/flavors/sync": ("hooks.flavor.app:app", lambda n: pools_hook.build(n)[0]),
        "/sync": (
            "hooks.instancetype.app:app",
            lambda n: json.dumps(instancetype_hook.build(n)[1]).encode(),
        ),
    }
    print("| route | nodes | request MiB | worker idle MiB | worker peak MiB |")
    print("|---|---|---|---|---|")
    for path, (app, build) in big.items():
        for size in sizes:
            body = build(size)
            port = free_port()
            argv = [sys.executable, "-m", "gunicorn", f"--bind=127.0.0.1:{port}", "--workers=1"]
            server = subprocess.Popen(
                [*argv, "--timeout=120", app], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                _wait_listening(port)
                idle = peak_rss_mib(server.pid)
                post(port, path, body)
                peak = peak_rss_mib(server.pid)
            finally:
                server.terminate()
                server.wait(10)
            mib = len(body) / 2**20
            print(f"| {path} | {size:,} | {mib:.1f} | {idle:.0f} | {peak:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peaks", type=int, nargs="*", help="cluster sizes for the memory run")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--routes", nargs="+", default=list(ROUTES), choices=list(ROUTES))
    args = parser.parse_args()
    if args.peaks is not None:
        peaks(args.peaks or [1000, 5000])
        return
    for path in args.routes:
        run(path, args.clients, args.seconds, args.rounds)


if __name__ == "__main__":
    main()
