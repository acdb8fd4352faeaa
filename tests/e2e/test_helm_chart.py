"""The Helm chart (`charts/gpustack-chain`, generated from `manifests/`) rendered by a real
`helm` (built from the Go module proxy): on default values it is exactly what the real `kubectl
kustomize manifests/` builds, and each value lands where `values.yaml` says. The chart installed
on real nodes is in `test_real_nodes_helm.py`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain.release import AGENT_NAMESPACE
from testbed import build
from testbed.harness import Testbed
from testbed.install import MANIFESTS
from testbed.kubectl import kubectl

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpustack-chain"
KUBE_VERSION = build.versions()["kubernetes"]["version"]
Obj = dict[str, Any]
Key = tuple[str, str, str]
Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm() -> Helm:
    build.ensure(["helm"])
    binary = str(build.binary("helm"))

    def run(*args: str, values: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args],
            input=values,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    return run


def _objects(text: str) -> dict[Key, Obj]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")): d for d in docs}


def rendered(helm: Helm, values: str = "") -> dict[Key, Obj]:
    args = ["template", "gpustack-chain", str(CHART), "--include-crds"]
    done = helm(*args, "--kube-version", KUBE_VERSION, "--values", "-", values=values or "{}")
    assert done.returncode == 0, done.stderr
    return _objects(done.stdout)


def test_default_values_render_exactly_the_kustomize_install(testbed: Testbed, helm: Helm) -> None:
    lint = helm("lint", str(CHART), "--kube-version", KUBE_VERSION)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    chart = rendered(helm)
    shipped = _objects(kubectl(testbed, "kustomize", str(MANIFESTS)))
    assert chart.keys() == shipped.keys()
    assert [key for key in shipped if chart[key] != shipped[key]] == []


VALUES = """
image: {repository: registry.example/gpustack-chain, tag: "1.2.3", pullPolicy: IfNotPresent}
manufacturers: [nvidia, amd]
deviceManager:
  extraArgs: {nvidia: ["--period=30"]}
  extraVolumes: {nvidia: [{name: scratch, emptyDir: {}}]}
  extraVolumeMounts: {nvidia: [{name: scratch, mountPath: /tmp}]}
tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
resources:
  gpustack-admission-driver: {limits: {memory: 2Gi}}
