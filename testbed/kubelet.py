"""A kubelet stand-in for device-plugin tests, the demo and the Allocate benchmark.

It serves Registration on `<root>/device-plugins/kubelet.sock` and pod-resources v1 (`List`,
`GetAllocatableResources`) on `<root>/pod-resources/kubelet.sock`, dials each plugin that
registers, follows its ListAndWatch, and admits Pods the way kubelet does: one Pod at a time,
one Allocate call per container and resource, after a GetPreferredAllocation hint it checks
against what it offered. Everything it saw is recorded for its callers to read.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeapi import Kube
from nodeagent.plugin import protos
from testbed import standin

grpc = protos.grpc_runtime()
Pod = Mapping[str, Any]


class AdmissionError(Exception):
    """Kubelet's `UnexpectedAdmissionError`: the plugin refused (final for the Pod)."""

    def __init__(self, container: str, resource: str, code: Any, details: str) -> None:
        super().__init__(f"{container} {resource}: {code} {details}")
        self.container = container
        self.resource = resource
        self.code = code
        self.details = details


@dataclass
class Endpoint:
    """One registered plugin, as kubelet keeps it."""

    resource: str
    socket: str
    channel: Any
    stub: Any
    options: Any
    devices: dict[str, str] = field(default_factory=dict)
    numa: dict[str, tuple[int, ...]] = field(default_factory=dict)
    updates: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)


def _containers(pod: Pod) -> list[Mapping[str, Any]]:
    spec = pod.get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


