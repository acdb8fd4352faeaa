"""The command-line conventions every entry point of the chain shares (docs/operations.md,
"Command-line conventions"): one exit status per kind of failure, `--version`, help on every
flag with its default, and a failure an operator can fix told in one line, never a traceback.

Exit statuses, the same for every process:

- 0 (`EXIT_OK`): done.
- 1 (`EXIT_FAILED`): the command's own answer is "no" (a stale generated file, a detection that
  could not measure, an allocation preflight would refuse); each command's help says which.
- 2 (`EXIT_USAGE`): a usage error: an unknown or malformed flag, a bad flag value, a bad
  `GPUSTACK_*` variable, an input file named on the command line that cannot be used.
- 3 (`EXIT_CONFIGURATION`): the API client's configuration: the kubeconfig is missing,
  unreadable, not YAML, has no current context or no server; the service account has no token;
  the API server refuses the credentials or its certificate.
- 4 (`EXIT_UNREACHABLE`): the API server did not answer at start-up (a few quick tries; once
  running, a process rides out an outage instead). Kubernetes restarts the container with its
  back-off, so the Pod's last state names the reason.

This module is the one in `chain` that reads anything: its own version (`release.version`).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NoReturn

from chain.release import DISTRIBUTION, version

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIGURATION = 3
EXIT_UNREACHABLE = 4


class Failure(Exception):
    """A failure the operator fixes, not a bug: `run` prints it as one line, `LABEL: message`,
    and exits with `code`; no traceback, which would bury the one line that matters."""

    code: ClassVar[int] = EXIT_FAILED


class UsageError(Failure):
    code = EXIT_USAGE


class ConfigurationError(Failure):
    code = EXIT_CONFIGURATION


class Unreachable(Failure):
    code = EXIT_UNREACHABLE


def exits(failed: str | None = None, kube: bool = False) -> str:
    """The `exit status:` epilog of a command's help: the codes it can end with."""
    lines = [f"  {EXIT_OK}  done"]
    if failed:
        lines.append(f"  {EXIT_FAILED}  {failed}")
    lines.append(f"  {EXIT_USAGE}  usage error (a bad flag or value)")
    if kube:
        lines.append(
            f"  {EXIT_CONFIGURATION}  configuration error (kubeconfig, service account, "
            "credentials refused)"
        )
        lines.append(f"  {EXIT_UNREACHABLE}  the API server did not answer at start-up")
    return "exit status:\n" + "\n".join(lines)


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions and epilogs filled paragraph by paragraph, a paragraph laid out by hand (a
    list, an indented line) kept as written; and every flag's default after its help, like
    `ArgumentDefaultsHelpFormatter`, except where there is nothing to show (no value, an off
    switch, an empty list) or the help already tells the default in words (a default computed
    from the environment reads better explained than printed)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = text.strip("\n").split("\n\n")
        return "\n\n".join(
            paragraph
            if any(line.startswith((" ", "-")) for line in paragraph.splitlines())
            else textwrap.fill(
                " ".join(paragraph.split()),
                width,
                initial_indent=indent,
                subsequent_indent=indent,
            )
            for paragraph in paragraphs
        )

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default == []:
            return text
        if default is argparse.SUPPRESS or not (action.option_strings or action.nargs == "?"):
            return text
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` with the chain's conventions: `HelpFormatter`, one-line usage errors
    (exit 2) and an unknown option reported as one even where a command is required."""

    def __init__(self, **kwargs: Any) -> None:
        # Subcommands' parsers are made through this too (`parser_class`), so they get it.
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(**kwargs)
        self.required_command: argparse._SubParsersAction[Parser] | None = None

    @property
    def label(self) -> str:
        """How its messages start: the program without the interpreter (`nodeagent serve`)."""
        return self.prog.removeprefix("python -m ")

    def commands(self) -> argparse._SubParsersAction[Parser]:
        """The subcommands, one of which is required. argparse checks a required subcommand
        before it reports unknown options (`nodeagent --bogus` said "the following arguments
        are required: command"), so `parse` checks it itself, after them."""
        self.required_command = self.add_subparsers(
            title="commands",
            dest="command",
            metavar="COMMAND",
            required=False,
            help="one of these (COMMAND --help: its own flags)",
        )
        return self.required_command

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """`parse_args`, with unknown options named as such and a missing command told after
        them."""
        args, extras = self.parse_known_args(argv)
        if extras:
            options = [extra for extra in extras if extra.startswith("-")]
            if options:
                plural = "s" if len(options) > 1 else ""
                self.error(f"unrecognized option{plural}: {' '.join(options)}")
            self.error(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}")
        if self.required_command is not None and getattr(args, "command", None) is None:
            names = ", ".join(self.required_command.choices)
            self.error(f"a command is required: one of {names}")
        return args

    def error(self, message: str) -> NoReturn:
        # One line, not the usage block argparse prints: it is what `kubectl logs` and a Pod's
        # last state show, and the full usage is one --help away.
        self.exit(EXIT_USAGE, f"{self.label}: {message} (see {self.prog} --help)\n")


def parser(prog: str, description: str, epilog: str | None = None) -> Parser:
    """The top-level parser of an entry point, with `--version`."""
    made = Parser(prog=prog, description=description, epilog=epilog)
    made.add_argument(
        "--version",
        action="version",
        version=f"{DISTRIBUTION} {version()}",
        help="print the version of the chain and exit",
    )
    return made


def generator(prog: str, description: str, stale: str) -> Parser:
    """The command line of a generator of checked-in files, whose `--check` writes nothing and
    exits 1 when `stale` ("the chart is stale"): what CI and the unit tests run."""
    made = parser(prog, description, exits(failed=f"--check: {stale}"))
    made.add_argument("--check", action="store_true", help=f"write nothing; exit 1 if {stale}")
    return made


def unreadable(path: object, err: Exception) -> str:
    """One line for a file that could not be read or parsed, where the exception's own text
    would be several (a YAML error quotes the lines around the fault): `PATH: No such file or
    directory`, `PATH: not YAML (expected ',' or ']' at line 2)`."""
    mark = getattr(err, "problem_mark", None)
    if isinstance(err, OSError):
        why = err.strerror or str(err)
    elif isinstance(err, UnicodeDecodeError):
        why = "not text"
    elif mark is not None or hasattr(err, "problem"):  # a YAML error: its problem and line
        where = f" at line {mark.line + 1}" if mark is not None else ""
        why = f"not YAML ({getattr(err, 'problem', None) or 'unparsable'}{where})"
    else:
        why = " ".join(str(err).split())
    return f"{path}: {why}"


def columns(rows: Sequence[Sequence[object]]) -> list[str]:
    """`rows` (the header first) as aligned lines, the way a command prints a table: each cell
    left-aligned to its column's widest, two spaces between, no trailing blanks."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))] if cells else []
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def run(label: str, body: Callable[[], int | None]) -> int:
    """`body`'s exit status; a `Failure` is printed as one line on stderr instead, and its code
    returned (any other exception is a bug and keeps its traceback)."""
    try:
        return body() or EXIT_OK
    except Failure as failure:
        print(f"{label}: {failure}", file=sys.stderr)
        return failure.code
