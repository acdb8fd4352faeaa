"""Every entrance fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hooks.entrance.app import app
from tests.unit.hooks.fixture_runner import check_fixture, routes

FILES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_fixture(path: Path) -> None:
    check_fixture(app.test_client(), path, "attachments")


def test_every_route_has_a_fixture() -> None:
    assert routes(FILES) == {"/sync", "/customize"}
