"""The optional monitoring component renders as a user adds it: an overlay of their own naming
the shipped manifests and `manifests/monitoring` as a component, built by the real kubectl."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from testbed.harness import Testbed
from testbed.install import MANIFESTS
from testbed.kubectl import kubectl


def test_an_overlay_adds_the_monitoring_component(testbed: Testbed, tmp_path: Path) -> None:
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources: [../manifests]\n"
        "components: [../manifests/monitoring]\n"
    )
    rendered = kubectl(testbed, "kustomize", str(tmp_path / "overlay"))
    plain = kubectl(testbed, "kustomize", str(tmp_path / "manifests"))
    added = {(o["kind"], o["metadata"]["name"]) for o in _documents(rendered)}
    shipped = {(o["kind"], o["metadata"]["name"]) for o in _documents(plain)}
    assert added - shipped == {
        ("PodMonitor", "gpustack-chain"),
        ("NetworkPolicy", "gpustack-metrics"),
    }


def _documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]
