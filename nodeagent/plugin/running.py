"""The device-plugin servers inside `python -m nodeagent serve --device-plugin-dir DIR`.

The detect loop drives them: `publish` (the set of manufacturers detection found) starts the
servers of each manufacturer served here the first time it appears, and `refresh` (after every
report) wakes their ListAndWatch streams so kubelet sees the `Devices` spec the report just wrote.
The servers read the node's Pods and `Devices` spec and write the allocation annotation through
`KubeNode`. With `watch_pods` (what `serve` runs) the Pods come from a watch on this node's Pods,
and every change the watch brings wakes the ListAndWatch streams (health follows the ledger) and
calls `on_pods` (the agent writes the ledger then), so a grant or a finished Pod reaches the
ledger within moments instead of one monitor period.

Servers stay up when a manufacturer drops out of one detection: a transient miss must not make
kubelet forget every card; the spec (and so the advertised tokens) follows the report instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from chain.ledger import UnrecordedRecord
from chain.manufacturers import Manufacturer
from chain.settings import StartupEnv
from kubeapi import Kube
from kubeapi.events import EventRecorder
from kubeapi.watch import Cache, Watcher
from nodeagent.node_events import EVENTS_CONTROLLER
from nodeagent.plugin import protos
from nodeagent.plugin.cambricon import Cambricon, CambriconReclaimer
from nodeagent.plugin.grants import OPERATOR_LIB_DIR, OPERATOR_PODS_DIR, DeviceNodes, Responder
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.injection import (
    Channel,
    NodeFacts,
    Strategy,
    read_node_facts,
    strategy_from_env,
)
from nodeagent.plugin.journal import Journal, JournaledWriter, recover
from nodeagent.plugin.kube import KubeClient, KubeNode
from nodeagent.plugin.metax import Metax, MetaxReclaimer
from nodeagent.plugin.mig import (
    NAMINGS,
    OPERATOR_MIG_DIR,
    Markers,
    MigNvml,
    Partitioner,
    PartitionError,
)
from nodeagent.plugin.node import AnnotationWriter, NodeState
from nodeagent.plugin.reclaim import MigReclaimer, ReclaimLoop
from nodeagent.plugin.responders import RESPONDERS
from nodeagent.plugin.server import PluginServer, plugin_servers

log = logging.getLogger(__name__)

FOLLOW_TICK_S = 1.0
"""How often the Pod-following thread looks at its stop flag while no Pod changes."""

SERVED_MANUFACTURERS = frozenset(RESPONDERS)
"""Manufacturers with a container recipe (env, mounts, device nodes) in this package."""


class Follower:
    """Calls `react` from a thread of its own after every change of `cache`; a failed
    reaction is logged and left to the next change (or the next report)."""

    def __init__(self, cache: Cache, react: Callable[[], None]) -> None:
        self.cache = cache
        self.react = react
        self._stopped = threading.Event()
        self._seen = 0
        self._thread = threading.Thread(target=self._run, name="follow-pods", daemon=True)

    def start(self) -> None:
        self._seen = self.cache.changes  # before returning: no change after start is missed
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(FOLLOW_TICK_S * 5)

    def _run(self) -> None:
        seen = self._seen
        while not self._stopped.is_set():
            now = self.cache.wait(seen, FOLLOW_TICK_S)
            if now == seen:
                continue
            seen = now
            try:
                self.react()
            except Exception:
                log.exception("reacting to a Pod change failed")


class DevicePlugins:
    """Every plugin server of this node, over one shared `NodeState`."""

    def __init__(
        self,
        kube: KubeClient,
        node_name: str,
        table: Mapping[str, Manufacturer],
        plugin_dir: str = protos.DEVICE_PLUGIN_DIR,
        pod_resources_socket: str = protos.POD_RESOURCES_SOCKET,
        pods_dir: str = OPERATOR_PODS_DIR,
        nvml: MigNvml | None = None,
        mig_dir: str = OPERATOR_MIG_DIR,
        watch_pods: Kube | None = None,
        env: StartupEnv | None = None,
        environ: Mapping[str, str] | None = None,
        journal: Path | None = None,
        record_events: bool = True,
        device_nodes: DeviceNodes | None = None,
        responders: Mapping[str, Responder] | None = None,
        partition_libraries: Mapping[str, MigNvml] | None = None,
        lib_dir: str = OPERATOR_LIB_DIR,
    ) -> None:
        """`nvml` (NVIDIA's) and `partition_libraries` (by manufacturer: T-Head's HGML) make
        the hardware partitions; markers live in `mig_dir` (NVIDIA) and `<mig_dir>-<mfr>`.
        `env` carries the switches (release of finished Pods, the sliced gate, identifying
        through the kubelet); `environ` the per-manufacturer injection strategy
        (`GPUSTACK_<MFR>_DEVICE_INJECTION_STRATEGY`) and where `auto` reads the host. With
        `journal` (a file on the host) a grant is journaled before Allocate answers and its
        annotation written right after (`journal.py`); without, the annotation is written
        before the answer. `lib_dir`: where sliced grants mount their isolation libraries from
        (the directory the agent's isolation check reads)."""
        self.watcher = (
            Watcher(watch_pods, "v1", "Pod", field_selector=f"spec.nodeName={node_name}")
            if watch_pods is not None
            else None
        )
        self.io = KubeNode(kube, node_name, self.watcher.cache if self.watcher else None)
        switches = env or StartupEnv()
        self.events = EventRecorder(kube, EVENTS_CONTROLLER, node_name) if record_events else None
        self.journal = Journal(journal) if journal is not None else None
        self.writer: JournaledWriter | None = None
        writer: AnnotationWriter = self.io
        if self.journal is not None:
            self.writer = JournaledWriter(
                self.journal,
                self.io,
                self.io.cached_uid,
                self.io.current_uid,
                events=self.events,
                on_stuck=self._stuck_moved,
            )
            writer = self.writer
        self._recovered = False
        self.node = NodeState(
            self.io.spec,
            self.io,
            writer,
            release_terminated=switches.ledger_release_terminated_pods,
            sliced_gate=switches.device_plugin_sliced_allocate_gate,
        )
        self.environ: Mapping[str, str] = environ or {}
        self.on_pods: Callable[[], None] = lambda: None
        """Called (from the watch-following thread) after the node's Pods changed."""
        self.follower: Follower | None = None
        self.table = table
        self.plugin_dir = plugin_dir
        self.kubelet = (
            PodResourcesClient(pod_resources_socket)
            if switches.device_plugin_identify_by_kubelet
            else None
        )
        self.pods_dir = pods_dir
        self.lib_dir = lib_dir
        self.device_nodes = device_nodes
        self.responders = {**RESPONDERS, **(responders or {})}
        """Each manufacturer's responder (a simulated host replaces Ascend's, for its DCMI)."""
        """The host's `/dev` as Allocate reads it (a simulated host's nodes in simulation)."""
        self.servers: dict[str, list[PluginServer]] = {}
        # Without an NVML-shaped library (no pynvml, no HGML) partitions cannot be made: no
        # partitioned server for that manufacturer.
        libraries = {
            **({"nvidia": nvml} if nvml is not None else {}),
            **(partition_libraries or {}),
        }
        self.partitioners = {
            name: Partitioner(
                library,
                Markers(mig_dir if name == "nvidia" else f"{mig_dir}-{name}"),
                NAMINGS[name],
                self._bus_of if NAMINGS[name].by_bus else None,
            )
            for name, library in libraries.items()
            if name in NAMINGS
        }
        self.reclaims: list[ReclaimLoop] = []
        """The partition reclaimers and MetaX's and Cambricon's slice reclaimers, each fed every
        live-Pod set."""

    def _bus_of(self, card: str) -> str:
        """A card's PCI address, for a library that finds cards by it (Hygon's DMI)."""
        for _, found in self.node.spec().cards():
            if found.id == card and found.topology.pci_bus_id:
                return found.topology.pci_bus_id
        raise PartitionError(f"card {card} has no PCI address in this node's Devices spec")

    def start_watching(self) -> None:
        """Follow the node's Pods (a no-op without `watch_pods`)."""
        if self.watcher is None or self.follower is not None:
            return
        self.watcher.start()
        self.follower = Follower(self.watcher.cache, self._pods_changed)
        self.follower.start()

    def _pods_changed(self) -> None:
        self.node.notify()
        self.on_pods()

    def unrecorded(self) -> list[UnrecordedRecord]:
        """The records the journal could not land on their Pods (refused, or failing for that
        Pod alone), as the ledger lists them (`Devices.status.unrecorded`, the agent filling in
        `agent`): the ledger charges their cards meanwhile, and the verdict driver reads them
        in place of the Pods' annotations."""
        if self.writer is None:
            return []
        return [
            UnrecordedRecord(
                entry.uid,
                entry.namespace,
                entry.name,
                entry.value,
                reason=failure.reason,
                message=failure.message,
            )
            for entry, failure in self.writer.stuck()
        ]

    def _stuck_moved(self) -> None:
        """What `unrecorded` lists changed (a record failed, or one that failed landed or was
        dropped): the ledger follows, from a thread of its own: the writer's threads must not
        wait for the ledger's API round trips, and this happens once per such change."""

        def follow() -> None:
            try:
                self._pods_changed()
            except Exception:
                log.exception("writing the ledger after a record failed or landed")

        threading.Thread(target=follow, name="ledger-unrecorded", daemon=True).start()

    def recover(self) -> None:
        """Before the first server starts: hold again what the journal granted but did not see
        written (a previous agent died between answer and annotation), and write it."""
        if self._recovered or self.journal is None or self.writer is None:
            return
        restored = recover(self.journal, self.node, self.io.fresh_pods())
        if restored:
            log.info("holding again the unwritten grants of %d Pods from the journal", restored)
        self.writer.replay()
        self._recovered = True

    def publish(self, detected: frozenset[str]) -> None:
        """Start the servers of newly detected manufacturers; wake the running ones."""
        self.recover()
        self.start_watching()
        for name in sorted(detected & SERVED_MANUFACTURERS):
            if name in self.servers or name not in self.table:
                continue
            partitioner = self.partitioners.get(name)
            servers = plugin_servers(
                self.node,
                self.table[name],
                self.plugin_dir,
                self.kubelet,
                pods_dir=self.pods_dir,
                partitioner=partitioner,
                channel=self._channel(self.table[name]),
                events=self.events,
                nodes=self.device_nodes,
                responder=self.responders.get(name),
                lib_dir=self.lib_dir,
            )
            if partitioner is not None:
                self._start_reclaim(name, partitioner)
            responder = self.responders.get(name)
            if isinstance(responder, Metax):
                self._start_sgpu_reclaim(responder)
            elif isinstance(responder, Cambricon):
                self._reclaim(CambriconReclaimer(responder, self.pods_dir).reconcile)
            started: list[PluginServer] = []
            self.servers[name] = started
            for server in servers:
                server.start()
                started.append(server)
                log.info("serving %s on %s", server.allocator.resource, server.socket_path)
        self.refresh()

    def _channel(self, maker: Manufacturer) -> Channel:
        """How this manufacturer's grants reach containers; the host is read only for `auto`
        (containerd's config, the CDI specs), once per manufacturer started."""
        strategy = strategy_from_env(self.environ, maker.name)
        if strategy != Strategy.ENVVAR and not self.responders[maker.name].channels:
            log.warning(
                "GPUSTACK_%s_DEVICE_INJECTION_STRATEGY=%s is ignored: %s grants have one way "
                "into a container (their device nodes or their runtime's variable)",
                maker.name.upper(),
                strategy,
                maker.name,
            )
            strategy = Strategy.ENVVAR
        facts = read_node_facts(self.environ) if strategy != Strategy.ENVVAR else NodeFacts()
        log.info("%s grants reach containers by %s", maker.name, strategy)
        return Channel(maker.name, maker.runtime_name, strategy, facts)

    def _start_reclaim(self, maker: str, partitioner: Partitioner) -> None:
        """A manufacturer's partition reclaimer, fed every live-Pod set the plugins list
        (§6.3)."""

        def cards() -> list[str]:
            spec = self.node.spec()
            return [c.id for g, c in spec.cards() if g.manufacturer == maker and c.is_partitioned]

        self._reclaim(MigReclaimer(partitioner, cards).reconcile)

    def _start_sgpu_reclaim(self, metax: Metax) -> None:
        """MetaX's subdevices, destroyed once their Pod is gone."""

        def cards() -> list[str]:
            spec = self.node.spec()
            return [c.topology.pci_bus_id for g, c in spec.cards() if g.manufacturer == "metax"]

        self._reclaim(MetaxReclaimer(metax.sgpu, cards).reconcile)

    def _reclaim(self, reconcile: Callable[[frozenset[str]], object]) -> None:
        loop = ReclaimLoop(reconcile)
        self.node.on_live(loop.broadcast)
        loop.start()
        self.reclaims.append(loop)

    def refresh(self) -> None:
        """The agent just reported: read the spec again, and ListAndWatch lists again."""
        self.io.forget_spec()
        self.node.notify()

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        if self.watcher is not None:
            self.watcher.stop()
        for servers in self.servers.values():
            for server in servers:
                server.stop()
        self.servers.clear()
        for loop in self.reclaims:
            loop.stop()
        self.reclaims.clear()
        if self.writer is not None:
            # Let the records on their first write land before the agent goes; those that
            # failed stay in the journal for the next agent.
            self.writer.drain(5.0, failing=False)
            self.writer.stop()
