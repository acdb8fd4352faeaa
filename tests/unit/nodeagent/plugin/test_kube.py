"""The plugin's Kubernetes I/O against a recording fake client."""

from __future__ import annotations

from typing import Any

from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesSpec
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from kubeapi.watch import Cache
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


def test_pods_come_from_the_cache_once_it_listed() -> None:
    kube = FakeKube()
    cache = Cache()
    node = KubeNode(kube, "node-a", cache)
    assert node.pods() == [{"metadata": {"name": "p"}}]  # not listed yet: the API answers
    cached = {"metadata": {"namespace": "ns", "name": "q"}}
    cache.replace([cached], "7")
    kube.calls.clear()
    assert node.pods() == [cached]
    assert kube.calls == []
    assert node.fresh_pods() == [{"metadata": {"name": "p"}}]
    assert kube.calls == [("list", "v1", "Pod", "spec.nodeName=node-a")]


def test_the_spec_is_kept_until_the_agent_reports_again() -> None:
    spec = t4_spec()
    kube = FakeKube(None)
    node = KubeNode(kube, "node-a")
    assert node.spec() == DevicesSpec()  # not written yet: asked again next time
    kube.devices = Devices("node-a", spec).render()
    assert node.spec() == spec
    assert node.spec() == spec
    assert len(kube.calls) == 2
    node.forget_spec()
    assert node.spec() == spec
    assert len(kube.calls) == 3


def test_a_spec_read_overtaken_by_a_report_is_not_kept() -> None:
    spec = t4_spec()
    node: KubeNode

    class Racing(FakeKube):
        def get(
            self, api_version: str, kind: str, name: str, namespace: str | None = None
        ) -> dict[str, Any] | None:
            found = super().get(api_version, kind, name, namespace)
            if len(self.calls) == 1:
                node.forget_spec()  # the agent reported while this read was on the wire
            return found

    kube = Racing(Devices("node-a", spec).render())
    node = KubeNode(kube, "node-a")
    assert node.spec() == spec
    assert node.spec() == spec
    assert len(kube.calls) == 2  # the first answer was not kept
