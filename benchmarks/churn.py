"""Churn without growth (issue #35, item 3): thousands of Pod lifecycles through the node agent's
real gRPC device plugin servers, and what is left of them afterwards.

    python -m benchmarks.churn                    # the long profile: 5,000 lifecycles
    python -m benchmarks.churn --profile short    # what `make test` runs (about 15 s)

No testbed: one simulated node (`nodeagent/simulate`), eight A100-SXM4-40GB of which the first
four are in MIG mode, so one node serves all four workload modes (exclusive, shared and sliced
on the whole cards, partitioned on the MIG ones). The agent runs in a process of its own, wired
as `nodeagent serve --device-plugin-dir` wires it: `NodeRecords.connect` with the allocation
journal, `DevicePlugins` with the simulated host's partition library and device nodes (the
partition reclaimer and the sliced work-dir GC among them), and the `Reporter` writing the
node's `Devices` ledger from the Pods and the journal's unlanded records after every change,
as the Pod watch's follower makes it. Its API server is in memory (`MemoryApi`: the node's Pods,
its `Devices` and `Node`; Events counted and dropped). The kubelet is the emulator
(`testbed/kubelet.py`) in this process: it admits each Pod as kubelet does
(GetPreferredAllocation, then Allocate, over the plugins' unix sockets).

A lifecycle: a Pod is created and admitted (granted, or refused: a refusal is an outcome
counted by mode and code, e.g. a shared Pod the kubelet offered a token whose card went
exclusive a moment before its device list caught up), runs, ends (`Succeeded`, kubelet frees its
devices), and is deleted a few lifecycles later, as Pods wait for their garbage collector. One
sliced Pod lives through three quarters of the run while the API server fails every write of its
record (a webhook that is down for its namespace: 500), so the journal never empties meanwhile
and only compaction bounds it; it is deleted then, and its record dropped.

Printed: the agent's RSS (with its threads and open files) after the warm-up, at the middle and
at the end, and end / warm-up (goal: at most 1.10); the journal's size at every sample (and its
largest, checked after every lifecycle); at the end, once the node has gone quiet, what is left:
work dirs, MIG markers and instances, reservations, journal entries; the ledger against the sum
of the records (at every sample and at the end), and no card held twice.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import logging
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import yaml

from chain.allocation import plugin_resource
from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesSpec
from chain.families import SLICED_MEMORY_PERCENTAGE, SLICED_UNITS
from chain.ledger import DevicesStatus, Mode, UnrecordedRecord
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    CardRef,
    PodAllocations,
    charged_part,
    with_unrecorded,
)
from chain.manufacturers import manufacturers
from chain.partitions import Placement
from chain.release import AGENT_NAMESPACE
from chain.units import RESOURCE_MAX_UNITS
from kubeapi import Kube, Obj
from kubeapi.client import KubeError
from nodeagent.agent import Reporter
from nodeagent.plugin.journal import COMPACT_LINES
from nodeagent.plugin.kube import KubeClient
from nodeagent.plugin.running import Changes, DevicePlugins, Follower, NodeRecords
from nodeagent.simulate.host import simulated_host
from nodeagent.simulate.profile import read_profile_file
from testbed.kubelet import AdmissionError, KubeletEmulator

NODE = "churn-node"
NAMESPACE = "churn"
NVIDIA = manufacturers({})["nvidia"]
BASE_PROFILE = "a100-40gb-mig"
MIG_CARDS = 4
"""Of the profile's eight cards, the first four stay in MIG mode; the others serve whole."""
MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED)
MODE_WEIGHTS = (2, 2, 3, 3)
SLICE_UNITS = (RESOURCE_MAX_UNITS // 10, RESOURCE_MAX_UNITS // 4, RESOURCE_MAX_UNITS // 2)
PARTITION_PROFILES = ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb")
GOAL_RSS_RATIO = 1.10
SETTLE_S = 30.0
"""How long the quiet node may take, once every Pod is gone, to have reclaimed everything
(the journal's failing lane retries every 5 s at most, the work-dir GC needs three ticks a
second apart)."""
FAILING_WRITE = KubeError(
    500,
    'Internal error occurred: failed calling webhook "pods.policy.example": '
    "context deadline exceeded",
)


@dataclass(frozen=True)
class Profile:
    name: str
    lifecycles: int
    warmup: int
    """Lifecycles before the first RSS sample (imports, gRPC's threads and caches settle)."""
    compact_lines: int
    """The journal's compaction threshold (`NodeRecords.connect`; the agent ships 4,096)."""
    running: int
    """At most this many Pods run at once (each lifecycle draws a bound up to it)."""
    linger: int
    """Ended Pods kept (`Succeeded`) before they are deleted."""
    samples: int


PROFILES = {
    "short": Profile("short", 220, 40, 48, 6, 2, 6),
    "long": Profile("long", 5000, 500, COMPACT_LINES, 8, 3, 20),
}


# --- the Pods ------------------------------------------------------------------------------------


def limits_for(mode: Mode, draw: random.Random) -> dict[str, str]:
    """One container's limits asking `mode` of an NVIDIA card (a slice or a MIG profile drawn)."""
    resource = plugin_resource(NVIDIA, mode)
    if mode == Mode.SLICED:
        return {
            resource: "1",
            NVIDIA.resource_name + SLICED_UNITS: str(draw.choice(SLICE_UNITS)),
            NVIDIA.resource_name + SLICED_MEMORY_PERCENTAGE: "10",
        }
    if mode == Mode.PARTITIONED:
        return {resource: "1", f"{resource}.mig-{draw.choice(PARTITION_PROFILES)}": "1"}
    return {resource: "1"}


def pod_manifest(name: str, limits: Mapping[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "churn",
                    "resources": {"requests": dict(limits), "limits": dict(limits)},
                }
            ],
        },
    }


