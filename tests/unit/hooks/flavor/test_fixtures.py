"""Every flavor fixture through the Flask app, as Metacontroller would send it, matched whole
(the shared runner); and the parts a case is about, against the answer it records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hooks.flavor.app import app
from hooks.recheck import with_write_recheck
from tests.unit.hooks.fixture_runner import GeneratedFixtures, fixture_tests
from tests.unit.hooks.flavor.fixtures import DIRECTORY, PARTS, all_cases, check_parts

CASES = all_cases()
# The fixtures of cases written about parts of the answer (the others match it whole).
ABOUT_PARTS = [
    path
    for path in sorted(DIRECTORY.glob("*.json"))
    if any(part in json.loads(path.read_text()) for part in PARTS)
]

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
        frozenset({"/node/sync", "/node/customize", "/flavors/sync", "/flavors/customize"}),
        "tests.unit.hooks.flavor.fixtures",
    )
)


@pytest.mark.parametrize("path", ABOUT_PARTS, ids=[path.stem for path in ABOUT_PARTS])
def test_the_parts_a_case_is_about_hold_in_its_response(path: Path) -> None:
    fixture = json.loads(path.read_text())
    check_parts(fixture, with_write_recheck(fixture["request"], fixture["response"]))
