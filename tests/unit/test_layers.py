"""The layer rules of `.importlinter` (checked by `make lint`) can fail, and do not go stale:
- a module of every third-party distribution the project names in pyproject.toml is in the list
  the standard-library-only packages may not import, so a new dependency cannot slip into `chain/`;
- every root package of the tree is one the linter reads, so a new room is not outside every rule;
- a tree with one wrong import per contract breaks exactly that contract."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / ".importlinter"
LINT = Path(sys.executable).parent / "lint-imports"
# Distributions that install no module a program imports (type stubs, command-line tools).
NOT_IMPORTED = {
    "types-pyyaml",
    "types-requests",
    "types-jsonschema",
    "ruff",
    "mypy",
    "import-linter",
}


def _config() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(CONTRACTS)
    return parser


def _listed(section: str, key: str) -> list[str]:
    return _config()[section][key].split()


def _requirement_names() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in requirements}


def test_the_standard_library_rule_forbids_every_third_party_distribution() -> None:
    modules_of: dict[str, set[str]] = {}
    for module, distributions in metadata.packages_distributions().items():
        for distribution in distributions:
            modules_of.setdefault(distribution.lower(), set()).add(module)
    forbidden = set(_listed("importlinter:contract:stdlib-only", "forbidden_modules"))
    # A distribution may ship helper modules beside its package (pytest's `py`, nvidia-ml-py's
    # `example`): forbidding the package a program imports is what the rule needs.
    missing = {
        name: sorted(modules_of.get(name, set()))
        for name in _requirement_names() - NOT_IMPORTED
        if not modules_of.get(name, set()) & forbidden
    }
    assert not missing, f".importlinter's stdlib-only contract must forbid {missing}"


def test_every_root_package_of_the_tree_is_read_by_the_linter() -> None:
    packages = {
        path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name != "charts"
    } | {"charts"}
    assert packages == set(_listed("importlinter", "root_packages"))


# One wrong import per contract, each in an otherwise empty tree of the project's root packages.
WRONG_IMPORTS = {
    "stdlib-only": ("chain/units.py", "import yaml\n"),
    "chain-self-contained": ("sidecars/ssh_session.py", "import chain\n"),
    "hooks-independent": ("hooks/queue/app.py", "import hooks.flavor\n"),
    "hooks-credential-less": ("hooks/entrance/app.py", "import kubeapi\n"),
    "node-agent": ("nodeagent/report.py", "import verdictdriver\n"),
    "verdict-driver": ("verdictdriver/driver.py", "import nodeagent\n"),
    "worker-gateway": ("workergateway/sums.py", "import verdictdriver\n"),
    "client": ("kubeapi/client.py", "import hooks\n"),
    "builders": ("builders/cluster.py", "import testbed\n"),
    "no-tests": ("benchmarks/pools_hook.py", "import tests\n"),
    "vendors-independent": (
        "nodeagent/vendors/thead/grants.py",
        "import nodeagent.vendors.nvidia\n",
    ),
    "engine-vendor-blind": ("nodeagent/plugin/server.py", "import nodeagent.vendors.amd.grants\n"),
}


def _tree(tmp: Path, wrong: tuple[str, str] | None) -> None:
    for package in _listed("importlinter", "root_packages"):
        (tmp / package).mkdir()
        (tmp / package / "__init__.py").write_text("")
    for hook in ("admission", "entrance", "flavor", "fleet", "instance", "instancetype", "queue"):
        (tmp / "hooks" / hook).mkdir()
        (tmp / "hooks" / hook / "__init__.py").write_text("")
    # The node agent's engine rooms and each manufacturer's package, as the contracts name them.
    subpackages = _listed("importlinter:contract:vendors-independent", "modules") + _listed(
        "importlinter:contract:engine-vendor-blind", "source_modules"
    )
    for module in subpackages:
        relative = Path(*module.split("."))
        for package in (relative, *relative.parents[:-1]):
            (tmp / package).mkdir(parents=True, exist_ok=True)
            (tmp / package / "__init__.py").touch()
    if wrong:
        path, line = wrong
        (tmp / path).write_text(line)
    (tmp / ".importlinter").write_text(CONTRACTS.read_text())


def _lint(tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=tmp,
        env={"PYTHONPATH": str(tmp), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_every_contract_is_one_the_wrong_imports_exercise() -> None:
    contracts = {
        section.removeprefix("importlinter:contract:")
        for section in _config().sections()
        if section.startswith("importlinter:contract:")
    }
    assert contracts == set(WRONG_IMPORTS)


def test_the_empty_tree_keeps_every_contract(tmp_path: Path) -> None:
    _tree(tmp_path, None)
    done = _lint(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("contract", sorted(WRONG_IMPORTS))
def test_a_wrong_import_breaks_its_contract(tmp_path: Path, contract: str) -> None:
    _tree(tmp_path, WRONG_IMPORTS[contract])
    done = _lint(tmp_path)
    name = _config()[f"importlinter:contract:{contract}"]["name"]
    assert done.returncode == 1, done.stdout + done.stderr
    broken = re.sub(r"\s+", " ", done.stdout)
    assert f"{name} BROKEN" in broken
    assert broken.count("BROKEN") == 1, done.stdout


def test_the_probe_server_is_held_to_the_standard_library(tmp_path: Path) -> None:
    # Every credentialed process imports `probes`: a component imported there would reach them all.
    _tree(tmp_path, ("probes/__init__.py", "import kubeapi\n"))
    done = _lint(tmp_path)
    name = _config()["importlinter:contract:stdlib-only"]["name"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{name} BROKEN" in re.sub(r"\s+", " ", done.stdout)
