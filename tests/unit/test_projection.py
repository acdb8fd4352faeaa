"""The testbed's stand-in for the kubelet's ConfigMap volumes (pure parts; the e2e Pod webhook
test drives the whole of it)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from testbed.install import MANIFESTS, kustomize
from testbed.projection import (
    ConfigMapVolume,
    configmap_volumes,
    container_env,
    projected_files,
    sync_directory,
)


def _webhook() -> dict[str, object]:
    return next(
        o
        for o in kustomize(MANIFESTS)
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpustack-webhook-admission"
    )


def test_the_shipped_webhook_reads_its_catalog_from_the_projected_directory(tmp_path: Path) -> None:
    deployment = _webhook()
    container = deployment["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    volumes = configmap_volumes(deployment, container)
    # The TLS Secret volume is not a ConfigMap: the testbed serves TLS its own way.
    assert volumes == {
        "catalog": ConfigMapVolume(
            "gpustack-system", "gpustack-admission-catalog", "/etc/gpustack/catalog"
        ),
        "instances": ConfigMapVolume(
            "gpustack-system", "gpustack-instance-catalog", "/etc/gpustack/instances"
        ),
        "kvcache": ConfigMapVolume(
            "gpustack-system", "gpustack-kvcache-catalog", "/etc/gpustack/kvcache"
        ),
    }
    mounts = {
        "/etc/gpustack/catalog": tmp_path / "catalog",
        "/etc/gpustack/instances": tmp_path / "instances",
        "/etc/gpustack/kvcache": tmp_path / "kvcache",
    }
    env = container_env(container, mounts)
    assert env == {
        "GPUSTACK_ADMISSION_CATALOG": str(tmp_path / "catalog" / "catalog.yaml"),
        "GPUSTACK_INSTANCE_CATALOG": str(tmp_path / "instances" / "instances.json"),
        "GPUSTACK_KVCACHE_CATALOG": str(tmp_path / "kvcache" / "pools.json"),
        "PROMETHEUS_MULTIPROC_DIR": "/dev/shm/gpustack-metrics",  # outside every mount
    }


def test_env_outside_every_mount_and_value_from_are_left_as_they_are(tmp_path: Path) -> None:
    container = {
        "env": [
            {"name": "A", "value": "/etc/gpustack/catalogue/x"},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "C", "value": "/etc/gpustack/catalog"},
        ]
    }
    env = container_env(container, {"/etc/gpustack/catalog": tmp_path})
    assert env == {"A": "/etc/gpustack/catalogue/x", "C": str(tmp_path)}


def test_keys_become_files_as_the_kubelet_projects_them() -> None:
    configmap = {
        "data": {"a.yaml": "a: 1", "b.txt": "b"},
        "binaryData": {"c.bin": base64.b64encode(b"\x00\x01").decode()},
    }
    assert projected_files(configmap, {}) == {
        "a.yaml": b"a: 1",
        "b.txt": b"b",
        "c.bin": b"\x00\x01",
    }
    assert projected_files(configmap, {"a.yaml": "sub/a.yaml", "gone": "g"}) == {
        "sub/a.yaml": b"a: 1"
    }
    assert projected_files(None, {}) == {}


def test_the_directory_follows_the_configmap(tmp_path: Path) -> None:
    target = tmp_path / "volume"
    assert sync_directory(target, {"a": b"1", "sub/b": b"2"})
    os.utime(target / "a", ns=(1, 1))
    assert not sync_directory(target, {"a": b"1", "sub/b": b"2"})
    assert (target / "a").stat().st_mtime_ns == 1  # unchanged content is not rewritten
    assert sync_directory(target, {"a": b"3"})
    assert (target / "a").read_bytes() == b"3" and (target / "a").stat().st_mtime_ns != 1
    assert not (target / "sub" / "b").exists()
    assert sync_directory(target, {})
    assert [p for p in target.rglob("*") if p.is_file()] == []
