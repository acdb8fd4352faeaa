"""Which container an Allocate call is for (docs/design/node-agent.md, "Which container an Allocate
is for").

Kubelet's request names no Pod, so the plugin guesses: kubelet's pod-resources `List` first (a
container it knows but has not yet given devices of this resource is waiting for them), then the
oldest pending Pod on the node whose container asks for exactly as many devices as offered.

Judgment call: a container counts as already served when this process reserved for it *or* its
Pod's annotation holds a record for it, so a restarted agent does not hand a second grant to a
container whose first one survived only in the annotation; such containers stay last-resort
candidates (a kubelet that lost its checkpoint asks again, and the oldest is replayed). A
served container whose record names exactly the offered device IDs is replayed before the
oldest: kubelet asking again with a container's own IDs means that container, and replaying
another one in its place would move that one's record onto these cards and leave its own
cards charged to nobody (found by the agent-restart test). And a served container that kubelet
reports holding devices of the resource is no candidate at all unless offered its own IDs: the
call is then for a Pod the Pod cache has not shown yet, which a fresh list finds (found by the
sliced e2e test, where a third slice was handed the full card of a replayed first one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chain.ledger_rebuild import Holder, PodAllocations
from chain.quantity import parse_quantity
from nodeagent.plugin import protos
from nodeagent.plugin.node import Pod

grpc = protos.grpc_runtime()

PENDING_PHASES = frozenset({"", "Pending"})
KubeletDevices = dict[tuple[str, str], dict[str, bool]]
"""(namespace, name) -> container -> whether kubelet reports devices of the resource for it."""
KubeletView = KubeletDevices | None | Callable[[], KubeletDevices | None]
"""What kubelet holds, or how to ask it: `identify` asks only when it has to choose."""


class KubeletPods(Protocol):
    def devices(self, resource: str, timeout: float) -> KubeletDevices | None:
        """What kubelet holds per Pod, or None when it cannot be asked."""
        ...


class PodResourcesClient:
    """Kubelet's pod-resources v1 `List` over one kept channel (dialling costs milliseconds on
    the Allocate path); a failed call drops it, so the next dials afresh (kubelet may have
    restarted and made a new socket)."""

    def __init__(self, socket_path: str = protos.POD_RESOURCES_SOCKET) -> None:
        self.socket_path = socket_path
        self._lock = threading.Lock()
        self._channel: Any = None
        self._stub: Any = None

    def _lister(self) -> Any:
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
                self._stub = protos.podresources_grpc().PodResourcesListerStub(self._channel)
            return self._stub

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None

    def devices(self, resource: str, timeout: float) -> KubeletDevices | None:
        api = protos.podresources()
        try:
            answer = self._lister().List(api.ListPodResourcesRequest(), timeout=timeout)
        except grpc.RpcError:
            self.close()
            return None
        found: KubeletDevices = {}
        for pod in answer.pod_resources:
            found[(pod.namespace, pod.name)] = {
                container.name: any(
                    d.resource_name == resource and len(d.device_ids) > 0 for d in container.devices
                )
                for container in pod.containers
            }
        return found


@dataclass(frozen=True)
class Candidate:
    pod: Pod
    allocations: PodAllocations
    container: Mapping[str, object]

    @property
    def holder(self) -> Holder:
        return Holder(self.allocations.uid, str(self.container.get("name", "")))


def container_limit(container: Mapping[str, object], key: str) -> int:
    """A container's whole-number limit on `key` (0 when absent or not whole)."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    raw = limits.get(key) if isinstance(limits, Mapping) else None
    if raw is None:
        return 0
    try:
        value = parse_quantity(str(raw))
    except ValueError:
        return 0
    return int(value) if value.denominator == 1 and value > 0 else 0


def _containers(pod: Pod) -> list[Mapping[str, object]]:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return []
    found: list[Mapping[str, object]] = []
    for key in ("initContainers", "containers"):
        listed = spec.get(key)
        if isinstance(listed, list):
            found.extend(item for item in listed if isinstance(item, Mapping))
    return found


def candidates(pods: Sequence[Pod], resource: str, quantity: int) -> list[Candidate]:
    """Pending Pods' containers asking for exactly `quantity` of `resource`, oldest Pod first."""
    found: list[Candidate] = []
    parsed = [(PodAllocations.from_pod(pod), pod) for pod in pods]
    for allocations, pod in sorted(parsed, key=lambda item: (item[0].created, item[0].name)):
        if allocations.phase not in PENDING_PHASES:
            continue
        for container in _containers(pod):
            if container_limit(container, resource) == quantity:
                found.append(Candidate(pod, allocations, container))
    return found


def _key(candidate: Candidate) -> tuple[str, str]:
    return (candidate.allocations.namespace, candidate.allocations.name)


def replays(candidate: Candidate, offered: Sequence[str]) -> bool:
    """Whether the container's recorded grant holds exactly these device IDs. Kubelet hears of
    a grant only after its record is written, so the annotation is where a replay is seen."""
    record = candidate.allocations.records.get(candidate.holder.container)
    return bool(offered) and record is not None and sorted(record.device_ids) == sorted(offered)


def identify(
    pods: Sequence[Pod],
    resource: str,
    quantity: int,
    kubelet: KubeletView,
    served: Callable[[Candidate], bool],
    feasible: Callable[[Candidate], bool],
    skip: Callable[[Candidate], bool] = lambda _: False,
    offered: Sequence[str] = (),
) -> Candidate:
    """The container this Allocate is for; LookupError when no Pod fits. `skip` leaves a
    container out entirely (the visibility plugin's already granted ones), where `served`
    only ranks it last; among the served, one whose recorded grant names exactly the
    `offered` device IDs goes first (kubelet asking again for that very container).
    Kubelet is asked (a callable `kubelet` called) only when its answer can change the choice:
    two or more containers could be the one, or the one is already served.

    A served container kubelet reports holding devices of this resource, offered other IDs
    than its own, is not the one asking: a Pod bound a moment ago that the Pod cache has not
    shown yet is (the caller then lists afresh). Replaying the served one in its place would
    hand the new Pod that one's card unrecorded, past what the card holds."""
    pool = [c for c in candidates(pods, resource, quantity) if not skip(c)]
    if callable(kubelet):
        asking = len(pool) > 1 or any(served(c) for c in pool)
        kubelet = kubelet() if asking else None
    if kubelet is not None:
        known = kubelet
        pool = [
            c
            for c in pool
            if replays(c, offered) or not known.get(_key(c), {}).get(c.holder.container, False)
        ]
        named = [c for c in pool if _key(c) in known]
        pool = named or pool
    ranked = sorted(
        enumerate(pool),
        key=lambda item: (
            served(item[1]),
            not replays(item[1], offered),
            not feasible(item[1]),
            item[0],
        ),
    )
    if not ranked:
        raise LookupError(f"no pending Pod on this node asks for {quantity} of {resource}")
    return ranked[0][1]
