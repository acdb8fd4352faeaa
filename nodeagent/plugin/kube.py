"""The plugin's I/O over the Kubernetes API: the node's Pods, its `Devices` spec, and the
allocation annotation (a JSON merge patch touching that one key).

Used by `python -m nodeagent serve --device-plugin-dir` (`running.DevicePlugins`). Every
Allocate, hint and ListAndWatch tick reads the Pods and the spec, so neither is a round trip:
- the Pods come from a watch-fed cache (`kubeapi.watch`, field selector `spec.nodeName`) once it
  has listed; before that, and when the cache names no container for a call, from a fresh list;
- the spec is read once and kept until `forget_spec`: this agent writes it itself, and the
  plugins forget it after every report (another manufacturer's agent writes only its own
  groups, which these plugins never serve).
The annotation write is the one API call left on the Allocate path, unless the allocation
journal takes it off (`journal`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesSpec
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from kubeapi.events import EventsClient
from kubeapi.watch import Cache

Obj = dict[str, Any]


class KubeClient(EventsClient, Protocol):
    """The part of `kubeapi.client.Kube` used here (and by the Event recorder)."""

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None: ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]: ...


class KubeNode:
    """`PodSource` (cached), `AnnotationWriter` and the spec source of one node."""

    def __init__(self, kube: KubeClient, node_name: str, pods: Cache | None = None) -> None:
        self.kube = kube
        self.node_name = node_name
        self.cache = pods
        self._spec: DevicesSpec | None = None
        self._spec_lock = threading.Lock()
        self._spec_generation = 0

    @property
    def pod_selector(self) -> str:
        return f"spec.nodeName={self.node_name}"

    def pods(self) -> Sequence[Mapping[str, object]]:
        if self.cache is not None and self.cache.synced:
            return self.cache.items()
        return self.fresh_pods()

    def fresh_pods(self) -> list[Mapping[str, object]]:
        return list(self.kube.list("v1", "Pod", field_selector=self.pod_selector))

    def write(self, namespace: str, name: str, value: str) -> None:
        patch: Obj = {"metadata": {"annotations": {ALLOCATED_ANNOTATION: value}}}
        self.kube.merge_patch("v1", "Pod", name, patch, namespace=namespace)

    def cached_uid(self, namespace: str, name: str) -> str:
        """The uid of a Pod of this node as listed now ("" when it is not listed)."""
        for pod in self.pods():
            meta = pod.get("metadata")
            if isinstance(meta, Mapping) and (meta.get("namespace"), meta.get("name")) == (
                namespace,
                name,
            ):
                return str(meta.get("uid", ""))
        return ""

    def current_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the Pod of that name, read from the API server now (None: gone)."""
        found = self.kube.get("v1", "Pod", name, namespace)
        return None if found is None else str((found.get("metadata") or {}).get("uid", ""))

    def spec(self) -> DevicesSpec:
        """The node's `Devices` spec; empty (nothing to advertise, and not kept) until the
        agent wrote it."""
        with self._spec_lock:
            if self._spec is not None:
                return self._spec
            generation = self._spec_generation
        found = self.kube.get(DEVICES_API, DEVICES_KIND, self.node_name)
        if found is None:
            return DevicesSpec()
        spec = Devices.parse(found).spec
        with self._spec_lock:
            # A report that landed during the read may have made this one stale: keep it
            # only if nothing was forgotten meanwhile.
            if generation == self._spec_generation:
                self._spec = spec
        return spec

    def forget_spec(self) -> None:
        """The agent just reported: read the spec again on the next call."""
        with self._spec_lock:
            self._spec = None
            self._spec_generation += 1
