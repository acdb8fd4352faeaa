"""The plugin's I/O over the Kubernetes API: the node's Pods, its `Devices` spec, and the
allocation annotation (a JSON merge patch touching that one key).

Used by `python -m nodeagent serve --device-plugin-dir` (`running.DevicePlugins`). Each call
goes to the API server (no informer cache): correct, but a Pod list per Allocate costs a round
trip inside the 0.8 s budget, so a watch-fed cache is the next step before large nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesSpec
from chain.ledger_rebuild import ALLOCATED_ANNOTATION

Obj = dict[str, Any]


class KubeClient(Protocol):
    """The part of `kubeapi.client.Kube` used here."""

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

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj: ...


class KubeNode:
    """`PodSource`, `AnnotationWriter` and the spec source of one node."""

    def __init__(self, kube: KubeClient, node_name: str) -> None:
        self.kube = kube
        self.node_name = node_name

    def pods(self) -> list[Mapping[str, object]]:
        return list(self.kube.list("v1", "Pod", field_selector=f"spec.nodeName={self.node_name}"))

    def write(self, namespace: str, name: str, value: str) -> None:
        patch: Obj = {"metadata": {"annotations": {ALLOCATED_ANNOTATION: value}}}
        self.kube.merge_patch("v1", "Pod", name, patch, namespace=namespace)

    def spec(self) -> DevicesSpec:
        """The node's `Devices` spec; empty (nothing to advertise) until the agent wrote it."""
        found = self.kube.get(DEVICES_API, DEVICES_KIND, self.node_name)
        return Devices.parse(found).spec if found is not None else DevicesSpec()
