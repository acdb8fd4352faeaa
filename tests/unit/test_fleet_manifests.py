"""A fleet's manager as shipped (the worker install with the component manifests/fleet,
docs/fleet.md), checked statically: what it runs and leaves out, the gateway's Deployment, the
fleet controllers against the hook app and its answers, and Metacontroller's role over them.
The rules every Deployment of either install follows (probes, accounts, Pod Security, network
policies, disruption budgets, route deadlines) are in test_manifests.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chain.apis import CLUSTER_QUEUES_RESOURCE, INSTANCE_TYPE_RESOURCE
from chain.fleet_pools import (
    FLEET_FLAVOR,
    FLEET_LABEL,
    FLEET_LABEL_VALUE,
    FLEET_POOL_API,
    FLEET_POOLS_RESOURCE,
)
from hooks.fleet import status
from hooks.fleet.app import app
from testbed.install import MANIFESTS, kustomize, kustomize_with
from tests.unit.hooks.fleet.fixtures import DIRECTORY
from workergateway.cli import build_parser
from workergateway.kubeconfig import FLEET_NAMESPACE

Obj = dict[str, Any]
WORKER = kustomize(MANIFESTS)
MANAGER = kustomize_with(MANIFESTS, MANIFESTS / "fleet")
GATEWAY = "gpustack-worker-gateway"
CONTROLLERS = ("DecoratorController", "CompositeController")
KINDS = {
    CLUSTER_QUEUES_RESOURCE: "ClusterQueue",
    "admissionchecks": "AdmissionCheck",
    "multikueueconfigs": "MultiKueueConfig",
    INSTANCE_TYPE_RESOURCE: "InstanceType",
    FLEET_POOLS_RESOURCE: "FleetPool",
}
"""The kinds of the resources the fleet's controllers name."""


def _of(kind: str, objects: list[Obj] = MANAGER) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def _named(kind: str, name: str) -> Obj:
    (found,) = [o for o in _of(kind) if o["metadata"]["name"] == name]
    return found


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", "")


def _keys(objects: list[Obj]) -> set[tuple[str, str, str]]:
    return {_key(o) for o in objects}


def test_the_manager_adds_the_fleet_and_leaves_out_what_needs_nodes() -> None:
    """Gate 1 runs on the manager (webhooks, the catalog they read, the verdict driver that
    keeps their certificate, the entrance hook); nothing that reads nodes, cards or Instances
    does, and neither do the queue and status controllers the fleet's would fight."""
    added = _keys(MANAGER) - _keys(WORKER)
    removed = _keys(WORKER) - _keys(MANAGER)
    assert {
        ("Deployment", GATEWAY, "gpustack-system"),
        ("Deployment", "gpustack-hook-fleet", "gpustack-system"),
        ("Service", "gpustack-hook-fleet", "gpustack-system"),
        ("DecoratorController", "gpustack-fleet-pools", ""),
        ("DecoratorController", "gpustack-fleet-status", ""),
        ("ResourceFlavor", FLEET_FLAVOR, ""),
        ("CustomResourceDefinition", f"{FLEET_POOLS_RESOURCE}.gpustack.ai", ""),
    } <= added
    assert not _of("DaemonSet") and not _of("NodeFeatureRule") and not _of("CompositeController")
    assert {name for kind, name, _ in removed if kind in CONTROLLERS} == {
        "gpustack-flavor-nodes",
        "gpustack-flavor-pools",
        "gpustack-queue",
        "gpustack-instancetype-status",
        "gpustack-instance",
    }
    kept = {name for kind, name, _ in _keys(MANAGER) if kind == "Deployment"}
    assert kept == {
        "gpustack-admission-driver",
        "gpustack-webhook-admission",
        "gpustack-webhook-instancetype",
        "gpustack-hook-instancetype",
        "gpustack-hook-entrance",
        "gpustack-hook-fleet",
        GATEWAY,
    }
    # Every object the manager keeps is the worker install's, unchanged, but the CRD the
    # component patches (its Members column).
    worker = {_key(o): o for o in WORKER}
    changed = {_key(o) for o in MANAGER if _key(o) not in added and worker[_key(o)] != o}
    assert changed == {("CustomResourceDefinition", "instancetypes.worker.gpustack.ai", "")}


