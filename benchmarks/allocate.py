"""Allocate latency of the sliced device plugin, with and without the API server behind it.

    flock /tmp/gpustack-testbed.lock python -m benchmarks.allocate [--pods 200]

It starts a testbed (hence the lock) with the shipped manifests. Three nodes of the same simulated
hardware (`nodeagent detect --simulate l4x2`), each with its own kubelet emulator
(`testbed/kubelet.py`) in this process and the node agent's real gRPC plugin servers in a child
process (as on a node, where kubelet and the agent are two processes):

- api: the agent's own wiring (`DevicePlugins`, so `KubeNode`, as `nodeagent serve` runs it with
  `--allocation-journal off`): the node's Pods come from a watch on the testbed's kube-apiserver,
  the `Devices` spec is read there once, and Allocate patches the Pod's allocation annotation
  there before it answers; the Pods are created in the API.
- journal: the same, as `nodeagent serve` runs by default: Allocate appends the grant to the
  node's allocation journal and answers, and the annotation is patched right after, from a thread.
- memory: the same servers over Pods, spec and annotation writer held in memory.

Each node's Pod work dirs and journal are under /var/lib, as on a node (/var/lib/gpustack/operator),
when this user may write there; its sockets under /tmp (a socket path is limited to 107 bytes).

`--pods` sliced Pods (one container asking one slice, a tenth of a card) go to each node, one at
a time as kubelet admits them (GetPreferredAllocation, then Allocate), the nodes taking turns
Pod by Pod and which one goes first, so all see the same noise. Each Pod is removed once
admitted (it ended), so the cards never fill up. Printed per variant: p50 and p99 of the Allocate
call (the span kubelet's `kubelet_device_plugin_alloc_duration_seconds` observes) and of the
whole admission, their ratios, and HAMi's published figure beside them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from benchmarks.timing import percentile, timed
from chain.allocation import plugin_resource
from chain.devices import DEVICES_API, DEVICES_KIND, Devices
from chain.families import SLICED_MEMORY_PERCENTAGE, SLICED_UNITS
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.manufacturers import manufacturers
from chain.release import AGENT_NAMESPACE
from chain.units import RESOURCE_MAX_UNITS
from kubeapi import Kube, Obj
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.running import DevicePlugins, NodeRecords
from nodeagent.plugin.server import plugin_servers
from testbed import build
from testbed.harness import Testbed
from testbed.install import install
from testbed.kubelet import AdmissionError, KubeletEmulator, delete_ended
from testbed.nodes import node_object, register_node

PROFILE = "l4x2"
NAMESPACE = "bench-allocate"
AGENT_ACCOUNT = "gpustack-device-manager"
NVIDIA = manufacturers({})["nvidia"]
SLICE = plugin_resource(NVIDIA, Mode.SLICED)
WARMUP = 5
WORK_ROOT = "/var/lib"
VARIANTS = ("api", "journal", "memory")
API_VARIANTS = frozenset({"api", "journal"})
"""The variants whose Pods live on the testbed's API server, wired as `nodeagent serve` is."""
HAMI = (
    "HAMi, Allocate + annotation update (node lock held): ~20 ms on a real GPU "
    "(Project-HAMi/website PR #734)"
)


# --- the figures (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    p50: float
    p99: float


def spread(samples: Sequence[float]) -> Spread:
    return Spread(statistics.median(samples), percentile(list(samples), 0.99))


@dataclass(frozen=True)
class Row:
    variant: str
    allocate: Spread
    admission: Spread
    refused: int


def _ms(value: Spread) -> str:
    return f"{value.p50 * 1000:.1f} / {value.p99 * 1000:.1f} ms"


def _ratio(top: Spread, bottom: Spread) -> str:
    return f"{top.p50 / bottom.p50:.2f} / {top.p99 / bottom.p99:.2f}"


def report(rows: Sequence[Row], ratios: Sequence[tuple[str, str]]) -> list[str]:
    """The table: one line per variant, then each `a` / `b` ratio of `ratios`, and HAMi's
    figure."""
    labels = [f"ratio {a} / {b}" for a, b in ratios]
    width = max(len(label) for label in ["variant", *labels, *(row.variant for row in rows)])
    lines = [
        f"{'variant':<{width}}  {'Allocate p50 / p99':>20}  {'admission p50 / p99':>20}  refused"
    ]
    for row in rows:
        lines.append(
            f"{row.variant:<{width}}  {_ms(row.allocate):>20}  {_ms(row.admission):>20}"
            f"  {row.refused:>7}"
        )
    by_name = {row.variant: row for row in rows}
    for label, (a, b) in zip(labels, ratios, strict=True):
        top, bottom = by_name[a], by_name[b]
        lines.append(
            f"{label:<{width}}  {_ratio(top.allocate, bottom.allocate):>20}"
            f"  {_ratio(top.admission, bottom.admission):>20}"
        )
    lines.append(HAMI)
    return lines


