"""The fleet hooks' JSON fixtures: one file per case in `cases` (their form:
`tests.unit.hooks.fixture_runner`). Regenerate after editing a case:
`python -m tests.unit.hooks.fleet.fixtures`."""

from __future__ import annotations

from pathlib import Path

from tests.unit.hooks.fixture_runner import write_fixtures
from tests.unit.hooks.fleet.cases import CASES

DIRECTORY = Path(__file__).parent / "fixtures"

if __name__ == "__main__":
    write_fixtures(DIRECTORY, CASES)
