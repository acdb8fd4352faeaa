from __future__ import annotations

from chain import apis


def test_versions_are_the_spec_facts() -> None:
    assert apis.KUEUE_API == "kueue.x-k8s.io/v1beta2"
    assert apis.WORKER_API == "worker.gpustack.ai/v1alpha1"
    assert apis.CHAIN_API == "gpustack.ai/v1alpha1"
    assert (apis.SETTINGS, apis.SETTINGS_RESOURCE, apis.SETTINGS_NAME) == (
        "Settings",
        "settings",
        "default",
    )
    assert (apis.NODE_FLAVORS, apis.NODE_FLAVORS_RESOURCE) == ("NodeFlavors", "nodeflavors")