def sliced_pod(name: str, node: str) -> Obj:
    """One container asking one slice of a tenth of a card, bound to `node`."""
    limits = {
        SLICE: "1",
        NVIDIA.resource_name + SLICED_UNITS: str(RESOURCE_MAX_UNITS // 10),
        NVIDIA.resource_name + SLICED_MEMORY_PERCENTAGE: "10",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "bench",
                    "resources": {"requests": limits, "limits": limits},
                }
            ],
        },
    }


# --- the nodes ---------------------------------------------------------------------------------


def stored_pod(manifest: Obj) -> Obj:
    """The Pod as the API server would return it once created."""
    meta = manifest["metadata"]
    created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        **manifest,
        "metadata": {**meta, "uid": str(uuid.uuid4()), "creationTimestamp": created},
        "status": {"phase": "Pending"},
    }


class MemoryNode:
    """The `PodSource` and `AnnotationWriter` of a node whose Pods live in memory."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_key: dict[tuple[str, str], Obj] = {}

    def add(self, pod: Obj) -> None:
        with self.lock:
            self.by_key[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

    def remove(self, pod: Obj) -> None:
        with self.lock:
            self.by_key.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]), None)

    def pods(self) -> list[Mapping[str, object]]:
        with self.lock:
            return list(self.by_key.values())

    def write(self, namespace: str, name: str, value: str) -> None:
        with self.lock:
            pod = self.by_key[(namespace, name)]
            meta = pod["metadata"]
            annotations = {**(meta.get("annotations") or {}), ALLOCATED_ANNOTATION: value}
            self.by_key[(namespace, name)] = {
                **pod,
                "metadata": {**meta, "annotations": annotations},
            }


@dataclass(frozen=True)
class Plugin:
    """Where one node's plugin servers run and what they read."""

    variant: str
    node: str
    groups: list[Obj]
    plugin_dir: str
    pod_resources_socket: str
    pods_dir: str
    kubeconfig: str = ""
    """The api variant's: the agent's ServiceAccount."""


def serve_plugins(plugin: Plugin, control: Connection) -> None:
    """The node's plugin servers, in a process of their own as on a node (kubelet is another
    process: in one process the emulator would compete with the servers for the GIL). The
    parent says when a Pod arrives (`add`, memory only) or is gone (`remove`); `stop` ends it."""
    with ExitStack() as stack:
        memory: MemoryNode | None = None
        if plugin.variant in API_VARIANTS:
            kube = Kube.from_environment(plugin.kubeconfig)
            journal = Path(plugin.pods_dir).parent / "allocations.journal"
            records = NodeRecords.connect(
                kube,
                plugin.node,
                watch_pods=kube,
                journal=journal if plugin.variant == "journal" else None,
            )
            plugins = DevicePlugins(
                records,
                manufacturers(os.environ),
                plugin.plugin_dir,
                plugin.pod_resources_socket,
                plugin.pods_dir,
            )
            stack.callback(plugins.stop)
            plugins.publish(frozenset({NVIDIA.name}))
            notify = plugins.node.notify  # the Pod watch brings the Pods; the spec stays
        else:
            found = {"metadata": {"name": plugin.node}, "spec": {"groups": plugin.groups}}
            spec = Devices.parse(found).spec
            memory = MemoryNode()
            state = NodeState(lambda: spec, memory, memory)
            notify = state.notify
            kubelet = PodResourcesClient(plugin.pod_resources_socket)
            for server in plugin_servers(
                state, NVIDIA, plugin.plugin_dir, kubelet, pods_dir=plugin.pods_dir
            ):
                server.start()
                stack.callback(server.stop)
        while True:
            command, pod = control.recv()
            if command == "stop":
                break
            if memory is not None:
                (memory.add if command == "add" else memory.remove)(pod)
            if command == "remove":
                notify()  # what the agent's report round does once a Pod is gone
            control.send("ok")


