"""Every entrance fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hooks.entrance.app import app

FILES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_fixture(path: Path) -> None:
    fixture: dict[str, Any] = json.loads(path.read_text())
    data = fixture["rawRequest"] if "rawRequest" in fixture else json.dumps(fixture["request"])
    reply = app.test_client().post(fixture["path"], data=data, content_type="application/json")
    answer = reply.get_json(silent=True)
    assert reply.status_code == fixture.get("status", 200), answer
    if reply.status_code != 200:
        # Never a 200 without attachments on bad input: a JSON error that says what is wrong.
        assert isinstance(answer, dict) and answer["error"], answer
        assert "attachments" not in answer
        if "errorField" in fixture:
            assert answer["field"] == fixture["errorField"], answer
        return
    assert answer == fixture["response"]


def test_every_route_has_a_fixture() -> None:
    routes = {json.loads(f.read_text())["path"] for f in FILES}
    assert routes == {"/sync", "/customize"}
