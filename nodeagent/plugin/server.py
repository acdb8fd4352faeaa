"""One gRPC DevicePlugin server per (manufacturer, mode) on a unix socket
(docs/design/node-agent.md, "Device-plugin resources").

Each server binds `<plugin dir>/<mfr>.<mode>.sock`, then registers with kubelet's Registration
service and keeps watching: kubelet wipes the directory and recreates its own socket when it
restarts, forgetting every plugin, so a changed kubelet socket (inode or mtime) means register
again, and a vanished own socket means bind again first. Registration retries with backoff.

The socket is bound under a fresh name of its own beside it and renamed into place: gRPC
removes the path it bound when its server stops, and two agents of one manufacturer can overlap
on a node (a DaemonSet in another namespace starting while the old one's Pod terminates). Bound
at the endpoint's own path, the old agent's shutdown removed the new agent's socket; its own
socket it still removes on stop, only while the path is that socket (the same inode).

Allocate runs on a worker thread while the RPC thread waits at most the internal deadline; late
work is abandoned (and rolled back by the allocator), so kubelet's admission never hangs on us.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from typing import Any, Protocol

from chain.allocation import Refusal, plugin_socket, served_modes
from chain.ledger import Mode
from chain.manufacturers import Manufacturer
from kubeapi.events import WARNING, EventRecorder
from nodeagent.metrics import ALLOCATE_REFUSALS, ALLOCATE_SECONDS
from nodeagent.plugin import protos
from nodeagent.plugin.allocator import DEFAULT_DEADLINE_S, Advertised, Allocator, Attempt
from nodeagent.plugin.grants import OPERATOR_LIB_DIR, OPERATOR_PODS_DIR, DeviceNodes, Responder
from nodeagent.plugin.identify import KubeletPods
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.mig import Partitioner
from nodeagent.plugin.node import Late, NodeState, RefusedFor
from nodeagent.plugin.partitioned import PARTITION_DEADLINE_S, PartitionedAllocator
from nodeagent.plugin.responders import responder_for
from nodeagent.plugin.response import ContainerResponse
from nodeagent.plugin.visibility import LivePartition, VisibilityAllocator
from nodeagent.plugin.workdirs import WorkDirGC
from nodeagent.topology.choice import UNKNOWN_LINKS, LinksSource

grpc = protos.grpc_runtime()

log = logging.getLogger(__name__)

REFUSED_REASON = "AllocateRefused"
LIST_RETRY_S = 2.0
WATCH_TICK_S = 0.5
GC_PERIOD_S = 1.0
"""The sliced server's work-dir GC runs at most this often: a wake per Allocate would otherwise
list the node's Pods and the work dirs on the Allocate's own path."""
REGISTER_TIMEOUT_S = 5.0


class ModeAllocator(Protocol):
    """What a server needs of one (manufacturer, mode) plugin's decisions: the workload
    modes' `Allocator`, or the `VisibilityAllocator`."""

    @property
    def node(self) -> NodeState: ...

    @property
    def maker(self) -> Manufacturer: ...

    @property
    def mode(self) -> Mode: ...

    @property
    def resource(self) -> str: ...

    def advertised(self) -> list[Advertised]: ...

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]: ...

    def allocate(self, device_ids: Sequence[str], attempt: Attempt) -> ContainerResponse: ...


