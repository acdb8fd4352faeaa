"""The flavor hook's JSON fixtures: one file per case in `cases_node` / `cases_pools`.

A fixture holds a Metacontroller request body and what the answer must contain:

- `path`: the route; `request` (a JSON body) or `rawRequest` (bytes sent as they are);
- `status`: the HTTP status (default 200); `errorField`: the `field` a 400 must name;
- `response`: the whole answer, exactly; `labels`: the answer's labels, exactly;
- `attachmentNames`: `{kind: [names]}` of every attachment returned, exactly;
- `exact`: `{"Kind/name": object}` attachments that must be returned exactly so;
- `attachments`: `{"Kind/name": subset}`: maps match key by key (`"<absent>"` = key missing),
  lists and scalars match exactly;
- `finalized`: the answer's `finalized`.

Regenerate after editing a case: `python -m tests.unit.hooks.flavor.fixtures`. The files are the
tests' input; `test_fixtures` fails while a case and its file disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.hooks.flavor import cases_node, cases_pools

DIRECTORY = Path(__file__).parent / "fixtures"


def all_cases() -> dict[str, dict[str, Any]]:
    return {**cases_node.CASES, **cases_pools.CASES}


def render(case: dict[str, Any]) -> str:
    return json.dumps(case, indent=1, sort_keys=True) + "\n"


def write() -> None:
    DIRECTORY.mkdir(exist_ok=True)
    for stale in DIRECTORY.glob("*.json"):
        stale.unlink()
    for name, case in all_cases().items():
        (DIRECTORY / f"{name}.json").write_text(render(case))


if __name__ == "__main__":
    write()
