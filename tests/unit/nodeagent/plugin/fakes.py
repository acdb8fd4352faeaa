"""A fake node for the device-plugin server tests: Pods in memory, an annotation writer with
injectable delay and failure, simulated NVIDIA cards, and a started plugin rig."""

from __future__ import annotations

import copy
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chain.devices import Devices, DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.manufacturers import Manufacturer, manufacturers
from nodeagent.plugin.allocator import Allocator
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import PluginServer, plugin_servers
from nodeagent.plugin.workdirs import WorkDirGC
from testbed.kubelet import KubeletEmulator
from tests.unit.nodeagent.helpers import detect

NVIDIA: Manufacturer = manufacturers({})["nvidia"]
GPU = "nvidia.com/gpu"
SHARED = GPU + ".shared"
SLICED = GPU + ".sliced"


def partition_limits(base: str, profile: str) -> dict[str, str]:
    """A container's limits asking one partition of `profile` (`<base>.partitioned`)."""
    family = base + ".partitioned"
    return {family: "1", f"{family}.mig-{profile}": "1"}


def t4_spec(profile: str = "t4x4") -> DevicesSpec:
    """The spec the real NVIDIA detector reports for a simulated node."""
    return DevicesSpec(tuple(detect(profile)))


class FakeCluster:
    """The Pods of one node; `write` is the annotation writer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_key: dict[tuple[str, str], dict[str, Any]] = {}
        self.delay = 0.0
        self.fail: Exception | None = None
        self.writes: list[tuple[str, str, str]] = []
        self.events: list[dict[str, Any]] = []
        self._count = 0

    def add(self, name: str, *containers: tuple[str, Mapping[str, object]]) -> dict[str, Any]:
        with self.lock:
            self._count += 1
            pod: dict[str, Any] = {
                "metadata": {
                    "namespace": "default",
                    "name": name,
                    "uid": f"uid-{name}",
                    "creationTimestamp": f"2026-01-01T00:{self._count // 60:02d}:"
                    f"{self._count % 60:02d}Z",
                    "annotations": {},
                },
                "spec": {
                    "nodeName": "node-a",
                    "containers": [
                        {"name": c, "resources": {"limits": dict(limits)}}
                        for c, limits in containers
                    ],
                },
                "status": {"phase": "Pending"},
            }
            self.by_key[("default", name)] = pod
            return copy.deepcopy(pod)

    def remove(self, name: str) -> None:
        with self.lock:
            self.by_key.pop(("default", name), None)

    def set_phase(self, name: str, phase: str) -> None:
        with self.lock:
            self.by_key[("default", name)]["status"]["phase"] = phase

    def annotation(self, name: str) -> str:
        with self.lock:
            pod = self.by_key[("default", name)]
            return str(pod["metadata"]["annotations"].get(ALLOCATED_ANNOTATION, ""))

    def pods(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(list(self.by_key.values()))

    def write(self, namespace: str, name: str, value: str) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        with self.lock:
            self.by_key[(namespace, name)]["metadata"]["annotations"][ALLOCATED_ANNOTATION] = value
            self.writes.append((namespace, name, value))


class WatchAway:
    """The agent's Pod cache while its watch is away (the API server restarted; the watch comes
    back only after its backoff, seconds later): the list as the watch last had it (`seen`),
    and a fresh list from the API server."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.seen = cluster.pods()

    def pods(self) -> list[dict[str, Any]]:
        return self.seen

    def fresh_pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods()


@dataclass
class Rig:
    kubelet: KubeletEmulator
    cluster: FakeCluster
    node: NodeState
    servers: dict[Mode, PluginServer]
    made: list[str] = field(default_factory=list)

    def ready(self) -> None:
        """Wait until kubelet has every plugin's first device list (it admits only then)."""
        for server in self.servers.values():
            self.kubelet.wait_devices(server.allocator.resource, lambda d: len(d) > 0)


@contextmanager
def rig(
    modes: tuple[Mode, ...] = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED),
    spec: DevicesSpec | None = None,
    deadline_s: float = 0.8,
    workdirs: Path | None = None,
) -> Iterator[Rig]:
    """A kubelet emulator and started plugin servers in a short temp dir (unix socket paths
    are limited to 107 bytes, which pytest's tmp_path can exceed). With `workdirs`, the sliced
    server keeps its per-Pod work dirs there and collects them."""
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    servers: dict[Mode, PluginServer] = {}
    with ExitStack() as cleanup:  # undone in reverse, even when setting up fails midway
        cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        kubelet = KubeletEmulator(root)
        cleanup.callback(kubelet.stop)
        cleanup.callback(lambda: [server.stop() for server in servers.values()])
        cluster = FakeCluster()
        fixed = spec or t4_spec()
        node = NodeState(lambda: fixed, cluster, cluster)
        made: list[str] = []
        for mode in modes:
            allocator = Allocator(
                node,
                NVIDIA,
                mode,
                PodResourcesClient(str(kubelet.pod_resources_socket)),
                make_dirs=made.append,
                pods_dir=str(workdirs or root / "pods"),
            )
            gc = WorkDirGC(str(workdirs)) if workdirs and mode == Mode.SLICED else None
            servers[mode] = PluginServer(
                allocator, str(kubelet.plugin_dir), poll_s=0.05, deadline_s=deadline_s, gc=gc
            )
            servers[mode].start()
        yield Rig(kubelet, cluster, node, servers, made)


@contextmanager
def emulated_kubelet() -> Iterator[KubeletEmulator]:
    """A kubelet emulator in a short temp dir (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    try:
        kubelet = KubeletEmulator(root)
        try:
            yield kubelet
        finally:
            kubelet.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def agent(kubelet: KubeletEmulator, cluster: FakeCluster, spec: DevicesSpec) -> Iterator[NodeState]:
    """One node agent's NVIDIA plugin servers, wired as `nodeagent serve --device-plugin-dir`
    wires them (`plugin_servers`), over a fresh `NodeState`; leaving stops them like an agent
    that exits. Two in a row over the same kubelet and Pods are an agent restart."""
    node = NodeState(lambda: spec, cluster, cluster)
    client = PodResourcesClient(str(kubelet.pod_resources_socket))
    pods_dir = str(kubelet.plugin_dir.parent / "pods")
    servers = plugin_servers(node, NVIDIA, str(kubelet.plugin_dir), client, pods_dir=pods_dir)
    try:
        for server in servers:
            server.start()
        yield node
    finally:
        for server in servers:
            server.stop()


class FakeKube:
    """The API calls `DevicePlugins` makes, over a `FakeCluster` and a fixed `Devices`."""

    def __init__(self, cluster: FakeCluster, spec: DevicesSpec) -> None:
        self.cluster = cluster
        self.spec = spec

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return Devices(name, self.spec).render() if kind == "Devices" else None

    def list(self, api_version: str, kind: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.cluster.pods()

    def create(self, obj: Any) -> Any:
        self.cluster.events.append(obj)
        return obj

    def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if kind == "Event":
            return {}
        value = patch["metadata"]["annotations"][ALLOCATED_ANNOTATION]
        self.cluster.write(kwargs.get("namespace") or "default", name, value)
        return {}
