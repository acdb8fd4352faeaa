"""The Pod webhook on the real API server, through the shipped webhook configuration."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from chain.names import local_queue_name
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kube import KubeError, Obj, wait_for

QUEUE = local_queue_name("gpustack--nvidia-tesla-t4-linux-amd64")


def _pod(name: str, limits: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": limits, "requests": limits},
                }
            ]
        },
    }


@pytest.fixture
def namespace(testbed: Testbed, chain: Installed) -> Iterator[str]:
    kube = testbed.kube
    name = f"pods-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The ServiceAccount admission plugin needs the namespace's default account first.
    wait_for(lambda: kube.get("v1", "ServiceAccount", "default", name), 60, "the default SA")
    yield name
    kube.delete("v1", "Namespace", name)


def test_slice_rules_deny_with_an_actionable_message(testbed: Testbed, namespace: str) -> None:
    kube = testbed.kube
    bad = _pod("no-memory", {"nvidia.com/gpu.sliced": "1"})
    bad["metadata"]["namespace"] = namespace
    with pytest.raises(KubeError) as denied:
        kube.create(bad)
    assert "memory-percentage" in denied.value.message and "memory-mib" in denied.value.message

    two = _pod(
        "two-cards", {"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "20"}
    )
    two["metadata"]["namespace"] = namespace
    with pytest.raises(KubeError) as denied:
        kube.create(two)
    assert "a logical slice request is always a single card" in denied.value.message


def test_percentage_slice_is_folded_into_units(testbed: Testbed, namespace: str) -> None:
    kube = testbed.kube
    pod = _pod(
        "twenty-percent",
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"},
    )
    pod["metadata"]["namespace"] = namespace
    created = kube.create(pod)
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "320k"  # 20 % of 1,600,000, as Kubernetes
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"  # defaulted
