"""Bad input gets a 4xx naming the field (or a webhook denial), never a 500: the cases a fuzz of
every route found, each rebuilt from a shipped fixture."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from hooks.entrance.app import app as entrance_app
from hooks.flavor.app import app as flavor_app
from hooks.fleet.app import app as fleet_app
from hooks.instancetype.app import app as instancetype_app
from hooks.queue.app import app as queue_app
from hooks.transport import WEBHOOK_BODY_LIMIT, make_app
from tests.unit.hooks.admission.helpers import client, review

FIXTURES = Path(__file__).parent
CQ = "ClusterQueue.kueue.x-k8s.io/v1beta2"
CHECK = "AdmissionCheck.kueue.x-k8s.io/v1beta2"
APPS = {
    "queue": (queue_app, "/sync"),
    "entrance": (entrance_app, "/sync"),
    "fleet": (fleet_app, "/sync"),
    "flavor": (flavor_app, "/flavors/sync"),
    "instancetype": (instancetype_app, "/sync"),
}


def _request(hook: str, name: str) -> dict[str, Any]:
    request: dict[str, Any] = json.loads((FIXTURES / hook / "fixtures" / name).read_text())[
        "request"
    ]
    return request


def _post(app: Flask, path: str, body: Any = None, raw: str | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else json.dumps(body)
    reply = app.test_client().post(path, data=data, content_type="application/json")
    return reply.status_code, reply.get_json(silent=True)


@pytest.mark.parametrize("hook", sorted(APPS))
def test_a_body_nested_too_deeply_is_a_400(hook: str) -> None:
    app, path = APPS[hook]
    status, answer = _post(app, path, raw="[" * 5000 + "]" * 5000)
    assert status == 400
    assert "nested too deeply" in answer["error"]


def test_non_object_status_of_the_attached_queue_is_a_400_naming_it() -> None:
    request = _request("queue", "drain-1-start.json")
    [name] = request["attachments"][CQ]
    bad = copy.deepcopy(request)
    bad["attachments"][CQ][name]["status"] = 5
    status, answer = _post(queue_app, "/sync", bad)
    assert status == 400
    assert answer["field"].endswith(f"['{name}'].status")


def test_non_object_status_of_the_related_check_is_a_400_naming_it() -> None:
    request = _request("queue", "drain-1-start.json")
    bad = copy.deepcopy(request)
    for check in bad["related"][CHECK].values():
        check["status"] = "ready"
    status, answer = _post(queue_app, "/sync", bad)
    assert status == 400
    assert answer["field"].endswith("['gpustack-node-devices'].status")


def test_usage_that_is_not_a_list_is_a_400_naming_it() -> None:
    request = _request("queue", "drain-1-start.json")
    [name] = request["attachments"][CQ]
    bad = copy.deepcopy(request)
    queue = bad["attachments"][CQ][name]
    queue["metadata"]["generation"] = 1
    queue["status"] = {
        "conditions": [{"type": "Active", "status": "True", "observedGeneration": 1}],
        "flavorsUsage": 5,
    }
    status, answer = _post(queue_app, "/sync", bad)
    assert status == 400
    assert answer["field"].endswith(".status.flavorsUsage")


def test_a_lone_surrogate_is_a_400() -> None:
    """JSON can carry `"\\ud800"`; nothing Kubernetes stores can, and encoding it fails."""

    def handler(body: dict[str, Any]) -> dict[str, Any]:
        return {"name": str(body["name"]).encode().decode()}

    app = make_app("probe", {"/sync": handler})
    status, answer = _post(app, "/sync", raw='{"name": "a\\ud800"}')
    assert status == 400
    assert "surrogate" in answer["error"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"acceleratable": True, "acceleratorGroup": "nvidia-l4", "generalGroup": 5},
            "generalGroup",
        ),
        ({"acceleratable": True, "acceleratorGroup": ["x"]}, "acceleratorGroup"),
        ({"acceleratable": False, "os": {"name": "linux"}}, "os"),
    ],
)
def test_instancetype_defaulting_refuses_wrong_types_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    """Mutation runs before the CRD's schema is checked: the user gets the field, not a 500."""
    obj = {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "InstanceType"}
    body = review({**obj, "metadata": {"name": "t"}, "spec": spec}, resource="instancetypes")
    status, answer = _post(instancetype_app, "/mutate", body)
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(f"spec.{field}: expected a string")


def test_a_pod_with_null_limits_is_answered() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": None}}]},
    }
    reply = client().post(
        "/mutate-pods", data=json.dumps(review(pod)), content_type="application/json"
    )
    assert reply.status_code == 200
    assert reply.get_json()["response"]["allowed"] is True


def test_a_webhook_body_beyond_its_limit_is_a_413_before_parsing() -> None:
    """An AdmissionReview holds at most two objects of etcd's 1.5 MiB: past 8 MiB it is refused
    unread. Metacontroller's requests grow with the cluster and have a larger limit."""
    padding = "x" * (WEBHOOK_BODY_LIMIT + 1)
    big = json.dumps({"padding": padding})
    status, answer = _post(instancetype_app, "/mutate", raw=big)
    assert status == 413
    assert str(WEBHOOK_BODY_LIMIT) in answer["error"]
    status, _ = _post(instancetype_app, "/sync", raw=big)
    assert status == 400  # read, and refused for what it says, not for its size
    reply = client().post("/mutate-pods", data=big, content_type="application/json")
    assert reply.status_code == 413


@pytest.mark.parametrize("route", ["/mutate-pods", "/mutate-jobs"])
@pytest.mark.parametrize("metadata", [True, 1, ["x"], {"labels": ["x"]}])
def test_a_webhook_object_whose_metadata_is_not_an_object_is_denied_naming_it(
    route: str, metadata: Any
) -> None:
    """Found by the long fuzz profile: `metadata: true` on the reviewed object was a 500."""
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}
    reply = client().post(route, data=json.dumps(review(obj)), content_type="application/json")
    assert reply.status_code == 200
    response = reply.get_json()["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("metadata: expected an object")


@pytest.mark.parametrize("labels", [7, ["a"], {"a": 1}])
def test_labels_of_an_attached_instance_type_that_are_not_strings_are_a_400(labels: Any) -> None:
    request = _request("flavor", "pools-node-removed.json")
    bad = copy.deepcopy(request)
    kind = "InstanceType.worker.gpustack.ai/v1alpha1"
    name = next(iter(bad["attachments"][kind]))
    bad["attachments"][kind][name]["metadata"]["labels"] = labels
    status, answer = _post(flavor_app, "/flavors/sync", bad)
    assert status == 400
    assert answer["field"].endswith(f"['{name}'].metadata.labels")
