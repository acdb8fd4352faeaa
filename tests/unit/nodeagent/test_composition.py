"""`nodeagent serve` is one composition root (issue #31): every part is built with its
collaborators passed in, so nothing is wired by setting an attribute of a part once built."""

from __future__ import annotations

import ast
import inspect

from nodeagent import cli


def _assigned_attributes(function: ast.FunctionDef) -> list[str]:
    targets: list[ast.expr] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            targets.extend(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets.append(node.target)
    return [
        f"{ast.unparse(target)} (line {target.lineno})"
        for target in targets
        if isinstance(target, ast.Attribute)
    ]


def _function(source: str) -> ast.FunctionDef:
    [function] = ast.parse(source).body
    assert isinstance(function, ast.FunctionDef)
    return function


def test_serve_sets_no_attribute_of_a_part_it_built() -> None:
    assert _assigned_attributes(_function(inspect.getsource(cli.serve))) == []


def test_the_scan_sees_an_attribute_set_after_construction() -> None:
    wired = "def serve():\n    reporter = object()\n    reporter.pods = list\n"
    assert _assigned_attributes(_function(wired)) == ["reporter.pods (line 3)"]
