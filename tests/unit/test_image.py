"""The image recipe: what the Containerfile copies and pins, checked against the project."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = (ROOT / "Containerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_every_shipped_package_is_copied_into_the_image() -> None:
    """Each package the distribution ships, except the testbed, is copied before the install."""
    copied = set(re.findall(r"^COPY (\w+)/ \1/$", CONTAINERFILE, re.MULTILINE))
    shipped = {
        p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert copied == shipped - {"testbed"}


def test_every_dependency_and_build_tool_is_pinned() -> None:
    pins = _pins()
    wanted = [
        *PYPROJECT["project"]["dependencies"],
        *(r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra),
    ]
    wanted += ["grpcio-tools", "setuptools"]  # what the image build itself installs
    assert not [r for r in wanted if _name(r) not in pins]


def test_the_image_leaves_the_kubeconfig_loader_out_and_dev_keeps_it() -> None:
    """No Pod reads a kubeconfig (each uses its service account), so the `kubernetes` package
    is the `kubeconfig` extra: the image installs `project.dependencies` only, and the
    development virtualenv (`.[dev]`) has every extra's packages for the tests and the testbed."""
    assert '["project"]["dependencies"]' in CONTAINERFILE
    assert "kubernetes" not in {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert [_name(r) for r in extras["kubeconfig"]] == ["kubernetes"]
    dev = set(extras["dev"])
    assert not [r for name, extra in extras.items() for r in extra if r not in dev]


def test_the_image_runs_unprivileged_from_a_build_argument_base() -> None:
    assert re.search(r"^ARG BASE_IMAGE=\S+$", CONTAINERFILE, re.MULTILINE)
    assert CONTAINERFILE.count("FROM ${BASE_IMAGE}") == 2  # builder and runtime on one base
    assert re.search(r"^USER 65532:65532$", CONTAINERFILE, re.MULTILINE)
    assert "PIP_CONSTRAINT=/src/constraints.txt" in CONTAINERFILE
