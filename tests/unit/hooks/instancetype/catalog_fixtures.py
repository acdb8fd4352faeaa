"""The catalog decorator's JSON fixtures: one file per case in `catalog_cases`.

Same form as the status hook's fixtures (see `fixtures`). Regenerate after editing a case:
`python -m tests.unit.hooks.instancetype.catalog_fixtures`; `test_catalog` fails while a case
and its file disagree.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.hooks.instancetype.catalog_cases import CASES
from tests.unit.hooks.instancetype.fixtures import render

DIRECTORY = Path(__file__).parent / "catalog_fixtures"


def write() -> None:
    DIRECTORY.mkdir(exist_ok=True)
    for stale in DIRECTORY.glob("*.json"):
        stale.unlink()
    for name, case in CASES.items():
        (DIRECTORY / f"{name}.json").write_text(render(case))


if __name__ == "__main__":
    write()
