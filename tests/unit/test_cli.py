"""Every command-line entry point, as an operator meets it (`chain.cli`): help on every flag,
`--version`, an unknown option named as one, and a kubeconfig or API server that cannot work
told in one line with its documented exit status, fast, without a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from chain import cli
from chain.release import CHAIN_IMAGE, DISTRIBUTION, version

ROOT = Path(__file__).resolve().parents[2]
Main = Callable[[Sequence[str] | None], int | None]

ENTRY_POINTS = (
    "verdictdriver.__main__",
    "verdictdriver.lifecycle",
    "verdictdriver.pool_cards",
    "nodeagent.cli",
    "nodeagent.manifests",
    "nodeagent.plugin.protos",
    "hooks.__main__",
    "hooks.queue.write_kueue_config",
    "charts.render",
    "testbed.__main__",
    "workergateway.cli",
    "workergateway.plan",
)
"""Every module with a `main(argv)` behind a `python -m`."""
KUBE_PROCESSES = {
    "verdictdriver.__main__": [],
    "verdictdriver.lifecycle": [],
    "verdictdriver.pool_cards": [],
    "nodeagent.cli": ["serve", "--node", "node-a"],
    "workergateway.cli": [],
}
"""The processes that read a kubeconfig, and the arguments that bring them to read it."""


def _main(module: str) -> Main:
    main: Main = importlib.import_module(module).main
    return main


def _module(module: str) -> str:
    """What `python -m` takes for it."""
    named = {"nodeagent.cli": "nodeagent", "workergateway.cli": "workergateway"}
    return named.get(module, module.removesuffix(".__main__"))


def _parser(module: str, monkeypatch: pytest.MonkeyPatch) -> cli.Parser:
    """The parser `main` builds, caught as it parses (no entry point has to expose it)."""
    caught: list[cli.Parser] = []

    def catch(self: cli.Parser, argv: Sequence[str] | None = None) -> argparse.Namespace:
        caught.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(cli.Parser, "parse", catch)
    with pytest.raises(SystemExit):
        _main(module)([])
    return caught[0]


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction[cli.Parser]]:
    # argparse offers no public walk of a parser's arguments.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for commands in _commands(parser):
        for sub in commands.choices.values():
            yield from _all_parsers(sub)


def _exit(
    module: str, argv: Sequence[str], capsys: pytest.CaptureFixture[str]
) -> tuple[object, str, str]:
    """What argparse's own exits (help, version, a usage error) leave: status, stdout, stderr."""
    with pytest.raises(SystemExit) as done:
        _main(module)(argv)
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_parser_says_what_it_is_and_every_option_has_help_with_its_default(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = _parser(module, monkeypatch)
    assert isinstance(top, cli.Parser)
    for parser in _all_parsers(top):
        assert parser.description and len(parser.description) > 40, parser.prog
        assert parser.epilog and "exit status:" in parser.epilog, parser.prog
        formatter = parser._get_formatter()
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, (parser.prog, action.dest)
            shown = formatter._get_help_string(action) or ""
            default = action.default
            if default not in (None, False, [], argparse.SUPPRESS):
                # Printed by the formatter, or told in words by the help itself.
                assert "default" in shown, (parser.prog, action.dest)
        for commands in _commands(parser):
            for choice in commands._choices_actions:
                assert choice.help, (parser.prog, choice.dest)


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_exits_0_with_the_description_and_the_exit_statuses(
    module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = [
        [name] for action in _commands(_parser(module, monkeypatch)) for name in action.choices
    ]
    monkeypatch.undo()
    for prefix in [[], *commands]:
        code, out, _ = _exit(module, [*prefix, "--help"], capsys)
        assert code == 0
        assert out.startswith("usage: python -m ")
        assert "exit status:" in out and "  2  usage error" in out
        assert len(out.split("\n\n")) >= 3, "usage, description, options"


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_version_exits_0_and_prints_the_projects_version(
    module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit(module, ["--version"], capsys)[:2] == (0, f"{DISTRIBUTION} {version()}\n")


def test_the_version_is_pyprojects_and_the_images_tag() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert version() == project["version"]
    assert CHAIN_IMAGE.endswith(f":{version()}")


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_an_unknown_option_is_named_in_one_line_and_exits_2(
    module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _exit(module, ["--bogus"], capsys)
    assert code == cli.EXIT_USAGE
    assert err.count("\n") == 1 and "unrecognized option: --bogus" in err, err


def test_a_command_line_with_commands_names_the_unknown_option_and_the_missing_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv, expected in (
        (["--bogus"], "nodeagent: unrecognized option: --bogus"),
        (["detect", "--bogus", "-x"], "nodeagent: unrecognized options: --bogus -x"),
        ([], "nodeagent: a command is required: one of detect, preflight, serve"),
        (["undo"], "nodeagent: argument COMMAND: invalid choice: 'undo'"),
        (["detect", "-o", "xml"], "nodeagent detect: argument -o/--output: invalid choice"),
    ):
        code, _, err = _exit("nodeagent.cli", argv, capsys)
        assert code == cli.EXIT_USAGE
        assert err.count("\n") == 1 and err.startswith(expected), (argv, err)


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("hooks.__main__", ["plan", "--cluster"]),
        ("hooks.queue.write_kueue_config", ["--merge"]),
    ],
)
def test_an_input_file_that_cannot_be_read_is_one_line_and_exit_2(
    module: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path, text in ((tmp_path / "absent", None), (tmp_path / "broken", "a: [unclosed\n")):
        if text is not None:
            path.write_text(text)
        assert _main(module)([*argv, str(path)]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err


# --- the processes that read a kubeconfig ----------------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound, so no one else takes it, and not
    listening."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def _kubeconfig(
    server: str | None = "https://127.0.0.1:6443", current: str | None = "ctx"
) -> dict[str, object]:
    cluster: dict[str, object] = {"insecure-skip-tls-verify": True}
    if server:
        cluster["server"] = server
    config: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }
    if current:
        config["current-context"] = current
    return config


BROKEN = {
    "not-yaml": ("clusters: [unclosed\n", "not YAML"),
    "a-list": ("- a\n- b\n", "not a kubeconfig (a YAML list)"),
    "empty": ("", ": empty"),
    "no-current-context": (yaml.safe_dump(_kubeconfig(current=None)), "no current context"),
    "no-server": (yaml.safe_dump(_kubeconfig(server=None)), "context ctx names no server"),
    "unknown-context": (
        yaml.safe_dump(_kubeconfig(current="elsewhere")),
        "Expected object with name elsewhere",
    ),
    "a-server-that-is-no-url": (yaml.safe_dump(_kubeconfig(server="api:6443")), "api:6443"),
}


def _run(
    module: str, extra: Sequence[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int | None, str]:
    code = _main(module)([*KUBE_PROCESSES[module], *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("module", KUBE_PROCESSES)
def test_a_missing_or_unreadable_kubeconfig_is_one_line_and_exit_3(
    module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    label = _module(module)
    missing = tmp_path / "absent"
    code, err = _run(module, ["--kubeconfig", str(missing)], capsys)
    assert code == cli.EXIT_CONFIGURATION
    assert err == f"{label}: kubeconfig {missing}: no such file\n"
    code, err = _run(module, ["--kubeconfig", str(tmp_path)], capsys)
    assert code == cli.EXIT_CONFIGURATION
    assert err == f"{label}: kubeconfig {tmp_path}: Is a directory\n"


@pytest.mark.parametrize("module", KUBE_PROCESSES)
@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_kubeconfig_is_one_line_naming_the_file_and_exit_3(
    module: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BROKEN[case]
    path = tmp_path / "config"
    path.write_text(text)
    code, err = _run(module, ["--kubeconfig", str(path)], capsys)
    assert code == cli.EXIT_CONFIGURATION, err
    assert err.count("\n") == 1 and err.startswith(f"{_module(module)}: "), err
    assert expected in err and (str(path) in err or "API server" in err), err


@pytest.mark.parametrize("module", KUBE_PROCESSES)
def test_a_kubeconfig_without_the_kubernetes_package_is_one_line_and_exit_3(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.kubeapi.test_startup import hide_kubernetes

    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(_kubeconfig()))
    hide_kubernetes(monkeypatch)
    code, err = _run(module, ["--kubeconfig", str(path)], capsys)
    assert code == cli.EXIT_CONFIGURATION
    assert err == (
        f"{_module(module)}: reading a kubeconfig needs the kubernetes package: "
        "pip install 'gpustack-chain[kubeconfig]'\n"
    )


@pytest.mark.parametrize("module", KUBE_PROCESSES)
def test_an_unreachable_api_server_is_one_line_and_exit_4_within_seconds(
    module: str, tmp_path: Path, closed_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(_kubeconfig(server=f"https://127.0.0.1:{closed_port}")))
    started = time.monotonic()
    code, err = _run(module, ["--kubeconfig", str(path)], capsys)
    # The start-up check's few tries of a refused connection take under a second.
    assert time.monotonic() - started < 5
    assert code == cli.EXIT_UNREACHABLE
    assert err == (
        f"{_module(module)}: API server https://127.0.0.1:{closed_port}: unreachable: "
        "Connection refused\n"
    )


def _python_m(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environ,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("module", ["verdictdriver", "nodeagent"])
def test_as_a_process_the_failures_are_exit_statuses_without_a_traceback(
    module: str, tmp_path: Path, closed_port: int
) -> None:
    args = ["serve", "--node", "node-a"] if module == "nodeagent" else []
    version_run = _python_m(module, "--version")
    assert (version_run.returncode, version_run.stdout) == (0, f"{DISTRIBUTION} {version()}\n")
    missing = _python_m(module, *args, "--kubeconfig", str(tmp_path / "absent"))
    assert missing.returncode == cli.EXIT_CONFIGURATION
    assert missing.stderr == f"{module}: kubeconfig {tmp_path / 'absent'}: no such file\n"
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(_kubeconfig(server=f"https://127.0.0.1:{closed_port}")))
    unreachable = _python_m(module, *args, "--kubeconfig", str(path))
    assert unreachable.returncode == cli.EXIT_UNREACHABLE
    assert "Traceback" not in unreachable.stderr and unreachable.stderr.count("\n") == 1
    bogus = _python_m(module, "--bogus")
    assert bogus.returncode == cli.EXIT_USAGE and bogus.stderr.count("\n") == 1


def test_columns_align_each_cell_to_its_columns_widest() -> None:
    assert cli.columns([("NAME", "N"), ("a-long-name", 1), ("b", "")]) == [
        "NAME         N",
        "a-long-name  1",
        "b",
    ]
    assert cli.columns([]) == []
