"""The gateway's RBAC (manifests/fleet): every call a pass makes is granted, on the manager and
on each member, and nothing more is granted on a member than what the pass reads there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from chain.fleet_pools import FLEET_POOL_API, FLEET_POOLS_RESOURCE
from workergateway.kubeconfig import FLEET_NAMESPACE

FLEET = Path(__file__).parents[3] / "manifests" / "fleet"


def _grants(path: Path, kind: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule of the `kind` objects in `path`."""
    found: set[tuple[str, str, str]] = set()
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc["kind"] != kind:
            continue
        if kind == "Role":
            assert doc["metadata"]["namespace"] == FLEET_NAMESPACE
        for rule in doc["rules"]:
            found |= {
                (group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return found


def _listed(path: Path) -> list[str]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return list(doc["resources"])


def test_the_manager_grants_what_a_pass_does() -> None:
    assert "gateway-rbac.yaml" in _listed(FLEET / "kustomization.yaml")
    cluster = _grants(FLEET / "gateway-rbac.yaml", "ClusterRole")
    group = FLEET_POOL_API.split("/")[0]
    needed = {
        ("kueue.x-k8s.io", "multikueueclusters", "list"),
        ("kueue.x-k8s.io", "multikueueclusters", "watch"),
        (group, FLEET_POOLS_RESOURCE, "list"),
        (group, FLEET_POOLS_RESOURCE, "patch"),
        (group, FLEET_POOLS_RESOURCE, "delete"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        (group, f"{FLEET_POOLS_RESOURCE}/status", "patch"),
        ("kueue.x-k8s.io", "localqueues", "list"),
    }
    assert needed <= cluster
    assert not any(resource == "secrets" for _, resource, _ in cluster)
    assert _grants(FLEET / "gateway-rbac.yaml", "Role") == {
        ("", "secrets", verb) for verb in ("get", "list", "watch")
    }


def test_a_member_grants_reads_of_three_kinds_only() -> None:
    assert _listed(FLEET / "member" / "kustomization.yaml") == ["rbac.yaml"]
    assert _grants(FLEET / "member" / "rbac.yaml", "ClusterRole") == {
        (group, resource, verb)
        for group, resource in (
            ("worker.gpustack.ai", "instancetypes"),
            ("kueue.x-k8s.io", "clusterqueues"),
        )
        for verb in ("get", "list", "watch")
    } | {("kueue.x-k8s.io", "localqueues", "list")}
