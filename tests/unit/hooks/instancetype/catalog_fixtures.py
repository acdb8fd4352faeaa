"""The catalog decorator's JSON fixtures: one file per case in `catalog_cases` (their
form: `tests.unit.hooks.fixture_runner`). Regenerate after editing a case:
`python -m tests.unit.hooks.instancetype.catalog_fixtures`."""

from __future__ import annotations

from pathlib import Path

from tests.unit.hooks.fixture_runner import write_fixtures
from tests.unit.hooks.instancetype.catalog_cases import CASES

DIRECTORY = Path(__file__).parent / "catalog_fixtures"

if __name__ == "__main__":
    write_fixtures(DIRECTORY, CASES)
