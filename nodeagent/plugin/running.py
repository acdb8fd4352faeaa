"""The device-plugin servers inside `python -m nodeagent serve --device-plugin-dir DIR`.

The detect loop drives them: `publish` (the set of manufacturers detection found) starts the
servers of each manufacturer served here the first time it appears, and `refresh` (after every
report) wakes their ListAndWatch streams so kubelet sees the `Devices` spec the report just wrote.
The servers read the node's Pods and `Devices` spec and write the allocation annotation through
the `NodeRecords` they are built over (`KubeNode`, the journal's writer, `NodeState`), which the
agent builds first, so that its ledger reads the same Pods and unlanded records. With
`watch_pods` (what `serve` runs) the Pods come from a watch on this node's Pods, and every change
the watch brings, or a move of what the journal cannot land, wakes the ListAndWatch streams
(health follows the ledger) and calls `on_pods` (the agent writes the ledger then), so a grant or
a finished Pod reaches the ledger within moments instead of one monitor period.

Servers stay up when a manufacturer drops out of one detection: a transient miss must not make
kubelet forget every card; the spec (and so the advertised tokens) follows the report instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Protocol

from chain.ledger import UnrecordedRecord
from chain.manufacturers import Manufacturer
from chain.settings import StartupEnv
from kubeapi import Kube
from kubeapi.events import EventRecorder
from kubeapi.watch import Watcher
from nodeagent.node_events import EVENTS_CONTROLLER
from nodeagent.plugin import protos
from nodeagent.plugin.grants import OPERATOR_LIB_DIR, OPERATOR_PODS_DIR, DeviceNodes, Responder
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.injection import (
    Channel,
    NodeFacts,
    Strategy,
    read_node_facts,
    strategy_from_env,
)
from nodeagent.plugin.journal import COMPACT_LINES, Journal, JournaledWriter, recover
from nodeagent.plugin.kube import KubeClient, KubeNode
from nodeagent.plugin.mig import (
    OPERATOR_MIG_DIR,
    Markers,
    MigNvml,
    Partitioner,
    PartitionError,
)
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.reclaim import MigReclaimer, ReclaimLoop
from nodeagent.plugin.responders import RESPONDERS
from nodeagent.plugin.server import PluginServer, plugin_servers
from nodeagent.topology.choice import UNKNOWN_LINKS, NodeLinks
from nodeagent.vendors.registry import vendor_named

log = logging.getLogger(__name__)

FOLLOW_TICK_S = 1.0
"""How often the Pod-following thread looks at its stop flag while no Pod changes and nothing
wakes it (a stop wakes it: `Follower.stop`)."""

SERVED_MANUFACTURERS = frozenset(RESPONDERS)
"""Manufacturers with a container recipe (env, mounts, device nodes) in this package."""


class Changing(Protocol):
    """What a `Follower` waits on: a count of changes (a watch `Cache`, or `Changes`)."""

    @property
    def changes(self) -> int: ...

    def wait(self, seen: int, timeout: float, stop: threading.Event | None = None) -> int:
        """The count once it moved past `seen`, or `seen` when `stop` was set (and woken) or
        `timeout` ran out."""
        ...

    def wake(self) -> None:
        """Make every waiter look at its `stop` flag now."""
        ...


class Changes:
    """A count of changes, waited on as a watch cache is (`Changing`): the journal's writer
    bumps it whenever what it cannot land moves, and a `Follower` writes the ledger then. Built
    before both, it is what lets the writer be built before the ledger that reads it."""

    def __init__(self) -> None:
        self._moved = threading.Condition()
        self._count = 0

    @property
    def changes(self) -> int:
        with self._moved:
            return self._count

    def bump(self) -> None:
        """Something moved (called from a writer thread: it only counts and wakes)."""
        with self._moved:
            self._count += 1
            self._moved.notify_all()

    def wait(self, seen: int, timeout: float, stop: threading.Event | None = None) -> int:
        with self._moved:
            self._moved.wait_for(
                lambda: self._count != seen or (stop is not None and stop.is_set()), timeout
            )
            return self._count

    def wake(self) -> None:
        with self._moved:
            self._moved.notify_all()


class Follower:
    """Calls `react` from a thread of its own after every change of `changing`; a failed
    reaction is logged and left to the next change (or the next report)."""

    def __init__(
        self, changing: Changing, react: Callable[[], None], name: str = "follow-pods"
    ) -> None:
        self.cache = changing
        self.react = react
        self._stopped = threading.Event()
        self._seen = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._seen = self.cache.changes  # before returning: no change after start is missed
        self._thread.start()

    def stop(self) -> None:
        # Woken, not left to its tick: each follower's tick was a second of every agent's
        # shutdown (two followers, 2 s of a DaemonSet roll per node).
        self._stopped.set()
        self.cache.wake()
        self._thread.join(FOLLOW_TICK_S * 5)

    def _run(self) -> None:
        seen = self._seen
        while not self._stopped.is_set():
            now = self.cache.wait(seen, FOLLOW_TICK_S, self._stopped)
            if now == seen:
                continue
            seen = now
            try:
                self.react()
            except Exception:
                log.exception("reacting to a Pod change failed")


class NodeRecords:
    """What the plugins grant through and the agent's ledger is written from, built before
    either (`connect`): the node's Pods (`io`, over one watch), the node's allocation state
    (`node`), and the records on their way to the Pods (`journal`, `writer`; `unrecorded`
    lists those that cannot land, and `unlanded` counts their moves)."""

    def __init__(
        self,
        io: KubeNode,
        node: NodeState,
        unlanded: Changes,
        watcher: Watcher | None = None,
        journal: Journal | None = None,
        writer: JournaledWriter | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.io = io
        self.node = node
        self.unlanded = unlanded
        self.watcher = watcher
        self.journal = journal
        self.writer = writer
        self.events = events
        self._recovered = False

    @classmethod
    def connect(
        cls,
        kube: KubeClient,
        node_name: str,
        watch_pods: Kube | None = None,
        journal: Path | None = None,
        env: StartupEnv | None = None,
        record_events: bool = True,
        compact_lines: int = COMPACT_LINES,
    ) -> NodeRecords:
        """With `watch_pods` the Pods come from a watch on this node's Pods (started by the
        plugins' first `publish`). With `journal` (a file on the host) a grant is journaled
        before Allocate answers and its annotation written right after (`journal.py`);
        without, the annotation is written before the answer. `env` carries the switches the
        node state reads (release of finished Pods, the sliced gate). `compact_lines`: the
        journal's length past which it is rewritten with only the records still to write
        (`Journal`); the churn benchmark's short profile lowers it to compact within seconds."""
        watcher = (
            Watcher(watch_pods, "v1", "Pod", field_selector=f"spec.nodeName={node_name}")
            if watch_pods is not None
            else None
        )
        io = KubeNode(kube, node_name, watcher.cache if watcher else None)
        switches = env or StartupEnv()
        events = EventRecorder(kube, EVENTS_CONTROLLER, node_name) if record_events else None
        unlanded = Changes()
        opened = Journal(journal, compact_lines) if journal is not None else None
        writer = (
            JournaledWriter(
                opened, io, io.cached_uid, io.current_uid, events=events, on_stuck=unlanded.bump
            )
            if opened is not None
            else None
        )
        node = NodeState(
            io.spec,
            io,
            writer or io,
            release_terminated=switches.ledger_release_terminated_pods,
            sliced_gate=switches.device_plugin_sliced_allocate_gate,
        )
        return cls(io, node, unlanded, watcher, opened, writer, events)

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


