"""The status hook's JSON fixtures: one file per case in `cases`.

A fixture holds `description`, `path` (the route), `request` (a JSON body) or `rawRequest` (sent
as it is), and either `response` (the whole answer, exactly) or `status` (default 200) with
`errorField` (the `field` a 400 must name).

Regenerate after editing a case: `python -m tests.unit.hooks.instancetype.fixtures`. The files are
the tests' input; `test_fixtures` fails while a case and its file disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.hooks.instancetype.cases import CASES

DIRECTORY = Path(__file__).parent / "fixtures"


def render(case: dict[str, Any]) -> str:
    return json.dumps(case, indent=1, sort_keys=True) + "\n"


def write() -> None:
    DIRECTORY.mkdir(exist_ok=True)
    for stale in DIRECTORY.glob("*.json"):
        stale.unlink()
    for name, case in CASES.items():
        (DIRECTORY / f"{name}.json").write_text(render(case))


if __name__ == "__main__":
    write()
