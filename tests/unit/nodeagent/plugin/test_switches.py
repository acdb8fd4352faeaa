"""Every documented switch of the device plugin reaches the plugins `nodeagent serve` starts
(docs/design/node-agent.md, "Switches"): the release of finished Pods, the sliced gate, identifying
through the kubelet, and the per-manufacturer injection strategy, CDI included."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from chain.manufacturers import manufacturers
from chain.settings import StartupEnv
from nodeagent.plugin.injection import CDI_ANNOTATION_PREFIX, Strategy
from nodeagent.plugin.running import DevicePlugins, NodeRecords
from testbed.kubelet import KubeletEmulator
from tests.unit.nodeagent.plugin.fakes import FakeCluster, FakeKube, t4_spec

GPU = "nvidia.com/gpu"


@contextmanager
def served(
    env: StartupEnv, environ: Mapping[str, str]
) -> Iterator[tuple[KubeletEmulator, FakeCluster, DevicePlugins]]:
    root = Path(tempfile.mkdtemp(prefix="ksw", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    cluster = FakeCluster()
    plugins = DevicePlugins(
        NodeRecords.connect(FakeKube(cluster, t4_spec()), "node-a", env=env),
        manufacturers({}),
        str(kubelet.plugin_dir),
        str(kubelet.pod_resources_socket),
        str(root / "pods"),
        env=env,
        environ=environ,
    )
    try:
        plugins.publish(frozenset({"nvidia"}))
        kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        yield kubelet, cluster, plugins
    finally:
        plugins.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_defaults_release_gate_and_ask_the_kubelet() -> None:
    with served(StartupEnv(), {}) as (_, _, plugins):
        assert plugins.node.release_terminated and plugins.node.sliced_gate
        assert plugins.kubelet is not None


def test_switched_off_they_reach_the_node_state_and_the_kubelet_client() -> None:
    env = StartupEnv(
        ledger_release_terminated_pods=False,
        device_plugin_sliced_allocate_gate=False,
        device_plugin_identify_by_kubelet=False,
    )
    with served(env, {}) as (_, _, plugins):
        assert not plugins.node.release_terminated
        assert not plugins.node.sliced_gate
        assert plugins.kubelet is None  # the heuristic alone


def test_cdi_annotations_reach_the_container_instead_of_the_env_var() -> None:
    """With `cdi-annotations`, a grant answers with the CDI annotation a CDI-enabled runtime
    resolves (`cdi.k8s.io/<key>: nvidia.com/gpu=<uuid>`) and no visibility env var."""
    environ = {"GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY": Strategy.CDI_ANNOTATIONS.value}
    with served(StartupEnv(), environ) as (kubelet, cluster, _):
        kubelet.admit(cluster.add("train", ("main", {GPU: "1"})))
        _, _, response = kubelet.responses[-1]
        assert "NVIDIA_VISIBLE_DEVICES" not in response.envs
        [(key, value)] = response.annotations.items()
        assert key == CDI_ANNOTATION_PREFIX + "nvidia"
        assert value.startswith("nvidia.com/gpu=GPU-")


def test_by_default_the_env_var_carries_the_cards() -> None:
    with served(StartupEnv(), {}) as (kubelet, cluster, _):
        kubelet.admit(cluster.add("train", ("main", {GPU: "1"})))
        _, _, response = kubelet.responses[-1]
        assert response.envs["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
        assert not response.annotations
