"""Every JSON fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from hooks.flavor.app import app
from hooks.shell import with_write_recheck
from tests.unit.hooks.flavor.fixtures import DIRECTORY, all_cases, render

ABSENT = "<absent>"
FILES = sorted(DIRECTORY.glob("*.json"))


@pytest.fixture(scope="module")
def client() -> Iterator[FlaskClient]:
    yield app.test_client()


def _post(client: FlaskClient, fixture: dict[str, Any]) -> tuple[int, Any]:
    data = fixture["rawRequest"] if "rawRequest" in fixture else json.dumps(fixture["request"])
    reply = client.post(fixture["path"], data=data, content_type="application/json")
    return reply.status_code, reply.get_json(silent=True)


def _match(expected: Any, actual: Any, where: str) -> None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            if value == ABSENT:
                assert key not in actual, f"{where}.{key} should be absent"
            else:
                assert key in actual, f"{where}.{key} is missing"
                _match(value, actual[key], f"{where}.{key}")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


def _by_name(answer: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for obj in answer.get("attachments", []):
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        assert key not in found, f"{key} returned twice"
        found[key] = obj
    return found


def test_fixtures_exist_for_every_case() -> None:
    assert {path.stem for path in FILES} == set(all_cases())


@pytest.mark.parametrize("name", sorted(all_cases()))
def test_fixture_file_is_current(name: str) -> None:
    """The JSON file is what the case renders to (regenerate with `-m ...fixtures`)."""
    assert (DIRECTORY / f"{name}.json").read_text() == render(all_cases()[name])


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_fixture(client: FlaskClient, path: Path) -> None:
    fixture = json.loads(path.read_text())
    status, answer = _post(client, fixture)
    assert status == fixture.get("status", 200), answer
    assert isinstance(answer, dict), "every answer, error or not, is a JSON object"
    if status != 200:
        assert isinstance(answer.get("error"), str) and answer["error"]
        if "errorField" in fixture:
            assert answer.get("field") == fixture["errorField"], answer
        return

    if "response" in fixture:
        # The hook's own answer, plus the shell's quick resync while it changes the parent.
        assert answer == with_write_recheck(fixture["request"], fixture["response"])
    if "labels" in fixture:
        assert answer["labels"] == fixture["labels"]
    if "finalized" in fixture:
        assert answer.get("finalized") == fixture["finalized"]
    if "resyncAfterSeconds" in fixture:
        assert answer.get("resyncAfterSeconds") == fixture["resyncAfterSeconds"]
    attached = _by_name(answer)
    if "attachmentNames" in fixture:
        names: dict[str, list[str]] = {}
        for kind_name in attached:
            kind, name = kind_name.split("/", 1)
            names.setdefault(kind, []).append(name)
        assert {k: sorted(v) for k, v in names.items()} == fixture["attachmentNames"]
    for key, expected in fixture.get("exact", {}).items():
        assert key in attached, f"{key} was not returned"
        assert attached[key] == expected, key
    for key, expected in fixture.get("attachments", {}).items():
        assert key in attached, f"{key} was not returned"
        _match(expected, attached[key], key)
