"""Every fleet fixture through the Flask app, as Metacontroller would send it."""

from __future__ import annotations

from hooks.fleet.app import app
from tests.unit.hooks.fixture_runner import GeneratedFixtures, fixture_tests
from tests.unit.hooks.fleet.cases import CASES
from tests.unit.hooks.fleet.fixtures import DIRECTORY

(
    test_a_file_for_every_case,
    test_fixture_file_is_current,
    test_fixture,
    test_every_route_has_a_fixture,
) = fixture_tests(
    GeneratedFixtures(
        app,
        DIRECTORY,
        CASES,
        "attachments",
        frozenset({"/sync", "/status/sync", "/status/customize"}),
        "tests.unit.hooks.fleet.fixtures",
    )
)
