"""Every citation of a document points at a file of this tree and a heading in it (#34).

A citation names the README or a file under `docs/` by its path from the repository root, then
one or more of its headings (or bold paragraph leads) in double quotes:
`docs/design/node-agent.md, "Allocate"` (the form docs/architecture.md, "Citing the docs",
documents). The design notes the code was first written
against were outside the repository and were cited by section number (`node-agent §4`); a
contributor who clones the project cannot follow those, so that form fails here, as does a path
the tree lacks, a heading its file lacks, and a relative Markdown link in the README or `docs/`
that leads nowhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()

SCANNED_SUFFIXES = (".py", ".md", ".yaml", ".yml")
# What is not the project's own text: environments, caches, build output, the testbed's run
# folder, and git's own files.
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        "build",
        "dist",
        "testbed-run",
    }
)

# The notes the project started from, cited by section: `node-agent §4`, `DESIGN §2`,
# `control-plane.md §3.6`, or a bare `§5.1` left over from one.
OLD_NOTE = r"(?:node-agent|control-plane|metacontroller|kueue|testbed|peers|vectors|DESIGN)"
OLD_SECTION = re.compile(rf"\b{OLD_NOTE}(?:\.md)?\s+§|§\s*\d")
# The reference vectors, cited by name before they were in the tree: `vectors.md "Flavors"`.
OLD_VECTORS = re.compile(r"(?<![\w/.-])vectors(?:\.md)?:?\s+\"")

# `docs/queues.md, "Kueue configuration"`, `README.md, "Install"`, and several headings of one
# file: `docs/design/node-agent.md, "Partitioned (MIG)", "Allocate"` or `..., "A" and "B"`.
CITATION = re.compile(
    r"(?<![\w/.-])(?P<path>(?:README|docs/[\w./-]+)\.md)"
    r"(?P<headings>(?:(?:,|,?\s+and)\s+\"[^\"]{1,120}\")*)"
)
HEADING_IN_CITATION = re.compile(r"\"([^\"]{1,120})\"")
MARKDOWN_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING_LINE = re.compile(r"^(#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
# A paragraph's bold lead, which the docs use as a heading inside a section:
# `**A record that cannot land holds up nobody.** Found on ...`.
BOLD_LEAD = re.compile(r"^\s*(?:[-*]\s+)?\*\*(?P<text>[^*]+?)[.:]?\*\*")
# A comment's continuation lines: joined so a citation wrapped across them reads whole.
COMMENT_CONTINUATION = re.compile(r"\n[ \t]*#[ \t]?")


@dataclass(frozen=True)
class Problem:
    """One citation or link that a reader cannot follow."""

    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


def headings(markdown: str) -> set[str]:
    """The headings and bold paragraph leads of a Markdown text (outside fenced code), as written
    and without backticks."""
    found: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING_LINE.match(line) or BOLD_LEAD.match(line)
        if match:
            text = match["text"]
            found.add(text)
            found.add(text.replace("`", ""))
    return found


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text (a bold lead has none, but an
    anchor that matches one is as easy to follow)."""
    slugs = set()
    for text in headings(markdown):
        slug = re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")
        slugs.add(slug)
    return slugs


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _one_line(heading: str) -> str:
    return " ".join(heading.split())


def problems_in(relative: str, text: str, tree: Path) -> Iterator[Problem]:
    """What in one file's text cites or links something `tree` does not have."""
    for pattern, why in (
        (OLD_SECTION, "a section number of a design note outside the repository"),
        (OLD_VECTORS, "the reference vectors by their old name"),
    ):
        for match in pattern.finditer(text):
            yield Problem(
                relative,
                _line_of(text, match.start()),
                f"{match.group(0)!r}: {why}; cite a file of the tree and its heading, "
                'e.g. docs/design/node-agent.md, "Allocate"',
            )
    joined = COMMENT_CONTINUATION.sub("\n", text) if relative.endswith(".py") else text
    for match in CITATION.finditer(joined):
        line = _line_of(joined, match.start())
        target = tree / match["path"]
        if not target.is_file():
            yield Problem(relative, line, f"{match['path']}: no such file in the tree")
            continue
        known = headings(target.read_text(encoding="utf-8"))
        for heading in HEADING_IN_CITATION.findall(match["headings"]):
            if _one_line(heading) not in known:
                yield Problem(relative, line, f'{match["path"]} has no heading "{heading}"')
    if relative.endswith(".md") and (relative == "README.md" or relative.startswith("docs/")):
        yield from _link_problems(relative, text, tree)


