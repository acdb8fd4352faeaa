"""The Helm chart's life on the real nodes with a real `helm`, from the install `real_chain`
made with `kubectl apply -k`, with values reproducing the testbed's overlay (the local image,
simulated NVIDIA cards on the nodes):

1. `helm upgrade --install --take-ownership -n gpustack-system`: the chart renders the very
   objects the overlay applied, Helm takes every one over, nothing restarts;
2. `helm uninstall`: every object Helm made goes, the agents' namespace with them, and only
   what the chart's README says stays does (the CRDs, the catalogs, the driver's Lease and
   Secret, the release namespace);
3. `helm install` of the previous chart version (0.1.0, from the project's history), into
   gpustack-system as that version requires, then `helm upgrade` to this chart, as the README
   says to (the namespace annotated to be kept);
4. `helm uninstall`, then `helm install -n <another namespace> --create-namespace` with the
   agents in a namespace of their own choosing: the components follow their namespace (the
   catalogs are written there, the entrance hook gives it no LocalQueue).

After each install the chain serves: every Deployment available, every agent ready, every node
offering its cards and their slices (`offers_cards`: the kubelet's tokens, the agent's
`.sliced.units` counting key). The module ends with `helm uninstall` and puts nothing back: it
runs after every other module of the session (`RESHAPES_THE_INSTALL`,
testbed/pytest_plugin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain.catalog import CATALOG_CONFIGMAP
from chain.instances import INSTANCE_CATALOG_CONFIGMAP
from chain.kvcache import KVCACHE_CATALOG_CONFIGMAP
from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from kubeapi import wait_for
from testbed import build, previous
from testbed.cluster import (
    OVERLAY,
    REAL_NODES,
    deployment_available,
    offers_cards,
    ready_agents,
)
from testbed.harness import Testbed
from testbed.images import ISOLATION_STANDIN_IMAGE, PROJECT_IMAGE
from testbed.kubectl import kubectl
from tests.e2e.conftest import scratch_namespace

REPOSITORY = Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "charts" / "gpustack-chain"
KUBE_VERSION = build.versions()["kubernetes"]["version"]
RELEASE = "gpustack-chain"
# Uninstalls the shared install and installs it elsewhere: run after every other module
# (testbed/pytest_plugin.py), so nothing depends on putting it back.
RESHAPES_THE_INSTALL = True
ELSEWHERE = "gpustack-helm"
ELSEWHERE_AGENTS = "gpustack-helm-agents"
STAYS = {
    ("ConfigMap", CATALOG_CONFIGMAP),
    ("ConfigMap", INSTANCE_CATALOG_CONFIGMAP),
    ("ConfigMap", KVCACHE_CATALOG_CONFIGMAP),
    ("Secret", "gpustack-webhook-tls"),
    ("Lease", "gpustack-admission-driver"),
}
"""What `helm uninstall` leaves in the release namespace, as the chart's README lists it: the
catalogs (owned by the Settings singleton, a CRD's object, which stays), the verdict driver's
webhook Secret and Lease (made by the driver, not by Helm)."""
Obj = dict[str, Any]
Key = tuple[str, str, str]
Helm = Callable[..., str]


def overlay_values() -> str:
    """What testbed/overlay changes, as the chart's values: its image, and what its patch adds
    to the NVIDIA agent (read from the patch, so the two cannot disagree). Chart 0.1.0 takes
    the same values."""
    repository, _, tag = PROJECT_IMAGE.rpartition(":")
    added: dict[str, list[Any]] = {"args": [], "volumes": [], "volumeMounts": []}
    for op in yaml.safe_load((OVERLAY / "simulate-nvidia.yaml").read_text()):
        assert op["op"] == "add" and op["path"].endswith("/-"), op
        added[op["path"].split("/")[-2]].append(op["value"])
    return yaml.safe_dump(
        {
            "image": {"repository": repository, "tag": tag},
            "deviceManager": {
                "extraArgs": {"nvidia": added["args"]},
                "extraVolumes": {"nvidia": added["volumes"]},
                "extraVolumeMounts": {"nvidia": added["volumeMounts"]},
                # The overlay's isolation component, with its image named.
                "isolationLibrary": {"nvidia": {"image": ISOLATION_STANDIN_IMAGE}},
            },
        }
    )


def previous_chart(into: Path) -> Path:
    """Chart 0.1.0 as the project's history holds it."""
    try:
        previous.extract(into, "charts/gpustack-chain")
    except previous.HistoryMissing as missing:
        pytest.fail(f"the upgrade test needs the project's git history: {missing}")
    chart = into / "charts" / "gpustack-chain"
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["version"] == previous.VERSION
    return chart


def _keyed(docs: list[Obj]) -> dict[Key, Obj]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")): d for d in docs}


def _running(bed: Testbed) -> dict[str, str]:
    """The chain's Pods by name -> UID."""
    pods = [
        pod
        for namespace in (SYSTEM_NAMESPACE, AGENT_NAMESPACE)
        for pod in bed.kube.list("v1", "Pod", namespace=namespace)
    ]
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}


