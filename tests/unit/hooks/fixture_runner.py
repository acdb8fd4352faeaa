"""Runs one hook JSON fixture through a Flask test client, the way Metacontroller would post it.

A fixture holds `path`, `request` (or `rawRequest`, sent as is), `status` (default 200), and
either `response` (the whole answer) or, for a refusal, `errorField` (the field the 400 names).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient


def check_fixture(client: FlaskClient, path: Path, answer_key: str) -> None:
    """Post the fixture; on a refusal, `answer_key` (the map the hook answers, e.g.
    `attachments`) must be absent: a 200 without it would make Metacontroller delete children."""
    fixture: dict[str, Any] = json.loads(path.read_text())
    data = fixture["rawRequest"] if "rawRequest" in fixture else json.dumps(fixture["request"])
    reply = client.post(fixture["path"], data=data, content_type="application/json")
    answer = reply.get_json(silent=True)
    assert reply.status_code == fixture.get("status", 200), answer
    if reply.status_code != 200:
        assert isinstance(answer, dict) and answer["error"], answer
        assert answer_key not in answer
        if "errorField" in fixture:
            assert answer.get("field") == fixture["errorField"], answer
        return
    assert answer == fixture["response"]


def routes(files: list[Path]) -> set[str]:
    return {json.loads(f.read_text())["path"] for f in files}
