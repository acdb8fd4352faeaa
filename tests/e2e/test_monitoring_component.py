"""The optional monitoring component renders as a user adds it: an overlay of their own naming
the shipped manifests and `manifests/monitoring` as a component, built by the real kubectl; and
its monitors are valid objects of the Prometheus Operator's own CRDs (read from the Go module
cache), as the API server of a cluster running the operator would take them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from kubeapi import load_yaml_documents, wait_for
from testbed import build
from testbed.crds import crd_established
from testbed.harness import Testbed
from testbed.install import MANIFESTS
from testbed.kubectl import kubectl

MONITORS = ("PodMonitor", "ServiceMonitor")
API = "monitoring.coreos.com/v1"
CRD_DIR = "example/prometheus-operator-crd"


def _documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _rendered(testbed: Testbed, tmp_path: Path) -> tuple[list[dict[str, Any]], set[Any]]:
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "resources: [../manifests]\n"
        "components: [../manifests/monitoring]\n"
    )
    rendered = _documents(kubectl(testbed, "kustomize", str(tmp_path / "overlay")))
    plain = _documents(kubectl(testbed, "kustomize", str(tmp_path / "manifests")))
    shipped = {(o["kind"], o["metadata"]["name"]) for o in plain}
    return rendered, shipped


def test_an_overlay_adds_the_monitoring_component(testbed: Testbed, tmp_path: Path) -> None:
    rendered, shipped = _rendered(testbed, tmp_path)
    added = {(o["kind"], o["metadata"]["name"]) for o in rendered} - shipped
    assert added == {
        ("PodMonitor", "gpustack-chain"),
        ("ServiceMonitor", "gpustack-chain"),
        ("NetworkPolicy", "gpustack-metrics"),
    }


def test_the_monitors_are_valid_prometheus_operator_objects(
    testbed: Testbed, tmp_path: Path
) -> None:
    kube = testbed.kube
    crd_dir = build.module_dir("prometheus-operator") / CRD_DIR
    for plural in ("podmonitors", "servicemonitors"):
        (crd,) = load_yaml_documents(crd_dir / f"monitoring.coreos.com_{plural}.yaml")
        kube.apply(crd)
        name = crd["metadata"]["name"]
        wait_for(lambda n=name: crd_established(testbed, n), 60, f"CRD {name}")
    kube.forget_discovery()
    rendered, _ = _rendered(testbed, tmp_path)
    monitors = [o for o in rendered if o["kind"] in MONITORS]
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpustack-system"}})
    for monitor in monitors:
        # The API server validates each against the operator's schema (unknown fields refused
        # by strict field validation).
        kubectl(testbed, "apply", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(monitor))
        found = kube.get(API, monitor["kind"], "gpustack-chain", "gpustack-system")
        assert found is not None
        for key, value in monitor["spec"].items():  # kept as written (the schema may add defaults)
            assert _kept(value, found["spec"][key]), (monitor["kind"], key, found["spec"][key])
        kube.delete(API, monitor["kind"], "gpustack-chain", "gpustack-system")


def _kept(written: Any, stored: Any) -> bool:
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(_kept(v, stored.get(k)) for k, v in written.items())
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(written) == len(stored)
            and all(_kept(w, s) for w, s in zip(written, stored, strict=True))
        )
    return bool(written == stored)
