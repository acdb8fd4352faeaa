"""Every status-hook fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from hooks.instancetype.app import app
from tests.unit.hooks.instancetype.cases import CASES
from tests.unit.hooks.instancetype.fixtures import DIRECTORY, render

FILES = sorted(DIRECTORY.glob("*.json"))


@pytest.fixture(scope="module")
def client() -> Iterator[FlaskClient]:
    yield app.test_client()


def test_a_file_for_every_case() -> None:
    assert {path.stem for path in FILES} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_file_is_current(name: str) -> None:
    """The JSON file is what the case renders to (regenerate with `-m ...fixtures`)."""
    assert (DIRECTORY / f"{name}.json").read_text() == render(CASES[name])


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_fixture(client: FlaskClient, path: Path) -> None:
    fixture: dict[str, Any] = json.loads(path.read_text())
    data = fixture["rawRequest"] if "rawRequest" in fixture else json.dumps(fixture["request"])
    reply = client.post(fixture["path"], data=data, content_type="application/json")
    answer = reply.get_json(silent=True)
    assert reply.status_code == fixture.get("status", 200), answer
    if reply.status_code != 200:
        # Never a 200 (and never a null status) on bad input: a JSON error naming the field.
        assert isinstance(answer, dict) and answer["error"], answer
        assert "status" not in answer
        assert answer.get("field") == fixture.get("errorField"), answer
        return
    assert answer == fixture["response"]


def test_every_route_has_a_fixture() -> None:
    routes = {json.loads(f.read_text())["path"] for f in FILES}
    assert routes == {"/sync", "/customize"}
