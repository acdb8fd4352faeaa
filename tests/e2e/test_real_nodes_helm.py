"""The Helm chart installed on the real nodes with a real `helm`: an operator moves the install
`real_chain` made with `kubectl apply -k` under Helm (`helm upgrade --install --take-ownership`),
with values reproducing the testbed's overlay (the local image, simulated NVIDIA cards on the
nodes). The chart renders the very objects the overlay applied, Helm takes every one of them
over, nothing restarts, and the chain keeps serving: every Deployment available, every agent
ready, every node offering its cards."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from kubeapi import wait_for
from testbed import build
from testbed.cluster import OVERLAY, REAL_NODES, deployment_available, offers_cards, ready_agents
from testbed.harness import Testbed
from testbed.images import ISOLATION_STANDIN_IMAGE, PROJECT_IMAGE
from testbed.kubectl import kubectl

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpustack-chain"
KUBE_VERSION = build.versions()["kubernetes"]["version"]
RELEASE = "gpustack-chain"
Obj = dict[str, Any]


def overlay_values() -> str:
    """What testbed/overlay changes, as the chart's values: its image, and what its patch adds
    to the NVIDIA agent (read from the patch, so the two cannot disagree)."""
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


def _running(bed: Testbed) -> dict[str, str]:
    """The chain's Pods by name -> UID."""
    pods = [
        pod
        for namespace in (SYSTEM_NAMESPACE, AGENT_NAMESPACE)
        for pod in bed.kube.list("v1", "Pod", namespace=namespace)
    ]
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}


def _keyed(docs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")): d for d in docs}


def test_helm_takes_the_install_over_and_the_chain_keeps_serving(
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

    chart = [
        d
        for d in yaml.safe_load_all(
            helm(
                "template",
                RELEASE,
                str(CHART),
                "--include-crds",
                "--kube-version",
                KUBE_VERSION,
                "-f",
                str(values),
            )
        )
        if d
    ]
    applied = [
        d
        for d in yaml.safe_load_all(kubectl(bed, "kustomize", str(OVERLAY)))
        if d and d["kind"] != "NodeFeature"  # the overlay's simulated PCI bus, not the chain's
    ]
    assert _keyed(chart) == _keyed(applied)
    before = _running(bed)

    helm(
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--take-ownership",
        "--wait",
        "--timeout",
        "5m",
        "-f",
        str(values),
    )
    status = json.loads(helm("status", RELEASE, "-o", "json"))
    assert status["info"]["status"] == "deployed"
    for kind, name, namespace in _keyed(chart):
        if kind == "CustomResourceDefinition":
            continue  # Helm installs crds/ once and never takes them over or upgrades them
        api = next(
            d["apiVersion"] for d in chart if (d["kind"], d["metadata"]["name"]) == (kind, name)
        )
        found = bed.kube.get(api, kind, name, namespace or None) or {}
        annotations = found.get("metadata", {}).get("annotations") or {}
        assert annotations.get("meta.helm.sh/release-name") == RELEASE, (kind, name)
    for kind, name, _ in _keyed(chart):
        if kind == "Deployment":
            wait_for(partial(deployment_available, bed, name), 120, f"{name} to stay available")
    # Helm adopted the objects as they were: not one Pod was replaced (a Deployment's generation
    # moves with its annotations, so the Pods are what says whether anything rolled).
    assert _running(bed) == before
    wait_for(lambda: ready_agents(bed) == len(REAL_NODES), 120, "the node agents to stay ready")
    for node in REAL_NODES:
        wait_for(partial(offers_cards, bed, node.name), 120, f"{node.name} to offer cards")