def _serving(bed: Testbed, chart: dict[Key, Obj], agents: str) -> None:
    """Every Deployment the chart rendered available, every agent ready, every node offering
    its cards (the kubelet's tokens and the agent's slice counting keys)."""
    for kind, name, namespace in chart:
        if kind == "Deployment":
            wait_for(partial(deployment_available, bed, name, namespace), 180, f"{name} available")
    wait_for(lambda: ready_agents(bed, agents) == len(REAL_NODES), 300, "the agents ready")
    for node in REAL_NODES:
        wait_for(partial(offers_cards, bed, node.name), 300, f"{node.name} to offer cards")


def _kept(obj: Obj) -> bool:
    """What `helm uninstall` leaves of the chart's own objects: the CRDs (Helm never deletes
    crds/) and the AdmissionCheck (`helm.sh/resource-policy: keep`)."""
    annotations = obj["metadata"].get("annotations") or {}
    return obj["kind"] == "CustomResourceDefinition" or (
        annotations.get("helm.sh/resource-policy") == "keep"
    )


def _gone(bed: Testbed, chart: dict[Key, Obj], timeout: float = 240.0) -> None:
    """Every object of `chart` deleted but what is kept, which is still whole. What is still
    there after `timeout` is told with what holds it (finalizers, a namespace's conditions,
    its Pods)."""
    kept = {key for key, obj in chart.items() if _kept(obj)}
    for (kind, name, _), obj in chart.items():
        if (kind, name, "") in kept:
            found = bed.kube.get(obj["apiVersion"], kind, name) or {}
            assert found and not found["metadata"].get("deletionTimestamp"), (kind, name)

    def remaining() -> list[Obj]:
        found = [
            bed.kube.get(obj["apiVersion"], kind, name, namespace or None)
            for (kind, name, namespace), obj in chart.items()
            if (kind, name, namespace) not in kept
        ]
        return [obj for obj in found if obj is not None]

    deadline = time.monotonic() + timeout
    while remaining() and time.monotonic() < deadline:
        time.sleep(2)
    left = remaining()
    held = [
        {
            "kind": obj["kind"],
            "name": obj["metadata"]["name"],
            "finalizers": obj["metadata"].get("finalizers"),
            "conditions": obj.get("status", {}).get("conditions"),
            "pods": [
                (
                    pod["metadata"]["name"],
                    pod["status"].get("phase"),
                    pod["metadata"].get("finalizers"),
                )
                for pod in bed.kube.list("v1", "Pod", namespace=obj["metadata"]["name"])
            ]
            if obj["kind"] == "Namespace"
            else None,
        }
        for obj in left
    ]
    assert not held, json.dumps(held, indent=1)


