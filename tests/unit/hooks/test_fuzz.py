"""Every hook and webhook route, driven with mutated fixtures and raw bodies (hypothesis).

Properties, whatever the mutation:
- no 5xx: a malformed request is a 400 naming the field, a webhook's refusal an AdmissionReview;
- a webhook answers every review whose `request.uid` it can read with a 200 AdmissionReview that
  echoes the uid, never a 4xx or 5xx, and never an internal-error refusal (every webhook of
  every app, each from a review it admits: `webhook_cases.WEBHOOKS`);
- the Pod and Job webhooks never allow a Pod that breaks a request rule, whatever else changes;
- every request is answered in bounded time (a generous ceiling: it catches loops driven by one
  field, not slowness).

`make test` runs the fast profile (FUZZ_EXAMPLES per route); `make fuzz` the long one
(GPUSTACK_FUZZ=long). docs/reliability.md records what the runs found.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks.admissionreview import review_uid
from hooks.entrance.app import app as entrance_app
from hooks.flavor.app import app as flavor_app
from hooks.fleet.app import app as fleet_app
from hooks.instancetype.app import app as instancetype_app
from hooks.queue.app import app as queue_app
from tests.unit.hooks.admission.helpers import CATALOG, GPU, QUEUE, review
from tests.unit.hooks.admission.helpers import client as admission_client
from tests.unit.hooks.webhook_cases import WEBHOOKS

LONG = os.environ.get("GPUSTACK_FUZZ") == "long"
FUZZ_EXAMPLES = 2000 if LONG else 40
CEILING_SECONDS = 5.0
HOOKS = Path(__file__).parent
APPS: dict[str, Flask] = {
    "queue": queue_app,
    "entrance": entrance_app,
    "fleet": fleet_app,
    "flavor": flavor_app,
    "instancetype": instancetype_app,
}
ADMISSION = admission_client(CATALOG).application
SL = GPU + ".sliced"


def _fixture_requests() -> dict[tuple[str, str], list[Any]]:
    """(hook, route) -> the request bodies of its shipped fixtures."""
    out: dict[tuple[str, str], list[Any]] = {}
    for hook in APPS:
        for folder in ("fixtures", "catalog_fixtures"):
            for path in sorted((HOOKS / hook / folder).glob("*.json")):
                case = json.loads(path.read_text())
                if isinstance(case.get("request"), dict) and "path" in case:
                    out.setdefault((hook, case["path"]), []).append(case["request"])
    return out


FIXTURES = _fixture_requests()


def _pod(limits: dict[str, str], containers: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "containers": [
                {"name": f"c{n}", "image": "x", "resources": {"limits": dict(limits)}}
                for n in range(containers)
            ]
        },
    }


GOOD_PODS = [_pod({GPU: "1"}), _pod({SL: "1", SL + ".memory-percentage": "20"})]
# Each breaks a request rule the Pod webhook enforces: two cards of slices, two families, a
# percentage above 100, a slice with no size.
RULE_BREAKING = [
    _pod({SL: "2", SL + ".memory-percentage": "20"}),
    _pod({GPU: "1", GPU + ".shared": "1"}),
    _pod({SL: "1", SL + ".memory-percentage": "200"}),
    _pod({SL: "1"}),
]


def _job(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "labels": dict(pod["metadata"]["labels"])},
        "spec": {"template": {"metadata": {}, "spec": copy.deepcopy(pod["spec"])}},
    }


ADMISSION_REQUESTS: dict[str, list[Any]] = {
    "/mutate-pods": [review(p) for p in GOOD_PODS + RULE_BREAKING],
    "/mutate-jobs": [review(_job(p), resource="jobs") for p in GOOD_PODS + RULE_BREAKING],
}

ROUTES = sorted(FIXTURES) + [("admission", route) for route in ADMISSION_REQUESTS]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "1", "1e9999999", "10Gi", "-1", "true", "None", "\ud800"])
    # Quantities out of every range the chain reads (the API server keeps them all).
    | st.sampled_from(["10e9999999", "1e308", "9223372036854775808", "0.5", "1" * 80]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _places(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON document (dict keys and list indexes)."""
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _places(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _places(value, (*path, index))


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


@st.composite
def mutated(draw: st.DrawFn, body: Any, avoid: tuple[tuple[Any, ...], ...] = ()) -> Any:
    """`body` with 1-3 random edits: a value replaced by any JSON, a key or item removed, or a
    key added. Each path of `avoid`, what lies below it and what holds it are left alone."""
    body = copy.deepcopy(body)

    def touches(place: tuple[Any, ...]) -> bool:
        return any(place[: len(a)] == a or a[: len(place)] == place for a in avoid)

    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in _places(body) if p and not touches(p)]
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = _at(body, path[:-1])
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "remove":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return body


