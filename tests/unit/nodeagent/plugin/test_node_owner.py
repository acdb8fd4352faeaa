"""`NodeState` is the one owner of the node's allocation state (issue #31): no module of the
agent but `node.py` reaches its mutex, reservations or visibility grants, and no module imports
another's private names. A scan of the source, so a shortcut added later fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import nodeagent

PACKAGE = Path(nodeagent.__file__).parent
OWNER = PACKAGE / "plugin" / "node.py"
PRIVATE_STATE = frozenset({"_mutex", "_reservations", "_grants", "_live_listeners", "_owner"})
"""`NodeState`'s private state, and the `Held` handle's way back to it."""


def _sources() -> list[Path]:
    """The agent's own modules (not the gRPC stubs generated into a hidden directory)."""
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if not any(part.startswith(".") for part in path.relative_to(PACKAGE).parts)
    )


def _reaches(tree: ast.AST, names: frozenset[str]) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in names
    ]


def test_only_the_owner_touches_the_node_state() -> None:
    reached = {
        f"{path.relative_to(PACKAGE)}:{line} .{attr}"
        for path in _sources()
        if path != OWNER
        for line, attr in _reaches(ast.parse(path.read_text()), PRIVATE_STATE)
    }
    assert reached == set()


def test_the_scan_sees_the_owner_itself() -> None:
    """The owner does reach them: the scan is not looking at nothing."""
    found = {attr for _, attr in _reaches(ast.parse(OWNER.read_text()), PRIVATE_STATE)}
    assert {"_mutex", "_reservations", "_grants"} <= found


def test_no_module_imports_another_modules_private_names() -> None:
    imported = {
        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module}.{alias.name}"
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    }
    assert imported == set()
