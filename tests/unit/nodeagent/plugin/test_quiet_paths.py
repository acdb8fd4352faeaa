"""What an Allocate no longer pays for (issue: Allocate within 5 ms): ListAndWatch sends only a
changed list, the work-dir GC runs at most once a second, the visibility tokens are built once
per spec, pod-resources is asked over one kept channel and only when it can change the answer,
and the streams are woken only once the call's own work is done."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from nodeagent.plugin.identify import KubeletDevices, PodResourcesClient, identify
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import GC_PERIOD_S, DevicePluginService
from nodeagent.plugin.visibility import VisibilityAllocator
from tests.unit.nodeagent.plugin.fakes import (
    GPU,
    NVIDIA,
    SHARED,
    FakeCluster,
    emulated_kubelet,
    rig,
    t4_spec,
)
from tests.unit.nodeagent.plugin.test_server import CARDS, allocate


def _updates(r: Any, resource: str) -> int:
    endpoint = r.kubelet.wait_endpoint(resource)
    with endpoint.changed:
        return int(endpoint.updates)


def test_a_wake_that_changes_no_list_sends_nothing_and_a_grant_sends_what_it_changed() -> None:
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED)) as r:
        r.ready()
        time.sleep(0.3)
        before = {res: _updates(r, res) for res in (GPU, SHARED)}
        for _ in range(5):
            r.node.notify()
            time.sleep(0.05)
        time.sleep(0.6)  # past a watch tick: any resend would have arrived
        assert {res: _updates(r, res) for res in (GPU, SHARED)} == before

        r.cluster.add("one", ("main", {GPU: "1"}))
        allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[0]}:0000"])
        r.kubelet.wait_devices(SHARED, lambda d: any(h != "Healthy" for h in d.values()))
        time.sleep(0.6)
        assert _updates(r, SHARED) == before[SHARED] + 1  # the card's shares went Unhealthy
        assert _updates(r, GPU) == before[GPU]  # its own mode lists it as before


def test_streams_are_woken_only_after_the_grant_is_written() -> None:
    """And only once the answer has left: the server wakes them from gRPC's termination
    callback, which may run a moment after the caller has its answer."""
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.ready()
        r.cluster.add("one", ("main", {GPU: "1"}))
        seen: list[int] = []
        write = r.cluster.write

        def watched(namespace: str, name: str, value: str) -> None:
            seen.append(r.node.version)
            write(namespace, name, value)

        r.node.writer = type("Writer", (), {"write": staticmethod(watched)})()
        before = r.node.version
        allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[1]}:0000"])
        assert seen == [before]  # nobody woken while the call still wrote
        assert r.node.wait_change(before, 5.0) > before
        assert "main" in parse_allocated(r.cluster.annotation("one"))


class _Ticks:
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self, live: Any) -> list[str]:
        self.ticks += 1
        return []


class _Allocator:
    def __init__(self) -> None:
        self.node = NodeState(t4_spec, FakeCluster(), FakeCluster())


def test_the_work_dir_gc_runs_at_most_once_per_period() -> None:
    gc = _Ticks()
    service = DevicePluginService(_Allocator(), stopped=None, gc=gc)  # type: ignore[arg-type]
    for _ in range(10):
        service._collect()
    assert gc.ticks == 1
    service._collected_at -= GC_PERIOD_S
    service._collect()
    assert gc.ticks == 2


def test_visibility_tokens_are_built_once_per_spec_object() -> None:
    specs = [t4_spec()]
    node = NodeState(lambda: specs[-1], FakeCluster(), FakeCluster())
    plugin = VisibilityAllocator(node, NVIDIA)
    first = plugin.advertised()
    assert len(first) == 4 * 512
    assert plugin.advertised() is first
    specs.append(t4_spec())  # the agent reported again: a new spec object
    assert plugin.advertised() is not first
    assert plugin.advertised() == first


def _pod(name: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {GPU: "1"}}}]},
        "status": {"phase": "Pending", "startTime": created},
    }


def test_kubelet_is_asked_only_when_two_containers_could_be_the_one() -> None:
    asked: list[int] = []

    def kubelet() -> KubeletDevices | None:
        asked.append(1)
        return {("ns", "b"): {"main": False}}

    def pick(pods: Sequence[dict[str, Any]]) -> str:
        found = identify(pods, GPU, 1, kubelet, lambda _: False, lambda _: True)
        return str(found.allocations.name)

    assert pick([_pod("a", "2026-12-01T00:00:00Z")]) == "a"
    assert asked == []
    assert pick([_pod("a", "2026-12-01T00:00:00Z"), _pod("b", "2026-12-01T00:00:01Z")]) == "b"
    assert asked == [1]


def test_pod_resources_keeps_one_channel_and_drops_it_after_a_failure() -> None:
    with emulated_kubelet() as kubelet:
        client = PodResourcesClient(str(kubelet.pod_resources_socket))
        assert client.devices(GPU, 2.0) == {}
        lister = client._stub
        assert lister is not None
        assert client.devices(GPU, 2.0) == {}
        assert client._stub is lister
        client.close()
    gone = PodResourcesClient(str(Path("/tmp/no-such-kubelet") / "kubelet.sock"))
    assert gone.devices(GPU, 0.2) is None
    assert gone._stub is None  # the next call dials afresh