webhookCertificates: {mode: cert-manager, secretName: chain-webhook-tls}
settings: {node-management-manual: true}
"""


def _pod(objects: dict[Key, Obj], kind: str, name: str) -> Obj:
    namespace = AGENT_NAMESPACE if kind == "DaemonSet" else "gpustack-system"
    spec: Obj = objects[(kind, name, namespace)]["spec"]["template"]["spec"]
    return spec


def test_each_value_lands_where_values_yaml_says(helm: Helm) -> None:
    chart = rendered(helm, VALUES)
    agents = sorted(name for kind, name, _ in chart if kind == "DaemonSet")
    assert agents == ["gpustack-device-manager-amd", "gpustack-device-manager-nvidia"]
    nvidia = _pod(chart, "DaemonSet", "gpustack-device-manager-nvidia")
    (agent,) = nvidia["containers"]
    assert agent["image"] == "registry.example/gpustack-chain:1.2.3"
    assert agent["imagePullPolicy"] == "IfNotPresent"
    assert agent["args"][-1] == "--period=30"
    assert agent["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/tmp"}
    assert nvidia["volumes"][-1] == {"name": "scratch", "emptyDir": {}}
    amd = _pod(chart, "DaemonSet", "gpustack-device-manager-amd")
    assert "--period=30" not in amd["containers"][0]["args"]  # per manufacturer

    driver = _pod(chart, "Deployment", "gpustack-admission-driver")
    assert driver["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
    ]
    resources = driver["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "2Gi"}  # merged over the manifests' requests
    assert resources["requests"] == {"cpu": "100m", "memory": "128Mi"}
    # cert-manager issues the certificate: the driver keeps none, the injector fills the CA.
    assert not [a for a in driver["containers"][0]["args"] if a.startswith("--webhook")]
    certificate = chart[("Certificate", "chain-webhook-tls", "gpustack-system")]["spec"]
    assert certificate["secretName"] == "chain-webhook-tls"
    assert "gpustack-webhook-admission.gpustack-system.svc" in certificate["dnsNames"]
    assert "gpustack-webhook-instancetype.gpustack-system.svc" in certificate["dnsNames"]
    for kind, name, _ in chart:
        if kind.endswith("WebhookConfiguration"):
            meta = chart[(kind, name, "")]["metadata"]
            assert meta["annotations"] == {
                "cert-manager.io/inject-ca-from": "gpustack-system/chain-webhook-tls"
            }
    webhook = _pod(chart, "Deployment", "gpustack-webhook-admission")
    assert {"name": "tls", "secret": {"secretName": "chain-webhook-tls"}} in webhook["volumes"]
    settings = chart[("Settings", "default", "")]
    assert settings["spec"] == {"node-management-manual": True}


def test_a_provided_secret_needs_its_ca_and_a_bad_mode_is_named(helm: Helm) -> None:
    args = ("template", "x", str(CHART), "--kube-version", KUBE_VERSION)
    missing = helm(*args, "--set", "webhookCertificates.mode=secret")
    assert missing.returncode != 0
    assert "webhookCertificates.caBundle: the base64 PEM of the CA" in missing.stderr
    given = helm(
        *args,
        "--set",
        "webhookCertificates.mode=secret",
        "--set",
        "webhookCertificates.caBundle=Q0EK",
    )
    assert given.returncode == 0, given.stderr
    objects = _objects(given.stdout)
    hooks = [
        hook
        for (kind, _, _), obj in objects.items()
        if kind.endswith("WebhookConfiguration")
        for hook in obj["webhooks"]
    ]
    assert hooks and all(hook["clientConfig"]["caBundle"] == "Q0EK" for hook in hooks)
    assert not any(kind in ("Certificate", "Issuer") for kind, _, _ in objects)
    bogus = helm(*args, "--set", "webhookCertificates.mode=vault")
    assert bogus.returncode != 0
    assert 'webhookCertificates.mode: "vault" is not one of driver, cert-manager, secret' in (
        bogus.stderr
    )


def test_the_isolation_library_value_renders_the_shipped_component(
    testbed: Testbed, helm: Helm, tmp_path: Path
) -> None:
    """`deviceManager.isolationLibrary.nvidia.image` adds exactly the init container the
    kustomize component `manifests/isolation/nvidia` adds once its image is named."""
    image = "registry.example/hami:v9.9.9"
    chart = rendered(helm, f"deviceManager: {{isolationLibrary: {{nvidia: {{image: {image}}}}}}}")
    name, tag = image.rsplit(":", 1)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                # kustomize takes relative paths only
                "resources": [os.path.relpath(MANIFESTS, tmp_path)],
                "components": [os.path.relpath(MANIFESTS / "isolation" / "nvidia", tmp_path)],
                "images": [
                    {"name": "gpustack-isolation-library-nvidia", "newName": name, "newTag": tag}
                ],
            }
        )
    )
    shipped = _objects(kubectl(testbed, "kustomize", str(tmp_path)))
    assert chart.keys() == shipped.keys()
    assert [key for key in shipped if chart[key] != shipped[key]] == []
    key = ("DaemonSet", "gpustack-device-manager-nvidia", AGENT_NAMESPACE)
    (init,) = chart[key]["spec"]["template"]["spec"]["initContainers"]
    assert init["image"] == image
    # Only NVIDIA's agent stages a library; the others are as shipped.
    amd = ("DaemonSet", "gpustack-device-manager-amd", AGENT_NAMESPACE)
    assert "initContainers" not in chart[amd]["spec"]["template"]["spec"]


def test_an_isolation_library_the_chain_cannot_stage_is_refused_with_what_to_do(
    helm: Helm,
) -> None:
    """A manufacturer without a staging (every one but NVIDIA today) is not silently ignored."""
    values = "deviceManager: {isolationLibrary: {amd: {image: registry.example/vrocm:1}}}"
    args = ["template", "gpustack-chain", str(CHART), "--kube-version", KUBE_VERSION]
    done = helm(*args, "--values", "-", values=values)
    assert done.returncode != 0
    assert "deviceManager.isolationLibrary.amd" in done.stderr
    assert "/var/lib/gpustack/operator/lib/amd/" in done.stderr