class DevicePluginService:
    """The `v1beta1.DevicePlugin` methods (grpc calls them by name; `context` is grpc's)."""

    def __init__(
        self,
        allocator: ModeAllocator,
        stopped: threading.Event,
        deadline_s: float = DEFAULT_DEADLINE_S,
        gc: WorkDirGC | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.allocator = allocator
        self.stopped = stopped
        self.deadline_s = deadline_s
        self.gc = gc
        self.events = events
        """Where a refusal becomes an Event on the Pod it was for (kubectl describe pod)."""
        self.workers = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="allocate")
        self._collected_at = float("-inf")

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return protos.deviceplugin().DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        """The full list first, then again whenever it changes. A wake whose list is the one
        last sent sends nothing: kubelet gains nothing from it, and building and sending 1,000
        tokens per stream on every Allocate's wake held the interpreter that Allocate needs."""
        api = protos.deviceplugin()
        node = self.allocator.node
        seen = node.version  # subscribe before the first list, so no change is missed
        sent: list[Advertised] | None = None
        while context.is_active() and not self.stopped.is_set():
            try:
                advertised = self.allocator.advertised()
            except Exception:
                log.exception("cannot list %s devices; retrying", self.allocator.resource)
                self.stopped.wait(LIST_RETRY_S)
                continue
            self._collect()
            if advertised != sent:
                yield api.ListAndWatchResponse(
                    devices=[
                        api.Device(
                            ID=device.id,
                            health=protos.HEALTHY if device.healthy else protos.UNHEALTHY,
                            topology=(
                                api.TopologyInfo(nodes=[api.NUMANode(ID=n) for n in device.numa])
                                if device.numa
                                else None
                            ),
                        )
                        for device in advertised
                    ]
                )
                sent = advertised
            while seen == (now := node.wait_change(seen, WATCH_TICK_S)):
                if not context.is_active() or self.stopped.is_set():
                    return
                # The GC counts misses on idle ticks too: once the last Pods end, nothing may
                # wake the stream again for a monitor period or more, and their work dirs
                # would stay until the node's next change.
                self._collect()
            seen = now

    def _collect(self) -> None:
        """The sliced server's work-dir GC, at most every `GC_PERIOD_S`; a failed Pod list
        counts no misses."""
        if self.gc is None:
            return
        now = time.monotonic()
        if now - self._collected_at < GC_PERIOD_S:
            return
        self._collected_at = now
        try:
            live = {pod.uid for pod in self.allocator.node.pods()}
        except Exception:
            log.exception("cannot list pods; work-dir GC skips this tick")
            return
        for uid in self.gc.tick(live):
            log.info("removed the work dir of gone pod %s", uid)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        api = protos.deviceplugin()
        answers = []
        for asked in request.container_requests[:1]:  # kubelet sends one container per call
            chosen = self.allocator.preferred(
                list(asked.available_deviceIDs),
                list(asked.must_include_deviceIDs),
                asked.allocation_size,
            )
            answers.append(api.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api.PreferredAllocationResponse(container_responses=answers)

    def Allocate(self, request: Any, context: Any) -> Any:
        api = protos.deviceplugin()
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no container request")
        ids = list(request.container_requests[0].devices_ids)
        attempt = Attempt(self.deadline_s)
        # A record written after the answer (the journal's) waits until this RPC has ended.
        answered = self.allocator.node.answering()
        if not context.add_callback(answered):
            answered()
        resource = self.allocator.resource
        started = time.monotonic()
        outcome = "failed"
        try:
            work = self.workers.submit(self.allocator.allocate, ids, attempt)
            try:
                response = work.result(timeout=max(attempt.left(), 0.0))
            except futures.TimeoutError:
                if attempt.abandon():
                    outcome = "late"
                    context.abort(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"allocation did not finish within {self.deadline_s}s",
                    )
                response = work.result()  # it was delivered just as the wait ran out
            except Refusal as refusal:
                outcome = "refused"
                ALLOCATE_REFUSALS.labels(resource, refusal.code.value).inc()
                if isinstance(refusal, RefusedFor) and self.events is not None:
                    note = f"{resource}: {refusal.message}"
                    pod = {**refusal.pod, "apiVersion": "v1", "kind": "Pod"}  # listed: no kind
                    self.events.event(pod, WARNING, REFUSED_REASON, note, action="Allocate")
                context.abort(getattr(grpc.StatusCode, refusal.code.name), refusal.message)
            except Late as late:
                outcome = "late"
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(late))
            outcome = "granted"
            return api.AllocateResponse(container_responses=[response.to_message()])
        finally:
            ALLOCATE_SECONDS.labels(resource, outcome).observe(time.monotonic() - started)

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return protos.deviceplugin().PreStartContainerResponse()


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    info = _stat(path)
    return None if info is None else (info.st_dev, info.st_ino)


def _stamp(path: str) -> tuple[int, int] | None:
    info = _stat(path)
    return None if info is None else (info.st_ino, info.st_mtime_ns)


