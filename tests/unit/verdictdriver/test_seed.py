"""The settings singleton: created once by the driver, never overwritten."""

from __future__ import annotations

from typing import Any

import pytest

from kubeapi import KubeError
from verdictdriver.seed import ensure_settings


class FakeKube:
    def __init__(self, existing: dict[str, Any] | None = None, conflict: bool = False) -> None:
        self.existing = existing
        self.conflict = conflict
        self.created: list[dict[str, Any]] = []

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        assert (api_version, kind, name) == ("gpustack.ai/v1alpha1", "Settings", "default")
        return self.existing

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.conflict:
            raise KubeError(409, "already exists")
        self.created.append(obj)
        return obj


def test_created_seeded_from_the_environment_when_absent() -> None:
    kube = FakeKube()
    assert ensure_settings(kube, {"GPUSTACK_WORKLOAD_FIT_AFFINITY": "false"})  # type: ignore[arg-type]
    [created] = kube.created
    assert created["metadata"]["name"] == "default"
    assert created["spec"] == {"workload-fit-affinity": False}


def test_an_existing_object_is_never_touched() -> None:
    kube = FakeKube(existing={"spec": {"node-management-manual": True}})
    assert not ensure_settings(kube, {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "false"})  # type: ignore[arg-type]
    assert kube.created == []


def test_another_replica_first_is_fine_and_other_errors_surface() -> None:
    assert not ensure_settings(FakeKube(conflict=True), {})  # type: ignore[arg-type]

    class Down(FakeKube):
        def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
            raise KubeError(404, "no resource for kind Settings")

    with pytest.raises(KubeError):
        ensure_settings(Down(), {})  # type: ignore[arg-type]
