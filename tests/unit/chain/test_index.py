"""chain/__init__.py indexes every module of the domain package, and names none it lacks."""

from __future__ import annotations

import re
from pathlib import Path

import chain

PACKAGE = Path(chain.__file__).parent
INDEX = chain.__doc__ or ""


def test_the_index_names_every_module_and_no_other() -> None:
    modules = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    mentioned = set(re.findall(r"`([a-z_]+)`", INDEX))
    assert modules - mentioned == set(), "add these to chain/__init__.py's index"
    entries = set(re.findall(r"^- `([a-z_]+)`", INDEX, re.MULTILINE))
    assert entries <= modules, f"the index names modules chain/ lacks: {entries - modules}"
