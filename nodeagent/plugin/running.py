"""The device-plugin servers inside `python -m nodeagent serve --device-plugin-dir DIR`.

The detect loop drives them: `publish` (the set of manufacturers detection found) starts the
servers of each manufacturer served here the first time it appears, and `refresh` (after every
report) wakes their ListAndWatch streams so kubelet sees the `Devices` spec the report just wrote.
The servers read the node's Pods and `Devices` spec and write the allocation annotation through
`KubeNode` (straight API calls, no cache).

Servers stay up when a manufacturer drops out of one detection: a transient miss must not make
kubelet forget every card; the spec (and so the advertised tokens) follows the report instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from chain.manufacturers import Manufacturer
from nodeagent.plugin import protos
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.kube import KubeClient, KubeNode
from nodeagent.plugin.mig import OPERATOR_MIG_DIR, Markers, MigNvml, Partitioner
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.nvidia import MANUFACTURER as NVIDIA
from nodeagent.plugin.nvidia import OPERATOR_PODS_DIR
from nodeagent.plugin.reclaim import MigReclaimer, ReclaimLoop
from nodeagent.plugin.server import PluginServer, plugin_servers

log = logging.getLogger(__name__)

SERVED_MANUFACTURERS = frozenset({"nvidia"})
"""Manufacturers with a container recipe (env, mounts) in this package."""


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
    ) -> None:
        self.io = KubeNode(kube, node_name)
        self.node = NodeState(self.io.spec, self.io, self.io)
        self.table = table
        self.plugin_dir = plugin_dir
        self.kubelet = PodResourcesClient(pod_resources_socket)
        self.pods_dir = pods_dir
        self.servers: dict[str, list[PluginServer]] = {}
        # Without an NVML (no pynvml) MIG instances cannot be made: no partitioned server.
        self.partitioner = Partitioner(nvml, Markers(mig_dir)) if nvml is not None else None
        self.reclaim: ReclaimLoop | None = None

    def publish(self, detected: frozenset[str]) -> None:
        """Start the servers of newly detected manufacturers; wake the running ones."""
        for name in sorted(detected & SERVED_MANUFACTURERS):
            if name in self.servers or name not in self.table:
                continue
            partitioner = self.partitioner if name == NVIDIA else None
            servers = plugin_servers(
                self.node,
                self.table[name],
                self.plugin_dir,
                self.kubelet,
                pods_dir=self.pods_dir,
                partitioner=partitioner,
            )
            if partitioner is not None:
                self._start_reclaim(partitioner)
            started: list[PluginServer] = []
            self.servers[name] = started
            for server in servers:
                server.start()
                started.append(server)
                log.info("serving %s on %s", server.allocator.resource, server.socket_path)
        self.refresh()

    def _start_reclaim(self, partitioner: Partitioner) -> None:
        """The MIG reclaimer, fed every live-Pod set the plugins list (§6.3)."""

        def cards() -> list[str]:
            spec = self.node.spec()
            return [c.id for g, c in spec.cards() if g.manufacturer == NVIDIA and c.is_partitioned]

        self.reclaim = ReclaimLoop(MigReclaimer(partitioner, cards).reconcile)
        self.node.live_listeners.append(self.reclaim.broadcast)
        self.reclaim.start()

    def refresh(self) -> None:
        """The spec or the Pods may have moved: ListAndWatch lists again."""
        self.node.notify()

    def stop(self) -> None:
        for servers in self.servers.values():
            for server in servers:
                server.stop()
        self.servers.clear()
        if self.reclaim is not None:
            self.reclaim.stop()
            self.reclaim = None