def _app(hook: str) -> Flask:
    return ADMISSION if hook == "admission" else APPS[hook]


def _requests(hook: str, route: str) -> list[Any]:
    return ADMISSION_REQUESTS[route] if hook == "admission" else FIXTURES[(hook, route)]


def _send(app: Flask, route: str, data: bytes | str) -> tuple[int, Any]:
    started = time.monotonic()
    reply = app.test_client().post(route, data=data, content_type="application/json")
    elapsed = time.monotonic() - started
    assert elapsed < CEILING_SECONDS, f"{route} took {elapsed:.1f}s"
    return reply.status_code, reply.get_json(silent=True)


def _check(route: str, body: Any, status: int, answer: Any) -> None:
    assert status < 500, (route, answer)
    assert isinstance(answer, dict), (route, status, answer)
    if status == 200 and isinstance(body, dict) and "response" in answer:
        uid = (body.get("request") or {}).get("uid")
        assert answer["response"].get("uid") == uid


PROFILE = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize(("hook", "route"), ROUTES, ids=[f"{h}{r}" for h, r in ROUTES])
@PROFILE
@given(data=st.data())
def test_mutated_requests_are_never_a_5xx(hook: str, route: str, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(_requests(hook, route)))
    body = data.draw(mutated(base))
    try:
        raw = json.dumps(body)
    except UnicodeEncodeError:
        return
    status, answer = _send(_app(hook), route, raw)
    _check(route, body, status, answer)


@pytest.mark.parametrize(("hook", "route"), ROUTES, ids=[f"{h}{r}" for h, r in ROUTES])
@PROFILE
@given(raw=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_raw_bodies_are_never_a_5xx(hook: str, route: str, raw: bytes) -> None:
    status, answer = _send(_app(hook), route, raw)
    assert status < 500, (route, answer)


# Where a mutation may land without changing what the Pod asks for: its metadata (the queue label
# kept), its other fields, and the container's other fields.
KEEP = (
    ("request", "object", "metadata", "labels", "kueue.x-k8s.io/queue-name"),
    ("request", "object", "spec", "containers", 0, "resources"),
    ("request", "object", "spec", "containers", 0, "name"),
    ("request", "object", "spec", "template", "spec", "containers", 0, "resources"),
    ("request", "object", "spec", "template", "spec", "containers", 0, "name"),
    ("request", "operation"),
    ("request", "uid"),
    ("request", "object", "kind"),
    ("request", "object", "apiVersion"),
    ("apiVersion",),
    ("kind",),
)


@pytest.mark.parametrize("route", sorted(ADMISSION_REQUESTS))
@PROFILE
@given(data=st.data())
def test_a_rule_breaking_pod_is_never_allowed(route: str, data: st.DataObject) -> None:
    broken = RULE_BREAKING if route == "/mutate-pods" else [_job(p) for p in RULE_BREAKING]
    resource = "pods" if route == "/mutate-pods" else "jobs"
    base = review(data.draw(st.sampled_from(broken)), resource=resource)
    body = data.draw(mutated(base, avoid=KEEP))
    try:
        raw = json.dumps(body)
    except UnicodeEncodeError:
        return
    status, answer = _send(ADMISSION, route, raw)
    assert status < 500, answer
    if status == 200:
        assert answer["response"]["allowed"] is False, (body, answer)


# Where a mutation may not land for the review to stay readable: its uid.
UID = (("request", "uid"),)


@pytest.mark.parametrize("name", sorted(WEBHOOKS))
@PROFILE
@given(data=st.data())
def test_a_readable_review_is_always_answered_200(name: str, data: st.DataObject) -> None:
    """The API server reports any non-200 as "failed calling webhook ... for an unknown reason"
    and drops the message: whatever the object holds, the answer is a review."""
    webhook = WEBHOOKS[name]
    operation = data.draw(st.sampled_from(["CREATE", "UPDATE"]))
    body = data.draw(mutated(webhook.body(operation=operation), avoid=UID))
    try:
        raw = json.dumps(body)
    except UnicodeEncodeError:
        return
    status, answer = _send(webhook.app, webhook.route, raw)
    uid = review_uid(body)
    assert uid is not None
    assert status == 200, (body, answer)
    response = answer["response"]
    assert response["uid"] == uid
    refusal = response.get("status") or {}
    assert refusal.get("code") != 500, (body, answer)
    if not response["allowed"]:
        assert refusal.get("message"), answer