class DevicePlugins:
    """Every plugin server of this node, over the node's shared records (`NodeRecords`)."""

    def __init__(
        self,
        records: NodeRecords,
        table: Mapping[str, Manufacturer],
        plugin_dir: str = protos.DEVICE_PLUGIN_DIR,
        pod_resources_socket: str = protos.POD_RESOURCES_SOCKET,
        pods_dir: str = OPERATOR_PODS_DIR,
        mig_dir: str = OPERATOR_MIG_DIR,
        env: StartupEnv | None = None,
        environ: Mapping[str, str] | None = None,
        device_nodes: DeviceNodes | None = None,
        responders: Mapping[str, Responder] | None = None,
        partition_libraries: Mapping[str, MigNvml] | None = None,
        lib_dir: str = OPERATOR_LIB_DIR,
        on_pods: Callable[[], None] = lambda: None,
        links: Callable[[str, Mapping[str, str]], NodeLinks] = lambda _name, _cards: UNKNOWN_LINKS,
    ) -> None:
        """`partition_libraries` (by manufacturer, the NVML-shaped library each one's
        `Vendor.partition_library` opens) make the hardware partitions; their markers live
        where `Vendor.markers_dir` puts them under `mig_dir`.
        `env` carries the switch of identifying through the kubelet; `environ` the
        per-manufacturer injection strategy (`GPUSTACK_<MFR>_DEVICE_INJECTION_STRATEGY`) and
        where `auto` reads the host. `lib_dir`: where sliced grants mount their isolation
        libraries from (the directory the agent's isolation check reads). `on_pods` is called
        (from a following thread) after the node's Pods changed, or what the journal cannot
        land did: the agent writes the ledger then. `links(manufacturer, cards)`: how that
        manufacturer's cards (card id -> PCI bus id) and the node's RDMA network cards connect
        (the workload plugins' best-connected hint and `NCCL_IB_HCA`), read again whenever
        the Devices spec lists other cards for it; a reading that fails leaves the plain
        packing hint and names no NIC."""
        switches = env or StartupEnv()
        self.records = records
        self.node = records.node
        self.environ: Mapping[str, str] = environ or {}
        self.on_pods = on_pods
        self.links = links
        self._links_read: dict[str, tuple[dict[str, str], NodeLinks]] = {}
        """By manufacturer: the cards its links were last read for, and that reading."""
        self.follower: Follower | None = None
        self.unlanded_follower = Follower(records.unlanded, self._pods_changed, "follow-records")
        """The ledger follows what the journal cannot land, from a thread of its own: the
        writer's threads must not wait for the ledger's API round trips."""
        self.unlanded_follower.start()
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
        """The host's `/dev` as Allocate reads it (a simulated host's nodes in simulation)."""
        self.responders = {**RESPONDERS, **(responders or {})}
        """Each manufacturer's responder (a simulated host replaces those that act on its
        simulated drivers)."""
        self.servers: dict[str, list[PluginServer]] = {}
        # Without an NVML-shaped library (no pynvml, no HGML) partitions cannot be made: no
        # partitioned server for that manufacturer.
        self.partitioners = {
            name: Partitioner(
                library,
                Markers(vendor.markers_dir(mig_dir)),
                naming,
                self._bus_of if naming.by_bus else None,
            )
            for name, library in (partition_libraries or {}).items()
            if (vendor := vendor_named(name)) is not None
            and (naming := vendor.partition_naming) is not None
        }
        self.reclaims: list[ReclaimLoop] = []
        """The partition reclaimers and the slice reclaimers of the manufacturers that have one
        (`Vendor.slice_reclaimer`), each fed every live-Pod set."""

    def _bus_of(self, card: str) -> str:
        """A card's PCI address, for a library that finds cards by it (`ProfileNaming.by_bus`)."""
        for _, found in self.node.spec().cards():
            if found.id == card and found.topology.pci_bus_id:
                return found.topology.pci_bus_id
        raise PartitionError(f"card {card} has no PCI address in this node's Devices spec")

    def start_watching(self) -> None:
        """Follow the node's Pods (a no-op without a Pod watch)."""
        watcher = self.records.watcher
        if watcher is None or self.follower is not None:
            return
        watcher.start()
        self.follower = Follower(watcher.cache, self._pods_changed)
        self.follower.start()

    def _pods_changed(self) -> None:
        self.node.notify()
        self.on_pods()

    def publish(self, detected: frozenset[str]) -> None:
        """Start the servers of newly detected manufacturers; wake the running ones."""
        self.records.recover()
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
                events=self.records.events,
                nodes=self.device_nodes,
                responder=self.responders.get(name),
                lib_dir=self.lib_dir,
                links=partial(self._links_of, name),
            )
            if partitioner is not None:
                self._start_reclaim(name, partitioner)
            responder = self.responders.get(name)
            vendor = vendor_named(name)
            if responder is not None and vendor is not None and vendor.slice_reclaimer:
                reconcile = vendor.slice_reclaimer(
                    responder, self.pods_dir, partial(self._bus_ids, name)
                )
                if reconcile is not None:
                    self._reclaim(reconcile)
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
        (docs/design/node-agent.md, "The reclaimer")."""

        def cards() -> list[str]:
            spec = self.node.spec()
            return [c.id for g, c in spec.cards() if g.manufacturer == maker and c.is_partitioned]

        def live_now() -> frozenset[str]:
            return frozenset(pod.uid for pod in self.node.pods())

        self._reclaim(MigReclaimer(partitioner, cards, live_now=live_now).reconcile)

    def _links_of(self, maker: str) -> NodeLinks:
        """How `maker`'s cards connect, read from the host again only when the node's Devices
        spec lists other cards for it (the plugins start before the first report may have
        written the spec; a hint must not read sysfs each time: the kubelet waits on it)."""
        spec = self.node.spec()
        cards = {
            card.id: card.topology.pci_bus_id
            for group, card in spec.cards()
            if group.manufacturer == maker and card.topology.pci_bus_id
        }
        known = self._links_read.get(maker)
        if known is not None and known[0] == cards:
            return known[1]
        try:
            links = self.links(maker, cards) if cards else UNKNOWN_LINKS
        except Exception as err:  # the links only refine a hint: serve without them
            log.warning("%s: card links not read (%s): plain packing hints", maker, err)
            links = UNKNOWN_LINKS
        self._links_read[maker] = (cards, links)
        return links

    def _bus_ids(self, maker: str) -> list[str]:
        """The PCI addresses of a manufacturer's cards, as the node's Devices spec lists them."""
        spec = self.node.spec()
        return [c.topology.pci_bus_id for g, c in spec.cards() if g.manufacturer == maker]

    def _reclaim(self, reconcile: Callable[[frozenset[str]], object]) -> None:
        loop = ReclaimLoop(reconcile)
        self.node.on_live(loop.broadcast)
        loop.start()
        self.reclaims.append(loop)

    def refresh(self) -> None:
        """The agent just reported: read the spec again, and ListAndWatch lists again."""
        self.records.io.forget_spec()
        self.node.notify()

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        self.unlanded_follower.stop()
        if self.records.watcher is not None:
            self.records.watcher.stop()
        for servers in self.servers.values():
            for server in servers:
                server.stop()
        self.servers.clear()
        for loop in self.reclaims:
            loop.stop()
        self.reclaims.clear()
        writer = self.records.writer
        if writer is not None:
            # Let the records on their first write land before the agent goes; those that
            # failed stay in the journal for the next agent.
            writer.drain(5.0, failing=False)
            writer.stop()