def test_one_controller_writes_each_fleet_object() -> None:
    """On the manager only the fleet's controllers make ClusterQueues and InstanceTypes and
    write an InstanceType's status: two controllers on one object undo each other's writes."""
    attaching: dict[str, list[str]] = {}
    decorating: dict[str, list[str]] = {}
    for controller in _of("DecoratorController"):
        name = controller["metadata"]["name"]
        for attachment in controller["spec"].get("attachments", ()):
            attaching.setdefault(attachment["resource"], []).append(name)
        for resource in controller["spec"]["resources"]:
            decorating.setdefault(resource["resource"], []).append(name)
    assert attaching[CLUSTER_QUEUES_RESOURCE] == ["gpustack-fleet-pools"]
    assert attaching[INSTANCE_TYPE_RESOURCE] == ["gpustack-fleet-pools"]
    assert decorating[INSTANCE_TYPE_RESOURCE] == ["gpustack-fleet-status"]
    (selected,) = _named("DecoratorController", "gpustack-fleet-status")["spec"]["resources"]
    assert selected["labelSelector"] == {"matchLabels": {FLEET_LABEL: FLEET_LABEL_VALUE}}


def test_the_fleet_controllers_call_routes_the_hook_app_serves() -> None:
    served = {rule.rule for rule in app.url_map.iter_rules()}
    for name in ("gpustack-fleet-pools", "gpustack-fleet-status"):
        for hook in _named("DecoratorController", name)["spec"]["hooks"].values():
            webhook = hook["webhook"]
            assert webhook["service"]["name"] == "gpustack-hook-fleet"
            assert webhook["path"] in served, (name, webhook["path"])


def _sync_answers() -> list[Obj]:
    """Every answer of the FleetPool decorator's fixtures that makes its attachments."""
    answers = []
    for path in sorted(DIRECTORY.glob("*.json")):
        fixture = json.loads(path.read_text())
        if fixture["path"] == "/sync" and "attachments" in fixture.get("response", {}):
            answers.append(fixture["response"])
    assert answers
    return answers


def test_the_pools_controller_declares_every_kind_its_hook_answers() -> None:
    """Metacontroller makes only the attachments its controller declares (each with its
    apiVersion): a kind the hook answers and the controller does not name is an error on
    every sync."""
    controller = _named("DecoratorController", "gpustack-fleet-pools")["spec"]
    declared = {(a["apiVersion"], KINDS[a["resource"]]) for a in controller["attachments"]}
    for answer in _sync_answers():
        answered = {(a["apiVersion"], a["kind"]) for a in answer["attachments"]}
        assert answered == declared
        for attachment in answer["attachments"]:
            if attachment["kind"] == "ClusterQueue":
                for group in attachment["spec"].get("resourceGroups", ()):
                    assert {f["name"] for f in group["flavors"]} == {FLEET_FLAVOR}


def _granted(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def test_metacontroller_may_do_what_the_fleet_controllers_need_and_no_more() -> None:
    """The fleet's role for Metacontroller names exactly the kinds its two controllers decorate,
    attach and relate, with the verbs each needs."""
    reads = ("get", "list", "watch")
    writes = (*reads, "create", "update", "patch", "delete")
    needed: set[tuple[str, str, str]] = set()
    for name in ("gpustack-fleet-pools", "gpustack-fleet-status"):
        spec = _named("DecoratorController", name)["spec"]
        for resource in spec["resources"]:
            needed |= {(_group(resource["apiVersion"]), resource["resource"], v) for v in reads}
        for attachment in spec.get("attachments", ()):
            group = _group(attachment["apiVersion"])
            needed |= {(group, attachment["resource"], v) for v in writes}
    parent = {"metadata": {"name": "pool"}}
    for related in status.customize(parent)["relatedResources"]:
        needed |= {(_group(related["apiVersion"]), related["resource"], v) for v in reads}
    # The status decorator writes its parent's status; an attachment's owner reference blocks
    # the FleetPool's deletion.
    group = _group(FLEET_POOL_API)
    needed |= {
        ("worker.gpustack.ai", f"{INSTANCE_TYPE_RESOURCE}/status", "get"),
        ("worker.gpustack.ai", f"{INSTANCE_TYPE_RESOURCE}/status", "update"),
        (group, f"{FLEET_POOLS_RESOURCE}/finalizers", "update"),
    }
    role = _named("ClusterRole", "gpustack-fleet-metacontroller")
    assert _granted(role) == needed
    (binding,) = [
        b
        for b in _of("ClusterRoleBinding")
        if b["roleRef"]["name"] == "gpustack-fleet-metacontroller"
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "metacontroller", "namespace": "metacontroller"}
    ]


