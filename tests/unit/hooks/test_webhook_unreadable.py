"""Every admission webhook answers a review it can read with a 200 AdmissionReview, whatever the
object holds: a value it cannot read (a quantity out of every range, a wrong JSON type, a missing
field) is a refusal naming the field. A 4xx is left for a body that is no review at all.

The API server reports any non-200 as "failed calling webhook ... the server rejected our request
for an unknown reason" and drops the message, so a 400 naming the field never reached the user.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask import Flask

from hooks import metrics
from hooks.admissionreview import MESSAGE_LIMIT, unreadable
from hooks.transport import make_app
from tests.unit.hooks.admission.helpers import review
from tests.unit.hooks.test_webhook_decisions import counted
from tests.unit.hooks.webhook_cases import WEBHOOKS, Webhook

UID = review(None)["request"]["uid"]
CASES = [(name, value) for name, webhook in WEBHOOKS.items() for value in webhook.bad]


def _post(app: Flask, route: str, raw: str | bytes) -> tuple[int, Any]:
    reply = app.test_client().post(route, data=raw, content_type="application/json")
    return reply.status_code, reply.get_json(silent=True)


def _refusal(webhook: Webhook, body: Any) -> dict[str, Any]:
    """The webhook's answer to `body`: a 200 review refusing it, echoing the uid."""
    status, answer = _post(webhook.app, webhook.route, json.dumps(body))
    assert status == 200, answer
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == UID
    assert response["allowed"] is False, response
    assert "patch" not in response  # a mutating webhook never patches what it cannot read
    return response


@pytest.mark.parametrize("name", sorted(WEBHOOKS))
def test_each_webhook_admits_its_base_review(name: str) -> None:
    """The cases below change one value of a review that is admitted as it is."""
    webhook = WEBHOOKS[name]
    status, answer = _post(webhook.app, webhook.route, json.dumps(webhook.body()))
    assert status == 200 and answer["response"]["allowed"] is True, answer


@pytest.mark.parametrize(("name", "value"), CASES, ids=[f"{n}-{v!r:.24}" for n, v in CASES])
def test_a_bad_value_is_a_200_refusal_naming_the_field(name: str, value: Any) -> None:
    webhook = WEBHOOKS[name]
    started = time.monotonic()
    status = _refusal(webhook, webhook.body(value))["status"]
    assert time.monotonic() - started < 1.0  # `10e9999999` is compared as written, never built
    assert status["code"] in (400, 422) and status["reason"], status
    assert webhook.field in status["message"], status
    assert len(status["message"]) <= MESSAGE_LIMIT + 20  # a 5,000-digit value is not quoted whole


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("10e9999999", 'Invalid value: "10e9999999": has an exponent beyond 10^±30'),
        (
            "9223372036854775808",
            'Invalid value: "9223372036854775808": asks for more than 2147483647, the most a Pod',
        ),
        ("-1", 'Invalid value: "-1": must be a whole number of at least 0'),
        ("0.5", 'Invalid value: "0.5": must be a whole number'),
        ("abc", 'Invalid value: "abc": is not a quantity'),
        (["1"], "Invalid value: expected a quantity"),
    ],
)
def test_the_pod_refusal_says_the_rule_broken(value: Any, rule: str) -> None:
    webhook = WEBHOOKS["pods"]
    message = _refusal(webhook, webhook.body(value))["status"]["message"]
    assert message.startswith(f"{webhook.field}: {rule}"), message


def test_a_value_read_from_requests_is_named_there() -> None:
    webhook = WEBHOOKS["pods"]
    body = webhook.body()
    resources = body["request"]["object"]["spec"]["containers"][0]["resources"]
    resources["requests"] = {"nvidia.com/gpu": "1e308"}
    message = _refusal(webhook, body)["status"]["message"]
    assert message.startswith("spec.containers[0].resources.requests[nvidia.com/gpu]: "), message


@pytest.mark.parametrize("name", sorted(WEBHOOKS))
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"operation": None}, "request: 'operation' is a required property"),
        ({"operation": "PATCH"}, "request.operation: "),
        ({"namespace": 5}, "request.namespace: "),
        ({"object": ["a", "list"]}, "request.object: "),
    ],
    ids=["operation-missing", "operation-unknown", "namespace-a-number", "object-a-list"],
)
def test_a_review_with_a_bad_envelope_is_a_200_refusal(
    name: str, change: dict[str, Any], field: str
) -> None:
    """Readable as a review (its uid), not as one the webhook can judge: the review's own field
    is named, with 400 BadRequest (nothing the user wrote)."""
    webhook = WEBHOOKS[name]
    body = webhook.body()
    body["request"].update(change)
    body["request"] = {k: v for k, v in body["request"].items() if v is not None}
    status = _refusal(webhook, body)["status"]
    assert status["code"] == 400 and status["reason"] == "BadRequest", status
    assert status["message"].startswith(field), status


