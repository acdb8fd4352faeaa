"""The flavor hook's JSON fixtures: one file per case in `cases_node` / `cases_pools`, in the
shared form (`tests.unit.hooks.fixture_runner`): `path`, `request` (or `rawRequest`), `status`,
`errorField`, and `response`, the hook's whole answer, matched exactly.

Many cases are written about one part of the answer only, and say so with these keys (kept in
the files, and checked against `response` by `check_parts`):

- `labels`: the answer's labels, exactly;
- `attachmentNames`: `{kind: [names]}` of every attachment returned, exactly;
- `exact`: `{"Kind/name": object}` attachments that must be returned exactly so;
- `attachments`: `{"Kind/name": subset}`: maps match key by key (`"<absent>"` = key missing),
  lists and scalars match exactly;
- `finalized`, `resyncAfterSeconds`: those fields of the answer.

Such a case gets its whole `response` recorded when its file is written, from the hook itself,
and only once its parts hold against it: the parts say what the case is about, the response
catches every other change. Regenerate after editing a case:
`python -m tests.unit.hooks.flavor.fixtures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hooks.flavor import node, pools
from hooks.recheck import with_write_recheck
from hooks.request import DecoratorRequest, parse_shallow
from tests.unit.hooks.fixture_runner import write_fixtures
from tests.unit.hooks.flavor import cases_node, cases_pools

DIRECTORY = Path(__file__).parent / "fixtures"
ABSENT = "<absent>"
PARTS = ("labels", "attachmentNames", "exact", "attachments", "finalized", "resyncAfterSeconds")


def _match(expected: Any, actual: Any, where: str) -> None:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            if value == ABSENT:
                assert key not in actual, f"{where}.{key} should be absent"
            else:
                assert key in actual, f"{where}.{key} is missing"
                _match(value, actual[key], f"{where}.{key}")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


def _by_name(answer: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for obj in answer.get("attachments", []):
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        assert key not in found, f"{key} returned twice"
        found[key] = obj
    return found


def check_parts(fixture: dict[str, Any], answer: dict[str, Any]) -> None:
    """The parts a case is about hold in `answer` (the hook's answer as the shell sends it)."""
    if "labels" in fixture:
        assert answer["labels"] == fixture["labels"]
    for key in ("finalized", "resyncAfterSeconds"):
        if key in fixture:
            assert answer.get(key) == fixture[key], key
    attached = _by_name(answer)
    if "attachmentNames" in fixture:
        names: dict[str, list[str]] = {}
        for kind_name in attached:
            kind, name = kind_name.split("/", 1)
            names.setdefault(kind, []).append(name)
        assert {k: sorted(v) for k, v in names.items()} == fixture["attachmentNames"]
    for key, expected in fixture.get("exact", {}).items():
        assert key in attached, f"{key} was not returned"
        assert attached[key] == expected, key
    for key, expected in fixture.get("attachments", {}).items():
        assert key in attached, f"{key} was not returned"
        _match(expected, attached[key], key)


def _hook_answer(case: dict[str, Any]) -> dict[str, Any]:
    """The hook's own answer to the case's request, parsed as its route parses it."""
    if case["path"] == "/node/sync":
        return node.sync(DecoratorRequest.parse(case["request"]))
    if case["path"] in ("/flavors/sync", "/flavors/finalize"):
        return pools.sync(parse_shallow(case["request"]))
    raise ValueError(f"no response recorded for a case on {case['path']}")


def completed(case: dict[str, Any]) -> dict[str, Any]:
    """The case with its whole `response` (see the module doc)."""
    if "response" in case or "request" not in case or case.get("status", 200) != 200:
        return case
    answer = _hook_answer(case)
    check_parts(case, with_write_recheck(case["request"], answer))
    return {**case, "response": answer}


def all_cases() -> dict[str, dict[str, Any]]:
    cases = {**cases_node.CASES, **cases_pools.CASES}
    return {name: completed(case) for name, case in cases.items()}


if __name__ == "__main__":
    write_fixtures(DIRECTORY, all_cases())
