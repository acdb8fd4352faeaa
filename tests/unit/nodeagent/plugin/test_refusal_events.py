"""An Allocate refusal for a container the plugin identified is a Warning Event on its Pod (what
`kubectl describe pod` shows), not only a line in the agent's log."""

from __future__ import annotations

import pytest

from kubeapi.events import EventRecorder
from nodeagent.plugin import protos
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import plugin_servers
from tests.unit.nodeagent.plugin.fakes import (
    GPU,
    NVIDIA,
    SHARED,
    FakeCluster,
    FakeKube,
    emulated_kubelet,
    t4_spec,
)

grpc = protos.grpc_runtime()


def test_a_cross_mode_refusal_is_an_event_on_the_pod() -> None:
    spec = t4_spec()
    cluster = FakeCluster()
    node = NodeState(lambda: spec, cluster, cluster)
    recorder = EventRecorder(FakeKube(cluster, spec), "gpustack.ai/node-agent", "node-a")
    with emulated_kubelet() as kubelet:
        servers = plugin_servers(
            node,
            NVIDIA,
            str(kubelet.plugin_dir),
            None,
            pods_dir=str(kubelet.plugin_dir.parent / "pods"),
            events=recorder,
        )
        try:
            for server in servers:
                server.start()
            kubelet.wait_devices(GPU, lambda d: len(d) == 4)
            api = protos.deviceplugin()
            group, card = next(iter(spec.cards()))
            cluster.add("first", ("main", {GPU: "1"}))
            kubelet.wait_endpoint(GPU).stub.Allocate(
                api.AllocateRequest(
                    container_requests=[
                        api.ContainerAllocateRequest(devices_ids=[f"{group.id}:{card.id}:0000"])
                    ]
                ),
                timeout=10,
            )
            cluster.add("second", ("main", {SHARED: "1"}))
            with pytest.raises(grpc.RpcError):
                kubelet.wait_endpoint(SHARED).stub.Allocate(
                    api.AllocateRequest(
                        container_requests=[
                            api.ContainerAllocateRequest(
                                devices_ids=[f"{group.id}:{card.id}:20160000"]
                            )
                        ]
                    ),
                    timeout=10,
                )
            assert recorder.drain(5)
            [event] = cluster.events
            assert event["regarding"]["kind"] == "Pod" and event["regarding"]["name"] == "second"
            assert (event["type"], event["reason"]) == ("Warning", "AllocateRefused")
            assert event["note"].startswith("nvidia.com/gpu.shared: card ")
            assert "is held in Exclusive mode" in event["note"]
        finally:
            for server in servers:
                server.stop()