def mixed_profile(directory: Path) -> Path:
    """The shipped eight-A100 MIG profile with MIG left on only the first `MIG_CARDS` cards:
    one node that offers every workload mode."""
    _, body = read_profile_file(BASE_PROFILE)
    body = copy.deepcopy(body)
    for number, card in enumerate(body["cards"]):
        card["mig"] = number < MIG_CARDS
    body["description"] = f"{BASE_PROFILE}, MIG on the first {MIG_CARDS} cards only"
    path = directory / "a100-40gb-half-mig.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def detected_groups(profile: Path) -> list[Obj]:
    """`spec.groups` of the simulated node, from the agent's own `detect` command."""
    found = subprocess.run(
        [sys.executable, "-m", "nodeagent", "detect", "--simulate", str(profile), "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    groups: list[Obj] = json.loads(found.stdout)
    return groups


# --- the agent's API server, in memory ------------------------------------------------------------


class MemoryApi:
    """The API calls the node agent makes for one node (`KubeNode`, the journal's writer, the
    Event recorder, the `Reporter`'s ledger), over Pods, `Devices` and `Node` in memory. Every
    change of a Pod bumps `changes`, which a `Follower` turns into what the Pod watch's follower
    does. A Pod named in `failing` has every write of its record answered with `FAILING_WRITE`.
    Events are counted by reason and dropped (the API server keeps them, not the agent)."""

    def __init__(self, node: str, groups: Sequence[Obj]) -> None:
        self._lock = threading.Lock()
        self.pods: dict[tuple[str, str], Obj] = {}
        self.devices: Obj = {
            "apiVersion": DEVICES_API,
            "kind": DEVICES_KIND,
            "metadata": {"name": node},
            "spec": {"groups": list(groups)},
        }
        self.node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
        self.changes = Changes()
        self.failing: set[str] = set()
        self.events: Counter[str] = Counter()
        self._created = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    # What the benchmark does to the node's Pods (the API server's clients, kubelet's status).

    def add(self, manifest: Obj) -> Obj:
        meta = manifest["metadata"]
        with self._lock:
            self._created += dt.timedelta(seconds=1)
            stored = {
                **manifest,
                "metadata": {
                    **meta,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": self._created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "annotations": {},
                },
                "status": {"phase": "Pending"},
            }
            self.pods[(meta["namespace"], meta["name"])] = stored
        self.changes.bump()
        return stored

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        with self._lock:
            pod = self.pods[(namespace, name)]
            self.pods[(namespace, name)] = {**pod, "status": {"phase": phase}}
        self.changes.bump()

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            self.pods.pop((namespace, name), None)
        self.changes.bump()

    # The agent's calls (`KubeClient`, `EventsClient`, what the `Reporter` uses of `Kube`).

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        with self._lock:
            if kind == "Pod":
                return self.pods.get((namespace or "", name))
            if kind == DEVICES_KIND:
                return self.devices
            if kind == "Node":
                return self.node
        return None

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        # Stored objects are replaced, never changed in place: the list may be read as is.
        with self._lock:
            return list(self.pods.values()) if kind == "Pod" else []

    def create(self, obj: Obj) -> Obj:
        with self._lock:
            self.events[str(obj.get("reason", obj.get("kind")))] += 1
        return obj

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        if kind == "Node":
            with self._lock:
                meta = self.node["metadata"]
                labels = {**(meta.get("labels") or {}), **patch["metadata"]["labels"]}
                labels = {k: v for k, v in labels.items() if v is not None}
                self.node = {**self.node, "metadata": {**meta, "labels": labels}}
                return self.node
        if kind != "Pod":
            return {}  # an Event's series count
        value = patch["metadata"]["annotations"][ALLOCATED_ANNOTATION]
        with self._lock:
            if name in self.failing:
                raise FAILING_WRITE
            key = (namespace or "", name)
            pod = self.pods.get(key)
            if pod is None:
                raise KubeError(404, f'pods "{name}" not found')
            meta = pod["metadata"]
            annotations = {**meta["annotations"], ALLOCATED_ANNOTATION: value}
            self.pods[key] = {**pod, "metadata": {**meta, "annotations": annotations}}
        self.changes.bump()
        return self.pods[key]

    def apply(self, obj: Obj, manager: str = "", subresource: str | None = None) -> Obj:
        with self._lock:
            if obj.get("kind") == DEVICES_KIND and subresource == "status":
                status = {**(self.devices.get("status") or {}), **obj["status"]}
                self.devices = {**self.devices, "status": status}
            return self.devices


# --- the invariants (pure) ----------------------------------------------------------------------


def _overlap(placements: Sequence[Placement]) -> bool:
    return any(a.overlaps(b) for n, a in enumerate(placements) for b in placements[n + 1 :])


def audit(
    spec: DevicesSpec,
    pods: Sequence[Mapping[str, Any]],
    unrecorded: Sequence[UnrecordedRecord],
    ledger: DevicesStatus,
    release_terminated: bool = True,
) -> list[str]:
    """What is wrong with the node: a card held twice (two modes, two exclusive holders, more
    than its units, overlapping partitions), a record naming no card of the node, or a ledger
    row that is not the sum of the records (the Pods' annotations, or the journal's unlanded
    record in place of one) of what still charges. Empty when all is well."""
    problems: list[str] = []
    units: dict[CardRef, int] = defaultdict(int)
    modes: dict[CardRef, set[Mode]] = defaultdict(set)
    exclusive: dict[CardRef, int] = defaultdict(int)
    placements: dict[CardRef, list[Placement]] = defaultdict(list)
    cards = {CardRef(group.manufacturer, card.id) for group, card in spec.cards()}
    for pod in map(PodAllocations.from_pod, with_unrecorded(pods, unrecorded)):
        if pod.problem:
            problems.append(f"{pod.name}: {pod.problem}")
        for container, record in pod.records.items():
            for claim in charged_part(record, pod.terminal, release_terminated).claims():
                ref = claim.ref
                if ref not in cards:
                    problems.append(f"{pod.name}/{container} holds {ref.card}, not on the node")
                units[ref] += claim.row.allocated
                modes[ref].add(claim.row.mode)
                exclusive[ref] += claim.row.mode == Mode.EXCLUSIVE
                placements[ref].extend(claim.row.allocated_physical_placements)
    for group, card in spec.cards():
        ref = CardRef(group.manufacturer, card.id)
        if len(modes[ref]) > 1:
            problems.append(f"{card.id} held in {sorted(m.name for m in modes[ref])}")
        if exclusive[ref] > 1:
            problems.append(f"{card.id} held exclusively by {exclusive[ref]} containers")
        if units[ref] > RESOURCE_MAX_UNITS:
            problems.append(f"{card.id} promised {units[ref]} units of {RESOURCE_MAX_UNITS}")
        if _overlap(placements[ref]):
            problems.append(f"{card.id} has overlapping partitions {placements[ref]}")
        row = ledger.row(group.manufacturer, group.id, card.id)
        mode = next(iter(modes[ref])) if len(modes[ref]) == 1 else Mode.NONE
        free = RESOURCE_MAX_UNITS - units[ref]
        if row is None:
            problems.append(f"{card.id} has no ledger row")
        elif (row.mode, row.remaining) != (mode, free):
            problems.append(
                f"{card.id}: the ledger says {row.mode.name} with {row.remaining} free, "
                f"the records {mode.name} with {free}"
            )
    return problems


# --- the agent, in its own process ----------------------------------------------------------


@dataclass(frozen=True)
class AgentSetup:
    """Where the agent's process serves and keeps its state."""

    groups: list[Obj]
    profile: str
    plugin_dir: str
    pod_resources_socket: str
    state_dir: str
    """The agent's `/var/lib/gpustack/operator`: pods/, mig/ and the journal."""
    compact_lines: int

    @property
    def pods_dir(self) -> str:
        return os.path.join(self.state_dir, "pods")

    @property
    def mig_dir(self) -> str:
        return os.path.join(self.state_dir, "mig")

    @property
    def journal(self) -> Path:
        return Path(self.state_dir) / "allocations.journal"


@dataclass(frozen=True)
class Look:
    """The agent's state as its process sees it (`look`)."""

    pods: int
    reservations: int
    grants: int
    journal_entries: int
    """Records in the journal not yet landed."""
    stuck: int
    """Of those, the ones whose writes failed (listed in `Devices.status.unrecorded`)."""
    instances: int
    """MIG instances on the simulated cards."""
    problems: tuple[str, ...]
    events: dict[str, int] = field(default_factory=dict)


class Agent:
    """The node agent's plugins, records and ledger in the agent's process, and the commands
    the benchmark sends it."""

    def __init__(self, setup: AgentSetup, stack: ExitStack) -> None:
        host = stack.enter_context(simulated_host(setup.profile))
        self.instances = host.nvml.instances if host.nvml is not None else list
        self.api = MemoryApi(NODE, setup.groups)
        table = manufacturers({})
        self.records = NodeRecords.connect(
            cast(KubeClient, self.api),
            NODE,
            journal=setup.journal,
            compact_lines=setup.compact_lines,
        )
        self.reporter = Reporter(
            cast(Kube, self.api),
            NODE,
            AGENT_NAMESPACE,
            (NVIDIA.name,),
            table,
            ledger=True,
            pods=self.records.io.pods,
            unrecorded=self.records.unrecorded,
        )
        self.plugins = DevicePlugins(
            self.records,
            table,
            setup.plugin_dir,
            setup.pod_resources_socket,
            setup.pods_dir,
            mig_dir=setup.mig_dir,
            partition_libraries=host.partition_libraries(),
            device_nodes=host.device_nodes,
            responders=host.responders(),
            on_pods=self.reporter.write_ledger,
        )
        stack.callback(self.plugins.stop)
        # What the Pod watch's follower does on every change of the node's Pods.
        follower = Follower(self.api.changes, self._pods_changed)
        follower.start()
        stack.callback(follower.stop)
        self.plugins.publish(frozenset({NVIDIA.name}))
        self.reporter.write_ledger()

    def _pods_changed(self) -> None:
        self.plugins.node.notify()
        self.reporter.write_ledger()

    def handle(self, command: str, argument: Any) -> object:
        if command == "add":
            return self.api.add(argument)
        if command == "phase":
            namespace, name, phase = argument
            self.api.set_phase(namespace, name, phase)
        elif command == "remove":
            self.api.remove(*argument)
        elif command == "fail":
            name, failing = argument
            (self.api.failing.add if failing else self.api.failing.discard)(name)
        elif command == "look":
            return self.look()
        else:
            raise ValueError(f"unknown command {command!r}")
        return None

    def look(self) -> Look:
        """The state once the records on their first write have landed and the ledger was
        written from them (a record on its way is charged by its reservation alone, which the
        published ledger does not show)."""
        writer = self.records.writer
        assert writer is not None and self.records.journal is not None
        writer.drain(5.0, failing=False)
        self.reporter.write_ledger()
        node = self.plugins.node
        devices = Devices.parse(self.api.get(DEVICES_API, DEVICES_KIND, NODE) or {})
        pods = self.api.list("v1", "Pod")
        return Look(
            pods=len(pods),
            reservations=len(node.reserved()),
            grants=len(node.granted()),
            journal_entries=len(self.records.journal.pending()),
            stuck=len(writer.stuck()),
            instances=len(self.instances()),
            problems=tuple(audit(devices.spec, pods, devices.unrecorded, devices.status)),
            events=dict(self.api.events),
        )


def serve_agent(setup: AgentSetup, control: Connection) -> None:
    """The agent's process: serve until told to stop, answering each command."""
    logging.basicConfig(level=logging.WARNING, format="agent %(levelname)s %(name)s %(message)s")
    with ExitStack() as stack:
        agent = Agent(setup, stack)
        control.send("ready")
        while True:
            command, argument = control.recv()
            if command == "stop":
                break
            try:
                control.send(agent.handle(command, argument))
            except Exception as error:  # the benchmark says what failed, and stops
                control.send(error)


# --- the benchmark's side ----------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """A process's resident memory (KiB), threads and open files, from /proc."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            found[key] = int(value.split()[0])
    found["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return found


def count_files(root: Path, pattern: str) -> int:
    return sum(1 for _ in root.glob(pattern)) if root.exists() else 0


@dataclass(frozen=True)
class Sample:
    lifecycle: int
    rss_kib: int
    threads: int
    fds: int
    journal_bytes: int
    journal_lines: int
    work_dirs: int
    markers: int
    look: Look


class AgentProcess:
    """The agent's process and what the benchmark reads of it from outside (/proc, its files)."""

    def __init__(self, stack: ExitStack, setup: AgentSetup) -> None:
        self.setup = setup
        # Spawned, not forked: gRPC's threads do not survive a fork.
        context = multiprocessing.get_context("spawn")
        self.control, theirs = context.Pipe()
        self.process = context.Process(target=serve_agent, args=(setup, theirs), daemon=True)
        self.process.start()
        stack.callback(self.stop)
        if not self.control.poll(60) or self.control.recv() != "ready":
            raise RuntimeError("the agent's process did not start")

    def say(self, command: str, argument: object = None) -> Any:
        self.control.send((command, argument))
        answer = self.control.recv()
        if isinstance(answer, Exception):
            raise RuntimeError(f"the agent failed {command}: {answer!r}") from answer
        return answer

    def stop(self) -> None:
        if self.process.is_alive():
            self.control.send(("stop", None))
            self.process.join(15)
        if self.process.is_alive():
            self.process.kill()

    def journal_size(self) -> int:
        try:
            return self.setup.journal.stat().st_size
        except FileNotFoundError:
            return 0

    def sample(self, lifecycle: int) -> Sample:
        look = cast(Look, self.say("look"))
        status = proc_status(cast(int, self.process.pid))
        try:
            lines = len(self.setup.journal.read_bytes().splitlines())
        except FileNotFoundError:
            lines = 0
        return Sample(
            lifecycle,
            status["VmRSS"],
            status["Threads"],
            status["fds"],
            self.journal_size(),
            lines,
            count_files(Path(self.setup.pods_dir), "*"),
            count_files(Path(self.setup.mig_dir), "*/*.json"),
            look,
        )


@dataclass
class Outcomes:
    granted: Counter[str] = field(default_factory=Counter)
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    journal_peak: int = 0


@dataclass(frozen=True)
class Result:
    profile: Profile
    samples: list[Sample]
    outcomes: Outcomes
    final: Sample
    seconds: float
    settle_seconds: float

    @property
    def warm(self) -> Sample:
        return self.samples[0]

    @property
    def middle(self) -> Sample:
        return min(self.samples, key=lambda s: abs(s.lifecycle - self.profile.lifecycles // 2))

    @property
    def rss_ratio(self) -> float:
        return self.final.rss_kib / self.warm.rss_kib

    def left(self) -> dict[str, int]:
        """What the quiet node still holds once every Pod is gone (all zero when reclaimed)."""
        final = self.final
        return {
            "pods": final.look.pods,
            "work dirs": final.work_dirs,
            "MIG markers": final.markers,
            "MIG instances": final.look.instances,
            "reservations": final.look.reservations,
            "visibility grants": final.look.grants,
            "journal entries": final.look.journal_entries,
            "journal bytes": final.journal_bytes,
        }

    def problems(self) -> list[str]:
        """Every invariant broken at a sample or at the end."""
        found = [f"lifecycle {s.lifecycle}: {p}" for s in self.samples for p in s.look.problems]
        found += [f"end: {p}" for p in self.final.look.problems]
        found += [f"end: {n} {what} left" for what, n in self.left().items() if n]
        return found


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def report(result: Result) -> list[str]:
    """The printed figures."""
    profile, outcomes = result.profile, result.outcomes
    granted = sum(outcomes.granted.values())
    refused = sum(outcomes.refused.values())
    lines = [
        f"Churn ({profile.name}): {profile.lifecycles} Pod lifecycles through the agent's gRPC "
        f"plugins in {result.seconds:.0f} s ({profile.lifecycles / result.seconds:.1f} /s), "
        f"settled in {result.settle_seconds:.1f} s",
        "granted: "
        + ", ".join(f"{mode} {n}" for mode, n in sorted(outcomes.granted.items()))
        + f" ({granted}); refused: {refused}"
        + "".join(f", {mode} {code} {n}" for (mode, code), n in sorted(outcomes.refused.items())),
        f"{'lifecycle':>9}  {'RSS':>10}  {'threads':>7}  {'fds':>4}  {'journal':>12}  "
        f"{'lines':>5}  {'work dirs':>9}  {'markers':>7}  {'pods':>4}",
    ]
    for sample in [*result.samples, result.final]:
        label = "end" if sample is result.final else str(sample.lifecycle)
        lines.append(
            f"{label:>9}  {_mib(sample.rss_kib):>10}  {sample.threads:>7}  {sample.fds:>4}  "
            f"{sample.journal_bytes:>10} B  {sample.journal_lines:>5}  {sample.work_dirs:>9}  "
            f"{sample.markers:>7}  {sample.look.pods:>4}"
        )
    verdict = "met" if result.rss_ratio <= GOAL_RSS_RATIO else "MISSED"
    lines += [
        f"RSS: warm-up {_mib(result.warm.rss_kib)}, middle {_mib(result.middle.rss_kib)}, "
        f"end {_mib(result.final.rss_kib)}; end / warm-up {result.rss_ratio:.3f} "
        f"(goal <= {GOAL_RSS_RATIO:.2f}: {verdict})",
        f"journal: largest {outcomes.journal_peak} B (compacted past {profile.compact_lines} "
        f"lines); Events written: {sum(result.final.look.events.values())}",
        "left at the end: " + ", ".join(f"{what} {n}" for what, n in result.left().items()),
    ]
    problems = result.problems()
    lines.append("invariants: " + ("all held" if not problems else f"{len(problems)} broken"))
    lines += [f"  {problem}" for problem in problems[:20]]
    return lines


class Churn:
    """The lifecycles, driven through the kubelet emulator against the agent's process."""

    def __init__(self, profile: Profile, agent: AgentProcess, kubelet: KubeletEmulator) -> None:
        self.profile = profile
        self.agent = agent
        self.kubelet = kubelet
        self.draw = random.Random(20261204)
        self.running: list[Obj] = []
        self.ended: deque[Obj] = deque()
        self.outcomes = Outcomes()

    def _end(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.agent.say("phase", (meta["namespace"], meta["name"], "Succeeded"))
        self.kubelet.forget(pod)  # kubelet frees a finished Pod's devices
        self.ended.append(pod)
        while len(self.ended) > self.profile.linger:
            self._delete(self.ended.popleft())

    def _delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        self.agent.say("remove", (meta["namespace"], meta["name"]))

    def _admit(self, name: str, mode: Mode, limits: Mapping[str, str]) -> Obj | None:
        """Create and admit one Pod; the Pod once running, or None when it was refused."""
        pod = cast(Obj, self.agent.say("add", pod_manifest(name, limits)))
        try:
            self.kubelet.admit(pod)
        except AdmissionError as error:
            self.outcomes.refused[(mode.name.lower(), str(error.code))] += 1
            self._delete(pod)  # a failed admission is final
            return None
        finally:
            # The emulator keeps every answer; this benchmark reads none of them.
            for kept in (self.kubelet.responses, self.kubelet.hints):
                kept.clear()
            self.kubelet.allocate_seconds.clear()
        self.outcomes.granted[mode.name.lower()] += 1
        self.agent.say("phase", (NAMESPACE, name, "Running"))
        return pod

    def _held(self) -> Obj:
        """The long-lived sliced Pod whose record the API server refuses to take."""
        limits = limits_for(Mode.SLICED, self.draw)
        self.agent.say("fail", ("held", True))
        pod = self._admit("held", Mode.SLICED, limits)
        if pod is None:
            raise RuntimeError("the held Pod was refused on an empty node")
        return pod

    def run(self) -> Result:
        profile = self.profile
        marks = {
            profile.warmup + (profile.lifecycles - profile.warmup) * n // (profile.samples - 1)
            for n in range(profile.samples)
        }
        marks = {min(mark, profile.lifecycles) for mark in marks}
        held: Obj | None = self._held()
        held_until = profile.lifecycles * 3 // 4
        samples: list[Sample] = []
        started = time.monotonic()
        for index in range(1, profile.lifecycles + 1):
            bound = self.draw.randint(1, profile.running)
            while len(self.running) >= bound:
                self._end(self.running.pop(self.draw.randrange(len(self.running))))
            mode = self.draw.choices(MODES, MODE_WEIGHTS)[0]
            pod = self._admit(f"pod-{index}", mode, limits_for(mode, self.draw))
            if pod is not None:
                self.running.append(pod)
            if held is not None and index >= held_until:
                self._end(held)
                held = None
            self.outcomes.journal_peak = max(self.outcomes.journal_peak, self.agent.journal_size())
            if index in marks:
                samples.append(self.agent.sample(index))
        seconds = time.monotonic() - started
        settled = time.monotonic()
        for pod in [*self.running, *([held] if held is not None else [])]:
            self._end(pod)
        self.running.clear()
        while self.ended:
            self._delete(self.ended.popleft())
        final = self._settle()
        return Result(profile, samples, self.outcomes, final, seconds, time.monotonic() - settled)

    def _settle(self) -> Sample:
        """The node quiet, no Pod left: sample until everything is reclaimed, or `SETTLE_S`."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            sample = self.agent.sample(self.profile.lifecycles)
            left = [sample.work_dirs, sample.markers, sample.journal_bytes]
            look = sample.look
            left += [look.instances, look.reservations, look.grants, look.journal_entries]
            if not any(left) or time.monotonic() > deadline:
                return sample
            time.sleep(0.5)


@contextmanager
def node(profile: Profile) -> Iterator[tuple[AgentProcess, KubeletEmulator]]:
    """A kubelet emulator here, the agent in a process of its own, serving the mixed node."""
    with ExitStack() as stack:
        # Unix socket paths are limited to 107 bytes: keep the root short.
        root = Path(tempfile.mkdtemp(prefix="churn", dir="/tmp"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        kubelet = KubeletEmulator(root)
        stack.callback(kubelet.stop)
        path = mixed_profile(root)
        setup = AgentSetup(
            detected_groups(path),
            str(path),
            str(kubelet.plugin_dir),
            str(kubelet.pod_resources_socket),
            str(root / "state"),
            profile.compact_lines,
        )
        agent = AgentProcess(stack, setup)
        for mode in MODES:
            kubelet.wait_devices(plugin_resource(NVIDIA, mode), lambda d: len(d) > 0, timeout=60)
        yield agent, kubelet


def churn(profile: Profile) -> Result:
    with node(profile) as (agent, kubelet):
        return Churn(profile, agent, kubelet).run()


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="long")
    parser.add_argument("--lifecycles", type=int, help="in place of the profile's count")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.lifecycles:
        warmup = min(profile.warmup, args.lifecycles // 5)
        profile = Profile(
            profile.name,
            args.lifecycles,
            warmup,
            profile.compact_lines,
            profile.running,
            profile.linger,
            profile.samples,
        )
    result = churn(profile)
    for line in report(result):
        out(line)
    return 1 if result.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
