"""The KV cache injection webhook on the testbed, through the real API server: a KVCachePool
reaches the webhook through the catalog decorator's ConfigMap, a labelled vLLM Pod comes back
with the connector argument and the injected record, and a shell's `-c` launch is refused with
the reason."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubeapi import KubeError, Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from tests.e2e.conftest import scratch_namespace

WORKER = "worker.gpustack.ai/v1alpha1"


@pytest.fixture
def kv_pool(testbed: Testbed, chain: Installed) -> Iterator[tuple[str, str]]:
    kube = testbed.kube
    name = f"kv-{uuid.uuid4().hex[:6]}"
    kube.create(
        {
            "apiVersion": WORKER,
            "kind": "KVCachePool",
            "metadata": {"name": name},
            "spec": {
                "endpoint": "10.0.0.5:50051",
                "groups": [{"name": "dram", "transport": "rdma"}],
            },
        }
    )
    try:
        with scratch_namespace(testbed, "kv") as namespace:
            yield name, namespace
    finally:
        kube.delete(WORKER, "KVCachePool", name)


def _pod(name: str, namespace: str, pool: str, command: list[str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kvcache.gpustack.ai/inject": "true"},
            "annotations": {
                "kvcache.gpustack.ai/pool": pool,
                "kvcache.gpustack.ai/engine": "vllm",
            },
        },
        "spec": {
            "containers": [{"name": "engine", "image": "vllm/vllm-openai", "command": command}]
        },
    }


def test_a_vllm_pod_is_injected_and_a_shell_launch_is_refused(
    testbed: Testbed, kv_pool: tuple[str, str]
) -> None:
    kube = testbed.kube
    pool, namespace = kv_pool

    def created() -> Any:
        try:
            return kube.create(_pod("chat", namespace, pool, ["vllm", "serve", "m"]))
        except KubeError as error:
            if "is not known to the webhook yet" in error.message:
                return None
            raise

    pod = wait_for(created, 60, "the webhook to know the pool")
    (engine,) = pod["spec"]["containers"]
    assert engine["args"][0] == "--kv-transfer-config"
    record = json.loads(pod["metadata"]["annotations"]["kvcache.gpustack.ai/injected"])
    assert (record["pool"], record["launchProgram"], record["launchArgsForwarded"]) == (
        pool,
        "vllm",
        False,
    )
    with pytest.raises(KubeError) as refused:
        kube.create(_pod("shell", namespace, pool, ["sh", "-c", "vllm serve m"]))
    assert "through a shell's -c" in refused.value.message