@pytest.mark.parametrize("name", sorted(WEBHOOKS))
def test_a_missing_field_is_a_200_refusal_naming_it(name: str) -> None:
    """The object without `spec` where the webhook needs it (or, where it reads nothing else,
    the kvcache webhook's containers): refused, naming what is missing."""
    webhook = WEBHOOKS[name]
    body = webhook.body()
    obj = body["request"]["object"]
    if name == "instancetypes-defaulted":
        obj["metadata"]["labels"] = ["not", "a", "map"]
        expected = "metadata.labels"
    elif name == "kvcache":
        obj["spec"]["containers"] = [{"name": "engine", "command": "vllm serve m"}]
        expected = "spec.containers[0].command"
    elif name == "instancetypes-validated":
        del obj["spec"]["os"]
        expected = "spec.os: required"
    elif name in ("instances-defaulted", "instances-validated"):
        del obj["spec"]["instanceType"]
        expected = "spec.instanceType: required"
    elif name == "workloads":
        del obj["spec"]["podSets"][0]["template"]
        expected = "spec.podSets[0].template: required"
    else:
        del obj["spec"]
        expected = "spec.template.spec: expected" if name == "jobs" else "spec: expected"
    assert expected in _refusal(webhook, body)["status"]["message"]


@pytest.mark.parametrize("name", sorted(WEBHOOKS))
@pytest.mark.parametrize(
    "raw",
    [
        b"{truncated",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        json.dumps({"kind": "AdmissionReview", "request": {"operation": "CREATE"}}),
        json.dumps({"kind": "AdmissionReview", "request": {"uid": 7, "operation": "CREATE"}}),
        json.dumps(["not", "an", "object"]),
    ],
    ids=["not-json", "no-request", "no-uid", "uid-not-a-string", "not-an-object"],
)
def test_a_body_that_is_no_review_is_a_400(name: str, raw: str | bytes) -> None:
    """Without a uid there is nothing to answer a review with: the error names the field."""
    webhook = WEBHOOKS[name]
    status, answer = _post(webhook.app, webhook.route, raw)
    assert status == 400, answer
    assert answer["error"]


def test_a_created_workload_is_refused_but_an_update_left_unchanged() -> None:
    """An UPDATE of a Workload stored before the rule must go through: Kueue removes its
    finalizer with one."""
    webhook = WEBHOOKS["workloads"]
    status, answer = _post(webhook.app, webhook.route, json.dumps(webhook.body("10e9999999")))
    assert status == 200 and answer["response"]["allowed"] is False
    body = webhook.body("10e9999999", operation="UPDATE")
    status, answer = _post(webhook.app, webhook.route, json.dumps(body))
    assert status == 200 and answer["response"] == {"uid": UID, "allowed": True}


def _crashing(body: dict[str, Any]) -> dict[str, Any]:
    raise TypeError("a bug")


def test_a_webhook_that_fails_refuses_the_review_as_an_internal_error() -> None:
    """A bug is logged with its traceback and still answered as a review, so the user reads it;
    a Metacontroller route keeps its 500 (a 200 there would delete what the hook owns)."""
    app = make_app("probe", {"/mutate": _crashing, "/sync": _crashing}, frozenset({"/mutate"}))
    status, answer = _post(app, "/mutate", json.dumps(review({})))
    assert status == 200
    refusal = answer["response"]
    assert refusal["uid"] == UID and refusal["allowed"] is False
    assert refusal["status"]["code"] == 500 and refusal["status"]["reason"] == "InternalError"
    assert "TypeError: a bug" in refusal["status"]["message"]
    status, answer = _post(app, "/sync", json.dumps(review({})))
    assert status == 500


def test_an_unreadable_review_is_counted_under_its_own_rule() -> None:
    webhook = WEBHOOKS["pods"]
    web = webhook.app.test_client()
    before = counted(web, "admission", webhook.route, "denied", "unreadable")
    _refusal(webhook, webhook.body("10e9999999"))
    assert counted(web, "admission", webhook.route, "denied", "unreadable") == before + 1
    answer = unreadable(UID, "$.request.object.spec", "expected an object")
    assert metrics.decision(answer) == ("denied", ("unreadable",))
    assert answer["response"]["status"]["message"] == "spec: expected an object"
    long = unreadable(UID, "$.request.object.spec", "x" * 10 * MESSAGE_LIMIT)
    assert len(long["response"]["status"]["message"]) < MESSAGE_LIMIT + 20
