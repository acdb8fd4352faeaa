"""InstanceType admission on the real API server, through the shipped webhook configurations."""

from __future__ import annotations

import uuid

import pytest

from kubeapi import KubeError
from testbed.harness import Testbed
from testbed.install import Installed

WORKER = "worker.gpustack.ai/v1alpha1"


def instance_type(name: str, **spec: object) -> dict[str, object]:
    base = {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-l4",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "32Gi"},
        "localStorage": "100Gi",
    }
    return {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


def test_defaulting_and_validation(testbed: Testbed, chain: Installed) -> None:
    kube = testbed.kube
    name = f"gpustack--e2e-{uuid.uuid4().hex[:6]}"
    created = kube.create(instance_type(name))
    try:
        labels = created["metadata"]["labels"]
        assert created["spec"]["generalGroup"] == "generic"
        assert labels["acceleratable.feature.gpustack.ai/nvidia-l4"] == "true"
        assert labels["schedule.gpustack.ai/queue-entrance"].startswith("gpustack-fnv64-")

        # Editable: displayName, inactive.
        kube.merge_patch(WORKER, "InstanceType", name, {"spec": {"inactive": True}})
        # Frozen: the rest, with a message that says what to do.
        with pytest.raises(KubeError) as denied:
            kube.merge_patch(WORKER, "InstanceType", name, {"spec": {"os": "windows"}})
        assert "immutable except displayName and inactive" in denied.value.message
    finally:
        kube.delete(WORKER, "InstanceType", name)

    with pytest.raises(KubeError) as denied:
        kube.create(instance_type(f"{name}-bad", unitResources={"cpu": "8", "ram": "32GB"}))
    assert "spec.unitResources.ram" in denied.value.message
