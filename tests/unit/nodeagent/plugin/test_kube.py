"""The plugin's Kubernetes I/O against a recording fake client."""

from __future__ import annotations

from typing import Any

from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesSpec
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from nodeagent.plugin.kube import KubeNode
from tests.unit.nodeagent.plugin.fakes import t4_spec


class FakeKube:
    def __init__(self, devices: dict[str, Any] | None = None) -> None:
        self.devices = devices
        self.calls: list[tuple[Any, ...]] = []

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        self.calls.append(("get", api_version, kind, name))
        return self.devices

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        self.calls.append(("list", api_version, kind, field_selector))
        return [{"metadata": {"name": "p"}}]

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self.calls.append(("patch", kind, namespace, name, patch))
        return {}


def test_pods_are_listed_by_node_and_the_annotation_merge_patched() -> None:
    kube = FakeKube()
    node = KubeNode(kube, "node-a")
    assert node.pods() == [{"metadata": {"name": "p"}}]
    node.write("ns", "p", '{"main":{}}')
    assert kube.calls == [
        ("list", "v1", "Pod", "spec.nodeName=node-a"),
        (
            "patch",
            "Pod",
            "ns",
            "p",
            {"metadata": {"annotations": {ALLOCATED_ANNOTATION: '{"main":{}}'}}},
        ),
    ]


def test_spec_comes_from_the_devices_object_named_after_the_node() -> None:
    spec = t4_spec()
    kube = FakeKube(Devices("node-a", spec).render())
    assert KubeNode(kube, "node-a").spec() == spec
    assert kube.calls == [("get", DEVICES_API, DEVICES_KIND, "node-a")]
    assert KubeNode(FakeKube(None), "node-a").spec() == DevicesSpec()