class PluginServer:
    """Serve one plugin socket and keep it registered with kubelet."""

    def __init__(
        self,
        allocator: ModeAllocator,
        plugin_dir: str = protos.DEVICE_PLUGIN_DIR,
        kubelet_socket: str | None = None,
        poll_s: float = 1.0,
        backoff: tuple[float, float] = (0.1, 5.0),
        deadline_s: float = DEFAULT_DEADLINE_S,
        gc: WorkDirGC | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.allocator = allocator
        self.endpoint = plugin_socket(allocator.maker.name, allocator.mode)
        self.socket_path = os.path.join(plugin_dir, self.endpoint)
        self.kubelet_socket = kubelet_socket or os.path.join(plugin_dir, "kubelet.sock")
        self.poll_s = poll_s
        self.backoff = backoff
        self.stopped = threading.Event()
        self.service = DevicePluginService(allocator, self.stopped, deadline_s, gc, events)
        self.registrations = 0
        self._server: Any = None
        self._bound: tuple[int, int] | None = None
        """(device, inode) of the socket this server put at `socket_path`."""
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self._serve()
        self._watcher = threading.Thread(
            target=self._watch, name=f"register-{self.endpoint}", daemon=True
        )
        self._watcher.start()

    def stop(self) -> None:
        self.stopped.set()
        if self._watcher is not None:
            self._watcher.join()
        if self._server is not None:
            self._server.stop(grace=None)
        if self._bound is not None and _identity(self.socket_path) == self._bound:
            # Ours still (not a newer agent's, renamed over it): the kubelet must not dial a
            # socket nobody serves.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        self._bound = None
        self.service.workers.shutdown(wait=False, cancel_futures=True)

    def _serve(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)  # gRPC removes its own name, gone since the rename
        # A new name per bind, not the process id (each agent may be PID 1 of its container):
        # a stopped server removes its name when its shutdown ends, which may come later.
        name = f".{self.endpoint}.{secrets.token_hex(6)}"
        own = os.path.join(os.path.dirname(self.socket_path), name)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        protos.deviceplugin_grpc().add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{own}")
        server.start()
        # Replaces a stale socket of an earlier run, or an older agent's, in one step.
        os.rename(own, self.socket_path)
        self._bound = _identity(self.socket_path)
        self._server = server

    def register(self) -> None:
        api = protos.deviceplugin()
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            protos.deviceplugin_grpc().RegistrationStub(channel).Register(
                api.RegisterRequest(
                    version=protos.DEVICE_PLUGIN_VERSION,
                    endpoint=self.endpoint,
                    resource_name=self.allocator.resource,
                    options=api.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=REGISTER_TIMEOUT_S,
            )
        self.registrations += 1

    def _watch(self) -> None:
        registered: tuple[int, int] | None = None
        delay = self.backoff[0]
        while not self.stopped.is_set():
            if not os.path.exists(self.socket_path):
                log.info("%s vanished (kubelet restarted?); serving it again", self.socket_path)
                self._serve()
                registered = None
            stamp = _stamp(self.kubelet_socket)
            if stamp is not None and stamp != registered:
                try:
                    self.register()
                except grpc.RpcError as error:
                    log.warning("registering %s failed: %s", self.endpoint, error.code())
                    self.stopped.wait(delay)
                    delay = min(delay * 2, self.backoff[1])
                    continue
                registered, delay = stamp, self.backoff[0]
                log.info("registered %s as %s", self.endpoint, self.allocator.resource)
            self.stopped.wait(self.poll_s)


SERVED_MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.VISIBILITY)
"""The modes served by `Allocator` / `VisibilityAllocator`; Partitioned needs a partitioner."""


def plugin_servers(
    node: NodeState,
    maker: Manufacturer,
    plugin_dir: str = protos.DEVICE_PLUGIN_DIR,
    kubelet: KubeletPods | None = None,
    shared: bool = True,
    sliced: bool = True,
    pods_dir: str = OPERATOR_PODS_DIR,
    partitioner: Partitioner | None = None,
    channel: Channel | None = None,
    events: EventRecorder | None = None,
    nodes: DeviceNodes | None = None,
    responder: Responder | None = None,
    lib_dir: str = OPERATOR_LIB_DIR,
    links: LinksSource = UNKNOWN_LINKS,
) -> list[PluginServer]:
    """One (not yet started) server per mode the manufacturer offers and this package serves;
        the sliced one also collects the per-Pod work dirs its grants create. The partitioned one
        runs only with a `partitioner` (an NVML-shaped library to make MIG instances with: NVML, or
    T-Head's HGML). `links`: how the node's devices connect, for the best-connected hint and
    the RDMA devices a grant names."""
    servers = []
    responder = responder or responder_for(maker.name)
    sliceable = responder is not None and responder.slices
    for mode in served_modes(maker, shared, sliced and sliceable):
        if mode == Mode.PARTITIONED and partitioner is not None:
            partitioned = PartitionedAllocator(
                node, maker, partitioner, kubelet, responder=responder, nodes=nodes
            )
            servers.append(
                PluginServer(
                    partitioned, plugin_dir, deadline_s=PARTITION_DEADLINE_S, events=events
                )
            )
            continue
        if mode not in SERVED_MODES:
            continue
        allocator: ModeAllocator
        if mode == Mode.VISIBILITY:
            allocator = VisibilityAllocator(
                node, maker, kubelet, channel, _live_partitions(partitioner), nodes, responder
            )
        else:
            allocator = Allocator(
                node,
                maker,
                mode,
                kubelet,
                channel,
                pods_dir=pods_dir,
                nodes=nodes,
                responder=responder,
                lib_dir=lib_dir,
                links=links,
            )
        gc = WorkDirGC(pods_dir) if mode == Mode.SLICED else None
        servers.append(PluginServer(allocator, plugin_dir, gc=gc, events=events))
    return servers


def _live_partitions(partitioner: Partitioner | None) -> LivePartition | None:
    """What lets the visibility plugin show a partition-backed owner: the partitioner's
    ownership markers checked against the card's live instances."""
    if partitioner is None:
        return None
    return lambda owner: partitioner.live_partition(owner.pod_uid, owner.container)
