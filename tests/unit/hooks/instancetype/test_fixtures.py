"""Every status-hook fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from hooks.instancetype.app import app
from tests.unit.hooks.fixture_runner import check_fixture, routes
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
    check_fixture(client, path, "status")


def test_every_route_has_a_fixture() -> None:
    assert routes(FILES) == {"/sync", "/customize"}
