"""Every route stops working on a request once its caller has given up on it (hooks.transport)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from hooks.transport import DEADLINE, make_app
from tests.unit.hooks.gunicorn_run import gunicorn
from tests.unit.hooks.slow_app import app as slow_app
from tests.unit.hooks.slow_app import spin


def test_a_route_past_its_deadline_answers_503_and_frees_the_worker() -> None:
    client = slow_app.test_client()
    start = time.monotonic()
    answer = client.post("/spin", json={})
    took = time.monotonic() - start
    assert answer.status_code == 503
    assert "gave up after 0.5 s" in answer.get_json()["error"]
    assert 0.5 <= took < 3
    # The timer is gone with the request: a later request is not interrupted, even one that
    # outlasts the old deadline.
    time.sleep(0.7)
    assert client.post("/worker", json={}).status_code == 200


def test_every_route_has_a_deadline_and_overrides_name_their_route() -> None:
    app = make_app("probe", {"/a": spin, "/b": spin}, deadlines={"/b": 2.0})
    assert app.config["ROUTE_DEADLINES"] == {"/a": DEADLINE, "/b": 2.0}


@pytest.fixture(scope="module")
def gunicorn_url() -> Iterator[str]:
    with gunicorn("tests.unit.hooks.slow_app:app", "--timeout=30") as (_, url):
        yield url


def test_gunicorns_sync_worker_keeps_serving_after_a_deadline(gunicorn_url: str) -> None:
    """Under the server the Deployments run: the same worker answers before and after a
    request it gave up on (gunicorn did not have to kill it)."""
    before = requests.post(f"{gunicorn_url}/worker", json={}, timeout=5).json()["pid"]
    start = time.monotonic()
    answer = requests.post(f"{gunicorn_url}/spin", json={}, timeout=10)
    assert answer.status_code == 503
    assert time.monotonic() - start < 3
    after = requests.post(f"{gunicorn_url}/worker", json={}, timeout=5).json()["pid"]
    assert after == before