def _left_in(bed: Testbed, namespace: str) -> set[tuple[str, str]]:
    """What is left in `namespace`, but for what Kubernetes puts in every namespace."""
    kinds = [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("coordination.k8s.io/v1", "Lease"),
        ("v1", "Pod"),
        ("v1", "Service"),
        ("v1", "ServiceAccount"),
        ("apps/v1", "Deployment"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("policy/v1", "PodDisruptionBudget"),
    ]
    everywhere = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
    return {
        (kind, obj["metadata"]["name"])
        for api, kind in kinds
        for obj in bed.kube.list(api, kind, namespace=namespace)
    } - everywhere


def test_helm_takes_over_uninstalls_upgrades_from_0_1_0_and_installs_elsewhere(
    real_chain: Testbed, tmp_path: Path
) -> None:
    bed = real_chain
    build.ensure(["helm"])
    values = tmp_path / "values.yaml"
    values.write_text(overlay_values())
    homes = {name: str(tmp_path / name) for name in ("cache", "config", "data")}
    env = {
        **os.environ,
        "HELM_CACHE_HOME": homes["cache"],
        "HELM_CONFIG_HOME": homes["config"],
        "HELM_DATA_HOME": homes["data"],
        "KUBECONFIG": str(bed.kubeconfig),
    }
    steps: dict[str, float] = {}

    def helm(*args: str) -> str:
        done = subprocess.run(
            [str(build.binary("helm")), *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def rendered(chart: Path, namespace: str, *extra: str) -> dict[Key, Obj]:
        args = ("template", RELEASE, str(chart), "--include-crds", "-n", namespace)
        text = helm(*args, "--kube-version", KUBE_VERSION, "-f", str(values), *extra)
        return _keyed([d for d in yaml.safe_load_all(text) if d])

    def step(name: str, started: float) -> None:
        steps[name] = round(time.monotonic() - started, 1)

    # 1. Helm takes the kustomize install over; nothing restarts.
    started = time.monotonic()
    chart = rendered(CHART, SYSTEM_NAMESPACE)
    applied = _keyed(
        [
            d
            for d in yaml.safe_load_all(kubectl(bed, "kustomize", str(OVERLAY)))
            # the overlay's simulated PCI bus is not the chain's; the release namespace is not
            # Helm's to own (it stays, made by kustomize)
            if d and d["kind"] != "NodeFeature" and d["metadata"]["name"] != SYSTEM_NAMESPACE
        ]
    )
    assert chart.keys() == applied.keys()
    before = _running(bed)
    helm(
        "upgrade", "--install", RELEASE, str(CHART), "-n", SYSTEM_NAMESPACE,
        "--take-ownership", "--wait", "--timeout", "5m", "-f", str(values),
    )  # fmt: skip
    status = json.loads(helm("status", RELEASE, "-n", SYSTEM_NAMESPACE, "-o", "json"))
    assert status["info"]["status"] == "deployed"
    for (kind, name, namespace), obj in chart.items():
        if kind == "CustomResourceDefinition":
            continue  # Helm installs crds/ once and never takes them over or upgrades them
        found = bed.kube.get(obj["apiVersion"], kind, name, namespace or None) or {}
        annotations = found.get("metadata", {}).get("annotations") or {}
        assert annotations.get("meta.helm.sh/release-name") == RELEASE, (kind, name)
    _serving(bed, chart, AGENT_NAMESPACE)
    # Helm adopted the objects as they were: not one Pod was replaced (a Deployment's generation
    # moves with its annotations, so the Pods are what says whether anything rolled).
    assert _running(bed) == before
    step("take over", started)

    # 2. Uninstall: only what the README lists stays.
    started = time.monotonic()
    helm("uninstall", RELEASE, "-n", SYSTEM_NAMESPACE, "--timeout", "5m")
    _gone(bed, chart)
    wait_for(lambda: _left_in(bed, SYSTEM_NAMESPACE) == STAYS, 120, "only what stays to stay")
    step("uninstall", started)

    # 3. Chart 0.1.0, then the upgrade to this one as its README says.
    started = time.monotonic()
    old = previous_chart(tmp_path)
    # 0.1.0 makes the gpustack-system Namespace itself, which is here (kept, as said).
    helm(
        "install", RELEASE, str(old), "-n", SYSTEM_NAMESPACE, "--take-ownership",
        "--wait", "--timeout", "5m", "-f", str(values),
    )  # fmt: skip
    _serving(bed, rendered(old, SYSTEM_NAMESPACE), AGENT_NAMESPACE)
    step("install 0.1.0", started)
    started = time.monotonic()
    kubectl(bed, "annotate", "namespace", SYSTEM_NAMESPACE, "helm.sh/resource-policy=keep")
    helm(
        "upgrade", RELEASE, str(CHART), "-n", SYSTEM_NAMESPACE,
        "--wait", "--timeout", "5m", "-f", str(values),
    )  # fmt: skip
    history = json.loads(helm("history", RELEASE, "-n", SYSTEM_NAMESPACE, "-o", "json"))
    assert [entry["chart"] for entry in history] == ["gpustack-chain-0.1.0", "gpustack-chain-0.2.0"]
    namespace = bed.kube.get("v1", "Namespace", SYSTEM_NAMESPACE) or {}
    assert namespace and not namespace["metadata"].get("deletionTimestamp")
    _serving(bed, chart, AGENT_NAMESPACE)
    step("upgrade to 0.2.0", started)

    # 4. Elsewhere: another release namespace, the agents in another namespace of their own.
    started = time.monotonic()
    helm("uninstall", RELEASE, "-n", SYSTEM_NAMESPACE, "--timeout", "5m")
    _gone(bed, chart)
    agents = ("--set", f"agentNamespace.name={ELSEWHERE_AGENTS}")
    # The AdmissionCheck the last release kept is that release's: this one takes it over.
    notes = helm(
        "install", RELEASE, str(CHART), "-n", ELSEWHERE, "--create-namespace",
        "--take-ownership", "--wait", "--timeout", "5m", "-f", str(values), *agents,
    )  # fmt: skip
    assert f"kubectl label namespace {ELSEWHERE}" in notes  # what NOTES.txt tells to do next
    kubectl(bed, "label", "namespace", ELSEWHERE, "pod-security.kubernetes.io/enforce=restricted")
    elsewhere = rendered(CHART, ELSEWHERE, *agents)
    # The nodes' counting keys too: the uninstall took the accelerator labels off the nodes with
    # the old NodeFeatures and left the old agents' keys, so each new agent's first report nulls
    # them, and they are back only if that agent answers the labels nfd-master writes back,
    # which used to be lost when they landed during that report (one node in two runs of four;
    # CHANGELOG, "Fixed (#35)"). Waited on after the agents are Ready, so after that report;
    # the re-detection that would also bring them back comes 10 minutes later.
    _serving(bed, elsewhere, ELSEWHERE_AGENTS)
    # The hooks found their namespace: the catalogs are written there, and the entrance hook
    # gives a tenant namespace its LocalQueues but the release namespace none.
    for name in (CATALOG_CONFIGMAP, INSTANCE_CATALOG_CONFIGMAP, KVCACHE_CATALOG_CONFIGMAP):
        wait_for(lambda name=name: bed.kube.get("v1", "ConfigMap", name, ELSEWHERE), 120, name)
    with scratch_namespace(bed, "tenant") as tenant:
        queues = partial(bed.kube.list, "kueue.x-k8s.io/v1beta2", "LocalQueue")
        wait_for(lambda: queues(namespace=tenant), 120, "the tenant's LocalQueues")
        assert queues(namespace=ELSEWHERE) == []
        assert queues(namespace=ELSEWHERE_AGENTS) == []
    step("install elsewhere", started)

    # This module runs last (RESHAPES_THE_INSTALL): the release goes, and nothing is put back.
    started = time.monotonic()
    helm("uninstall", RELEASE, "-n", ELSEWHERE, "--timeout", "5m")
    _gone(bed, elsewhere)
    step("uninstall elsewhere", started)
    print("steps (s):", steps)