def _link_problems(relative: str, text: str, tree: Path) -> Iterator[Problem]:
    here = (tree / relative).parent
    for match in MARKDOWN_LINK.finditer(text):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL, not a file of the tree
        path_part, _, anchor = target.partition("#")
        line = _line_of(text, match.start())
        linked = (here / path_part).resolve() if path_part else tree / relative
        if tree.resolve() not in (linked, *linked.parents):
            yield Problem(relative, line, f"link {target!r} leaves the repository")
        elif not linked.exists():
            yield Problem(relative, line, f"link {target!r}: no such file in the tree")
        elif (
            anchor
            and linked.suffix == ".md"
            and anchor not in anchors(linked.read_text(encoding="utf-8"))
        ):
            yield Problem(relative, line, f"link {target!r}: no such heading")


def scanned_files(tree: Path) -> Iterator[Path]:
    """The project's own text files under `tree`."""
    for folder, dirs, files in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith(SCANNED_SUFFIXES):
                yield Path(folder) / name


def tree_problems(tree: Path) -> list[Problem]:
    found: list[Problem] = []
    for path in scanned_files(tree):
        relative = path.relative_to(tree).as_posix()
        if relative == THIS_FILE:
            continue  # its examples of wrong citations are wrong on purpose
        found.extend(problems_in(relative, path.read_text(encoding="utf-8"), tree))
    return found


def test_every_citation_and_link_in_the_tree_resolves() -> None:
    problems = tree_problems(ROOT)
    assert not problems, "\n".join(str(problem) for problem in problems)


def test_the_design_notes_are_in_the_tree() -> None:
    # The code's citations lean on these; the test above checks each heading it names.
    for name in ("control-plane.md", "node-agent.md", "vectors.md"):
        assert (ROOT / "docs" / "design" / name).is_file()


# --- the checker on citations that must fail ------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "docs" / "design").mkdir(parents=True)
    (tmp_path / "docs" / "design" / "node-agent.md").write_text(
        "# Node side\n\n## Allocate\n\n### Visibility `Allocate`\n\n```\n# not a heading\n```\n"
    )
    (tmp_path / "README.md").write_text("# Project\n\n## Install\n")
    return tmp_path


def _problems(tree: Path, relative: str, text: str) -> list[str]:
    return [problem.what for problem in problems_in(relative, text, tree)]


def test_a_good_citation_passes(tree: Path) -> None:
    text = (
        '"""Rules (docs/design/node-agent.md, "Allocate", "Visibility Allocate"; README.md,\n'
        '"Install")."""\n'
        '# the grant (docs/design/node-agent.md, "Visibility\n'
        '# Allocate") is written first\n'
    )
    assert _problems(tree, "chain/rules.py", text) == []


@pytest.mark.parametrize(
    ("relative", "text", "expected"),
    [
        ("chain/rules.py", '"""Rules (node-agent §4)."""', "a section number of a design note"),
        ("chain/rules.py", "# as control-plane.md §3.6 says", "a section number of a design note"),
        ("chain/rules.py", "# the owner (§5.1) first", "a section number of a design note"),
        ("chain/rules.py", '# vectors.md "Flavors"', "the reference vectors by their old name"),
        ("chain/rules.py", '# docs/design/nodeagent.md, "Allocate"', "no such file in the tree"),
        ("chain/rules.py", '# docs/design/node-agent.md, "Allocation"', 'no heading "Allocation"'),
        ("docs/x.md", 'docs/design/node-agent.md, "Allocate" and "Ledger"', 'no heading "Ledger"'),
        ("docs/x.md", 'docs/design/node-agent.md, "not a heading"', 'no heading "not a heading"'),
        ("docs/x.md", "[the agent](design/nodeagent.md)", "no such file"),
        ("docs/x.md", "[allocate](design/node-agent.md#allocation)", "no such heading"),
        ("docs/x.md", "[outside](../../etc/passwd)", "leaves the repository"),
    ],
)
def test_a_wrong_citation_or_link_fails(
    tree: Path, relative: str, text: str, expected: str
) -> None:
    problems = _problems(tree, relative, text)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_a_good_markdown_link_passes(tree: Path) -> None:
    text = (
        "[allocate](design/node-agent.md#allocate), "
        "[visibility](design/node-agent.md#visibility-allocate), "
        "[readme](../README.md), [upstream](https://github.com/kubernetes-sigs/kueue)"
    )
    assert _problems(tree, "docs/x.md", text) == []