@dataclass
class Node:
    """One variant: a kubelet emulator admitting Pods through one node's plugin process."""

    variant: str
    name: str
    kubelet: KubeletEmulator
    control: Connection
    kube: Kube | None
    """The testbed's API server, where the api variant's Pods live."""
    allocate: list[float] = field(default_factory=list)
    admission: list[float] = field(default_factory=list)
    refused: int = 0

    def _say(self, command: str, pod: Obj) -> None:
        self.control.send((command, pod))
        if self.control.recv() != "ok":
            raise RuntimeError(f"the {self.variant} plugin process did not {command} the Pod")

    def admit_one(self, index: int, keep: bool) -> None:
        """Create, admit and remove one Pod; keep its timings when `keep`."""
        manifest = sliced_pod(f"{self.variant}-{index}", self.name)
        if self.kube is not None:
            pod = self.kube.create(manifest)
        else:
            pod = stored_pod(manifest)
            self._say("add", pod)
        calls = len(self.kubelet.allocate_seconds)
        refused = False

        def admit() -> None:
            nonlocal refused
            try:
                self.kubelet.admit(pod)
            except AdmissionError as error:
                print(f"  {self.variant}: refused: {error}", file=sys.stderr)
                refused = True

        took = timed(admit)
        self.kubelet.forget(pod)
        if self.kube is not None:
            delete_ended(self.kube, pod)
        self._say("remove", pod)
        if not keep:
            return
        if refused:
            self.refused += 1
            return
        self.admission.append(took)
        self.allocate.extend(self.kubelet.allocate_seconds[calls:])

    def row(self) -> Row:
        return Row(self.variant, spread(self.allocate), spread(self.admission), self.refused)


def detected_groups() -> list[Obj]:
    """`spec.groups` of the simulated node, from the agent's own `detect` command."""
    found = subprocess.run(
        [sys.executable, "-m", "nodeagent", "detect", "--simulate", PROFILE, "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    groups: list[Obj] = json.loads(found.stdout)
    return groups


def work_root() -> str | None:
    """Where the agent's state lives on a node (`/var/lib/gpustack/operator`): /var/lib when
    this user may write there, else the default temporary directory."""
    return WORK_ROOT if os.access(WORK_ROOT, os.W_OK) else None


def start_node(stack: ExitStack, bed: Testbed, variant: str, groups: list[Obj]) -> Node:
    """A kubelet emulator here, the plugin servers in a child process; the api variant's
    `Devices` object on the testbed."""
    name = f"bench-{variant}"
    # Unix socket paths are limited to 107 bytes: keep the root short.
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    stack.callback(shutil.rmtree, root, ignore_errors=True)
    # The Pods' work dirs (and the journal beside them) where the agent keeps them, under /var/lib:
    # a sliced Allocate makes three directories before it answers, and on this machine a directory
    # made under /tmp costs several times one made there (docs/benchmarks.md, "Allocate latency").
    work = Path(tempfile.mkdtemp(prefix=f"gpustack-bench-{variant}-", dir=work_root()))
    stack.callback(shutil.rmtree, work, ignore_errors=True)
    kubelet = KubeletEmulator(root)
    stack.callback(kubelet.stop)
    kubeconfig = ""
    if variant in API_VARIANTS:
        devices = {"apiVersion": DEVICES_API, "kind": DEVICES_KIND, "metadata": {"name": name}}
        bed.kube.create({**devices, "spec": {"groups": groups}})
        # The agent may write only for its own node (its token names it): the node must exist.
        register_node(bed.kube, node_object(name, cpu="16"))
        kubeconfig = str(bed.service_account_kubeconfig(AGENT_NAMESPACE, AGENT_ACCOUNT, name))
    plugin = Plugin(
        variant,
        name,
        groups,
        str(kubelet.plugin_dir),
        str(kubelet.pod_resources_socket),
        str(work / "pods"),
        kubeconfig,
    )
    # Spawned, not forked: gRPC's threads do not survive a fork.
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    child = context.Process(target=serve_plugins, args=(plugin, theirs), daemon=True)
    child.start()

    def stop() -> None:
        mine.send(("stop", {}))
        child.join(10)

    stack.callback(stop)
    return Node(variant, name, kubelet, mine, bed.kube if variant in API_VARIANTS else None)


@contextmanager
def testbed() -> Iterator[Testbed]:
    build.ensure()
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-bench-allocate-")))
    bed.up()
    try:
        install(bed)
        bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        yield bed
    finally:
        bed.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200, help="sliced Pods per variant")
    args = parser.parse_args()
    groups = detected_groups()
    with testbed() as bed, ExitStack() as stack:
        nodes = [start_node(stack, bed, variant, groups) for variant in VARIANTS]
        for node in nodes:
            node.kubelet.wait_devices(SLICE, lambda d: len(d) > 0, timeout=60)
        for index in range(WARMUP + args.pods):
            for node in nodes if index % 2 == 0 else reversed(nodes):
                node.admit_one(index, keep=index >= WARMUP)
        print(
            f"Allocate latency: {args.pods} sliced Pods per variant ({PROFILE}), one at a time "
            "through the kubelet emulator and the plugin's gRPC servers, interleaved"
        )
        ratios = [("api", "memory"), ("journal", "memory"), ("api", "journal")]
        for line in report([node.row() for node in nodes], ratios):
            print(line)


if __name__ == "__main__":
    main()