class KubeletEmulator:
    def __init__(self, root: Path) -> None:
        self.plugin_dir = root / "device-plugins"
        self.pod_resources_socket = root / "pod-resources" / "kubelet.sock"
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
        self.registrations: list[tuple[str, str]] = []
        """(resource, endpoint) per Register call."""
        self.endpoints: dict[str, Endpoint] = {}
        self.assigned: dict[str, dict[str, tuple[str, str]]] = {}
        """resource -> device ID -> (pod uid, container)."""
        self.known: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        """(namespace, name) -> container -> resource -> device IDs (pod-resources' view)."""
        self.responses: list[tuple[str, str, Any]] = []
        """(container, resource, ContainerAllocateResponse) per successful Allocate."""
        self.allocate_seconds: list[float] = []
        """Wall time of each successful Allocate call, the span kubelet's
        `kubelet_device_plugin_alloc_duration_seconds` observes."""
        self.hints: list[tuple[str, list[str]]] = []
        self._admit = threading.Lock()
        self._registered = threading.Condition()
        self._registration: Any = None
        self._pod_resources = self._serve(
            self.pod_resources_socket,
            lambda server: protos.podresources_grpc().add_PodResourcesListerServicer_to_server(
                _PodResources(self), server
            ),
        )
        self.start_registration()

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def agent_flags(self, pods_dir: Path, profile: str = "") -> list[str]:
        """The `nodeagent serve` flags that point an agent's device plugins at this kubelet;
        with the simulated `profile`, also at the stand-in isolation libraries its slices need
        (testbed/standin.py), staged beside the pods dir as a node's own would be."""
        flags = [
            "--device-plugin-dir",
            str(self.plugin_dir),
            "--pod-resources-socket",
            str(self.pod_resources_socket),
            "--pods-dir",
            str(pods_dir),
        ]
        if profile:
            lib_dir = pods_dir.parent / "lib"
            standin.stage(lib_dir, profile)
            flags += ["--lib-dir", str(lib_dir)]
        return flags

    def _serve(self, socket: Path, add: Callable[[Any], None]) -> Any:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        add(server)
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        return server

    def start_registration(self) -> None:
        self._registration = self._serve(
            self.kubelet_socket,
            lambda server: protos.deviceplugin_grpc().add_RegistrationServicer_to_server(
                _Registration(self), server
            ),
        )

    def restart(self) -> None:
        """Kubelet restarts as the real one does: it forgets the plugins' endpoints and deletes
        every socket in the directory (its own, the plugins'), but keeps its checkpoint file and
        what it allocated to admitted Pods."""
        self._registration.stop(grace=None)
        for endpoint in self.endpoints.values():
            endpoint.channel.close()
        self.endpoints.clear()
        for entry in os.listdir(self.plugin_dir):
            path = self.plugin_dir / entry
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
        self.start_registration()

    def stop(self) -> None:
        self._registration.stop(grace=None)
        self._pod_resources.stop(grace=None)
        for endpoint in self.endpoints.values():
            endpoint.channel.close()

    # --- plugins ----------------------------------------------------------------------------

    def connect(self, resource: str, endpoint: str) -> None:
        socket = str(self.plugin_dir / endpoint)
        channel = grpc.insecure_channel(f"unix://{socket}")
        stub = protos.deviceplugin_grpc().DevicePluginStub(channel)
        try:
            options = stub.GetDevicePluginOptions(protos.deviceplugin().Empty(), timeout=10)
        except grpc.RpcError:
            # The plugin went away between registering and being asked (a test tearing its
            # agent down): the kubelet drops such a registration the same way.
            channel.close()
            return
        found = Endpoint(resource, socket, channel, stub, options)
        with self._registered:
            self.endpoints[resource] = found
            self._registered.notify_all()
        threading.Thread(target=self._follow, args=(found,), daemon=True).start()

    def _follow(self, endpoint: Endpoint) -> None:
        try:
            for answer in endpoint.stub.ListAndWatch(protos.deviceplugin().Empty()):
                with endpoint.changed:
                    endpoint.devices = {d.ID: d.health for d in answer.devices}
                    endpoint.numa = {
                        d.ID: tuple(n.ID for n in d.topology.nodes) for d in answer.devices
                    }
                    endpoint.updates += 1
                    endpoint.changed.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away or kubelet closed the channel
        except ValueError:
            # The channel was closed (a re-registration replaced it, or the emulator stopped)
            # before this thread made its call: grpc says so with a ValueError, not an RpcError.
            pass

    def wait_endpoint(self, resource: str, timeout: float = 10.0) -> Endpoint:
        with self._registered:
            if not self._registered.wait_for(lambda: resource in self.endpoints, timeout):
                raise TimeoutError(f"{resource} never registered")
            return self.endpoints[resource]

    def wait_devices(
        self, resource: str, test: Callable[[dict[str, str]], bool], timeout: float = 10.0
    ) -> dict[str, str]:
        endpoint = self.wait_endpoint(resource, timeout)
        with endpoint.changed:
            if not endpoint.changed.wait_for(lambda: test(endpoint.devices), timeout):
                raise TimeoutError(f"{resource} devices stayed {endpoint.devices}")
            return dict(endpoint.devices)

    # --- admission ----------------------------------------------------------------------------

    def admit(self, pod: Pod) -> None:
        """Admit one Pod: every container's device resources, in order (AdmissionError)."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._admit:
            self.known[key] = {}
            try:
                for container in _containers(pod):
                    limits = container.get("resources", {}).get("limits", {})
                    for resource, quantity in limits.items():
                        if resource in self.endpoints:
                            self._allocate(key, meta["uid"], container["name"], resource, quantity)
            except AdmissionError:
                self.forget(pod)
                raise

    def forget(self, pod: Pod) -> None:
        """The Pod is gone (or failed admission): its devices go back to the pool."""
        meta = pod["metadata"]
        self.known.pop((meta["namespace"], meta["name"]), None)
        for owners in self.assigned.values():
            for device in [d for d, (uid, _) in owners.items() if uid == meta["uid"]]:
                del owners[device]

    def _allocate(
        self, key: tuple[str, str], uid: str, container: str, resource: str, quantity: object
    ) -> None:
        api = protos.deviceplugin()
        endpoint = self.endpoints[resource]
        size = int(str(quantity))
        taken = self.assigned.setdefault(resource, {})
        with endpoint.changed:
            free = sorted(d for d, h in endpoint.devices.items() if h == protos.HEALTHY)
        free = [d for d in free if d not in taken]
        if len(free) < size:
            raise AdmissionError(container, resource, "Insufficient", f"{len(free)} free")
        chosen = free[:size]
        preferred: list[str] = []
        if endpoint.options.get_preferred_allocation_available:
            hint = endpoint.stub.GetPreferredAllocation(
                api.PreferredAllocationRequest(
                    container_requests=[
                        api.ContainerPreferredAllocationRequest(
                            available_deviceIDs=free, allocation_size=size
                        )
                    ]
                ),
                timeout=10,
            )
            preferred = list(hint.container_responses[0].deviceIDs)
            self.hints.append((container, preferred))
            if len(preferred) == size and set(preferred) <= set(free):
                chosen = preferred
        started = time.perf_counter()
        try:
            answer = endpoint.stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=chosen)]
                ),
                timeout=30,  # the caller's guard; kubelet itself sets none
            )
        except grpc.RpcError as error:
            # What this kubelet saw when it chose: a refusal is read against the offer.
            seen = f" (offered {free}, hinted {preferred}, chose {chosen})"
            details = error.details() + seen
            raise AdmissionError(container, resource, error.code(), details) from None
        self.allocate_seconds.append(time.perf_counter() - started)
        for device in chosen:
            taken[device] = (uid, container)
        self.known[key].setdefault(container, {})[resource] = chosen
        self.responses.append((container, resource, answer.container_responses[0]))


def delete_ended(kube: Kube, pod: Pod) -> None:
    """Remove a bound Pod whose containers ended, as kubelet finally does (grace 0): without a
    kubelet to confirm, a plain delete leaves it terminating, and still holding its cards."""
    meta = pod["metadata"]
    kube.request(
        "DELETE",
        kube.resource("v1", "Pod").path(meta["namespace"], meta["name"]),
        body={"gracePeriodSeconds": 0},
        ok_missing=True,
    )


class _Registration:
    def __init__(self, kubelet: KubeletEmulator) -> None:
        self.kubelet = kubelet

    def Register(self, request: Any, context: Any) -> Any:
        self.kubelet.registrations.append((request.resource_name, request.endpoint))
        # Kubelet answers first and dials the plugin afterwards.
        threading.Thread(
            target=self.kubelet.connect,
            args=(request.resource_name, request.endpoint),
            daemon=True,
        ).start()
        return protos.deviceplugin().Empty()


class _PodResources:
    def __init__(self, kubelet: KubeletEmulator) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:
        api = protos.podresources()
        return api.ListPodResourcesResponse(
            pod_resources=[
                api.PodResources(
                    namespace=namespace,
                    name=name,
                    containers=[
                        api.ContainerResources(
                            name=container,
                            devices=[
                                api.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in held.items()
                            ],
                        )
                        for container, held in containers.items()
                    ],
                )
                for (namespace, name), containers in list(self.kubelet.known.items())
            ]
        )

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        api = protos.podresources()
        return api.AllocatableResourcesResponse(
            devices=[
                api.ContainerDevices(
                    resource_name=resource,
                    device_ids=sorted(d for d, h in e.devices.items() if h == protos.HEALTHY),
                )
                for resource, e in list(self.kubelet.endpoints.items())
            ]
        )

    def Get(self, request: Any, context: Any) -> Any:
        # Behind a feature gate in kubelet; the plugin never asks, so only List's view is given.
        listed = self.List(request, context)
        for pod in listed.pod_resources:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return protos.podresources().GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, "pod not found")
