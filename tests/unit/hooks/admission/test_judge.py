"""`POST /judge`: the per-card verdict from related objects, and 400s naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chain.verdicts import NODE_READY, NODE_RETRY, POOL_READY, POOL_RETRY, PROMISED
from tests.unit.hooks.admission.helpers import GPU, client, post

FLAVOR = "gpustack--generic--nvidia-t4-linux-amd64-2d"
KUEUE = "kueue.x-k8s.io/v1beta2"
RESOURCE_MAX_UNITS = 1_600_000


def rf() -> dict[str, Any]:
    labels = {
        "gpustack.ai/managed": "true",
        "acceleratable.feature.gpustack.ai/nvidia-t4": "true",
        "acceleratable.feature.gpustack.ai/nvidia-t4.count": "2",
    }
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {"nodeLabels": labels},
    }


def devices(name: str, remaining: list[int]) -> dict[str, Any]:
    cards = [
        {"id": f"{name}-{i}", "index": i, "status": {"logicalSliced": {"count": 10}}}
        for i in range(len(remaining))
    ]
    rows = [
        {
            "id": f"{name}-{i}",
            "index": i,
            "mode": 0 if left == RESOURCE_MAX_UNITS else 3,
            "remaining": left,
        }
        for i, left in enumerate(remaining)
    ]
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {
            "name": name,
            "labels": {
                "gpustack.ai/managed": "true",
                "acceleratable.feature.gpustack.ai/nvidia-t4": "true",
            },
        },
        "spec": {
            "groups": [
                {
                    "id": "t4",
                    "manufacturer": "nvidia",
                    "name": "Tesla T4",
                    "memory": 15360,
                    "accelerators": cards,
                }
            ]
        },
        "status": {"groups": [{"id": "t4", "manufacturer": "nvidia", "accelerators": rows}]},
    }


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


def workload(
    cards: int, host: str | None = None, name: str = "job-a", admitted: bool = False
) -> dict[str, Any]:
    assignment: dict[str, Any] = {
        "name": "main",
        "count": 1,
        "flavors": {"credits.gpustack.ai/nvidia": FLAVOR},
    }
    if host is not None:
        assignment["topologyAssignment"] = {
            "levels": ["kubernetes.io/hostname"],
            "slices": [
                {
                    "domainCount": 1,
                    "valuesPerLevel": [{"universal": host}],
                    "podCounts": {"universal": 1},
                }
            ],
        }
    conditions = [{"type": "QuotaReserved", "status": "True"}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True"})
    container = {"name": "main", "resources": {"limits": {GPU: str(cards)}}}
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [assignment]},
            "conditions": conditions,
        },
    }


def related(*objects: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for obj in objects:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        out.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[key] = obj
    return out


CLUSTER = (
    rf(),
    devices("node-a", [RESOURCE_MAX_UNITS, 800000]),
    devices("node-b", [RESOURCE_MAX_UNITS, RESOURCE_MAX_UNITS]),
    node("node-a"),
    node("node-b"),
)


def judge(body: Any) -> tuple[int, Any]:
    return post(client(), "/judge", body)


def test_pool_ready_and_retry() -> None:
    assert judge({"workload": workload(2), "related": related(*CLUSTER)}) == (
        200,
        {"state": "Ready", "message": POOL_READY},
    )
    assert judge({"workload": workload(4), "related": related(*CLUSTER)}) == (
        200,
        {"state": "Retry", "message": POOL_RETRY.format(roles="")},
    )


def test_node_scoped() -> None:
    on_b = {"workload": workload(2, "node-b"), "related": related(*CLUSTER)}
    assert judge(on_b)[1] == {"state": "Ready", "message": NODE_READY.format(node="node-b")}
    on_a = {"workload": workload(2, "node-a"), "related": related(*CLUSTER)}
    assert judge(on_a)[1] == {
        "state": "Retry",
        "message": NODE_RETRY.format(node="node-a", roles=""),
    }


def test_promised_cards_and_the_pods_that_hold_them() -> None:
    other = workload(2, "node-b", name="other", admitted=True)
    body = {"workload": workload(2, "node-b"), "related": related(*CLUSTER, other)}
    assert judge(body)[1] == {
        "state": "Retry",
        "message": NODE_RETRY.format(node="node-b", roles="") + PROMISED,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "other-0",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/podset": "main"},
            "annotations": {
                "kueue.x-k8s.io/workload": "other",
                "device.gpustack.ai/accelerator.allocated": '{"main": {}}',
            },
        },
        "spec": {
            "nodeName": "node-b",
            "containers": [{"name": "main", "resources": {"limits": {GPU: "2"}}}],
        },
    }
    # The ledger (status) of node-b would show the cards taken once the Pod holds them; the
    # promise no longer counts, so here, with the ledger still free, the verdict is Ready.
    body = {"workload": workload(2, "node-b"), "related": related(*CLUSTER, other, pod)}
    assert judge(body)[1]["state"] == "Ready"


def test_custom_check_name() -> None:
    other = workload(2, "node-b", name="other")
    other["status"]["admissionChecks"] = [{"name": "mine", "state": "Ready", "message": ""}]
    body = {"workload": workload(2, "node-b"), "related": related(*CLUSTER, other)}
    assert judge(body)[1]["state"] == "Ready"
    assert judge({**body, "check": "mine"})[1]["state"] == "Retry"


def _broken_devices() -> dict[str, Any]:
    broken = copy.deepcopy(CLUSTER[1])
    broken["spec"]["groups"][0]["accelerators"][0]["index"] = "zero"
    return broken


def _broken_other() -> dict[str, Any]:
    other = workload(1, "node-a", name="other", admitted=True)
    other["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"] = 3
    return other


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"related": {}}, "$"),
        (
            {"workload": workload(1), "related": related(_broken_other())},
            "$.related['Workload.kueue.x-k8s.io/v1beta2']['other']"
            ".status.admission.podSetAssignments[0].topologyAssignment.slices",
        ),
        ({"workload": {"kind": "Workload"}}, "$.workload"),
        (
            {"workload": workload(1), "related": related(rf(), _broken_devices())},
            "$.related['Devices.worker.gpustack.ai/v1alpha1']['node-a'].spec.groups[0]"
            ".accelerators[0].index",
        ),
        (
            {
                "workload": workload(1)
                | {"spec": {"podSets": [{"name": "main", "template": {"spec": {"containers": 3}}}]}}
            },
            "$.workload.spec.podSets[0].template.spec.containers",
        ),
    ],
)
def test_malformed_requests_are_400_naming_the_field(body: Any, field: str) -> None:
    status, answer = judge(body)
    assert status == 400, answer
    assert answer["field"] == field, answer
