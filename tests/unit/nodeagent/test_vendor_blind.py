"""The node agent's engine (every module under `nodeagent/` outside `nodeagent/vendors/`) names
no manufacturer: what differs by manufacturer is asked of `nodeagent.vendors.registry`.

Why a scan of the source and not only an import rule: `.importlinter`'s engine-vendor-blind
contract sees imports, but most ways an engine can know a manufacturer are not imports: a
comparison with its name (`if name == "nvidia"`), a table keyed by it, its environment variable
(`NVIDIA_VISIBLE_DEVICES`), its PCI vendor id (`0x10de`), a class named for it. So every
identifier and every string literal of the engine's code is split into words (at `_`, `-`, `.`,
`/`, other punctuation and lower-to-upper case changes) and no word may be one of the built-in
manufacturers' names or PCI vendor ids (`chain.manufacturers`). An import of a manufacturer's
package names it too (`nodeagent.vendors.nvidia`), so the scan covers the import rule's ground as
well. Comments and docstrings are prose, not code: they may name a manufacturer to give an
example. A word is matched whole, so `amd64` (the x86-64 architecture's name) is not AMD.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from chain.manufacturers import manufacturers

ROOT = Path(__file__).resolve().parents[3]
ENGINE = ROOT / "nodeagent"
VENDORS = ENGINE / "vendors"
TABLE = manufacturers({})
NAMES = frozenset(TABLE)
VENDOR_IDS = frozenset(maker.pci_vendor.lower() for maker in TABLE.values())


def _words(text: str) -> set[str]:
    """Each run of letters and digits, whole (`MThreads`, `MetaX`) and split at case changes
    (`NvidiaNaming` -> nvidia, naming; `NVIDIA` -> nvidia; `amd64` stays one word)."""
    words = set()
    for part in re.findall(r"[A-Za-z0-9]+", text):
        words.add(part.lower())
        words.update(w.lower() for w in re.findall(r"[A-Z0-9]+(?![a-z])|[A-Z]?[a-z0-9]+", part))
    return words


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    """Where each string that stands alone as a statement starts (docstrings, and prose
    strings written the same way): a string token there is prose."""
    return {
        (node.lineno, node.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def manufacturer_words(source: str) -> list[tuple[int, str, str]]:
    """(line, word, token) for every manufacturer name or PCI vendor id the code of `source`
    names: its identifiers and its string literals, not its comments or docstrings."""
    prose = _docstrings(ast.parse(source))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            hits = sorted(word for word in _words(token.string) if word in NAMES)
        elif token.type == tokenize.STRING and token.start not in prose:
            hits = sorted(
                word
                for word in _words(token.string)
                if word in NAMES or word.removeprefix("0x") in VENDOR_IDS
            )
        else:
            continue
        found += [(token.start[0], word, token.string) for word in hits]
    return found


def engine_modules() -> list[Path]:
    return sorted(
        path for path in ENGINE.rglob("*.py") if VENDORS not in path.parents and path != VENDORS
    )


def test_the_engine_names_no_manufacturer() -> None:
    named = [
        f"{path.relative_to(ROOT)}:{line}: {word} in {token[:60]}"
        for path in engine_modules()
        for line, word, token in manufacturer_words(path.read_text(encoding="utf-8"))
    ]
    assert not named, (
        "the node agent's engine names a manufacturer; move the fact into its package under "
        "nodeagent/vendors/ behind the Vendor interface (docs/adding-a-manufacturer.md):\n"
        + "\n".join(named)
    )


def test_the_engine_is_what_the_scan_reads() -> None:
    # The detector loop, the plugin and the simulator are the engine's bulk: an empty or
    # misplaced glob would make the scan above pass on nothing.
    scanned = {path.relative_to(ENGINE).parts[0] for path in engine_modules()}
    assert {"detect", "plugin", "simulate", "cli.py", "preflight.py", "manifests.py"} <= scanned
    assert not any(VENDORS in path.parents for path in engine_modules())


def test_the_scan_finds_a_manufacturer_in_code() -> None:
    code = """
from nodeagent.vendors.ascend.grants import Ascend

class NvidiaNaming(MThreads):
    pass

def markers(name: str) -> str:
    if name == "hygon":
        return "dmi"
    return {"NVIDIA_VISIBLE_DEVICES": "all", "vendor": "0x10de"}["vendor"]
"""
    words = [(line, word) for line, word, _ in manufacturer_words(code)]
    assert words == [
        (2, "ascend"),
        (2, "ascend"),
        (4, "nvidia"),
        (4, "mthreads"),
        (8, "hygon"),
        (10, "nvidia"),
        (10, "0x10de"),
    ]


def test_prose_and_other_words_pass() -> None:
    code = '''"""Markers live in `<dir>-<mfr>` (NVIDIA's in the directory itself)."""

SYSCALLS = {"amd64": 62}  # x86-64's name, not AMD's
ASCENDING = sorted([2, 1])  # a word that merely starts like a manufacturer's name


def f() -> None:
    """Hygon's DMI knows cards by PCI address only."""
'''
    assert manufacturer_words(code) == []