@pytest.mark.parametrize("kind", ["Role", "ClusterRole"])
def test_no_role_of_either_install_grants_a_wildcard(kind: str) -> None:
    for role in _of(kind, MANAGER) + _of(kind, WORKER):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, ()), (role["metadata"]["name"], rule)


def test_no_binding_of_either_install_hands_out_a_built_in_role() -> None:
    """No cluster-admin, admin, edit or view: every binding names a role of the chain's own."""
    own = {r["metadata"]["name"] for r in _of("ClusterRole") + _of("Role")}
    own |= {r["metadata"]["name"] for r in _of("ClusterRole", WORKER) + _of("Role", WORKER)}
    for binding in [
        *_of("ClusterRoleBinding"),
        *_of("RoleBinding"),
        *_of("ClusterRoleBinding", WORKER),
        *_of("RoleBinding", WORKER),
    ]:
        assert binding["roleRef"]["name"] in own, binding["metadata"]["name"]


def test_the_gateway_runs_as_its_cli_and_rbac_expect() -> None:
    """Its arguments parse; its probes reach the health port it serves; it reads the Secrets of
    the namespace its Role covers, as the account its RBAC binds; nothing else is mounted."""
    deployment = _named("Deployment", GATEWAY)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python"]
    assert container["args"][:2] == ["-m", "workergateway"]
    args = build_parser().parse_args(container["args"][2:])
    assert args.fleet_namespace == FLEET_NAMESPACE
    (port,) = container["ports"]
    assert port["containerPort"] == args.health_port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert pod["serviceAccountName"] == GATEWAY
    assert "automountServiceAccountToken" not in pod  # its token is how it reads the manager
    assert not pod.get("volumes") and not container.get("volumeMounts")
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (role,) = [r for r in _of("Role") if r["metadata"]["name"] == GATEWAY]
    assert role["metadata"]["namespace"] == args.fleet_namespace
    assert deployment["spec"]["replicas"] == 1  # no Lease (docs/fleet.md, "No Lease")


def test_the_monitoring_component_scrapes_the_fleets_metrics() -> None:
    """On a manager the optional component manifests/monitoring reaches the gateway's `health`
    port (its PodMonitor) and the fleet hook's Service (its ServiceMonitor), as it does the
    verdict driver's and the other hooks'."""
    monitoring = {o["kind"]: o for o in kustomize(MANIFESTS / "monitoring")}
    pods, services = monitoring["PodMonitor"]["spec"], monitoring["ServiceMonitor"]["spec"]
    gateway = _named("Deployment", GATEWAY)["spec"]["template"]
    assert pods["selector"]["matchLabels"].items() <= gateway["metadata"]["labels"].items()
    ports = {p["name"] for c in gateway["spec"]["containers"] for p in c["ports"]}
    assert ports & {e["port"] for e in pods["podMetricsEndpoints"]}
    hook = _named("Service", "gpustack-hook-fleet")
    assert services["selector"]["matchLabels"].items() <= hook["metadata"]["labels"].items()
    assert {p["name"] for p in hook["spec"]["ports"]} & {e["port"] for e in services["endpoints"]}
