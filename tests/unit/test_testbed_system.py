"""The real nodes' host packages: found, or installed from Debian's archive, or named."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from testbed import system


def test_nothing_is_installed_when_every_program_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system, "_present", lambda what: True)
    monkeypatch.setattr(subprocess, "run", _refuse)
    system.ensure(log=lambda msg: None)


def test_missing_programs_are_installed_with_apt_get(monkeypatch: pytest.MonkeyPatch) -> None:
    installed: set[str] = set()
    absent = {"runc", "/usr/lib/cni/bridge"}
    monkeypatch.setattr(system, "_present", lambda what: what not in absent or what in installed)
    monkeypatch.setattr(system.os, "geteuid", lambda: 0)
    monkeypatch.setattr(system.shutil, "which", lambda name: f"/usr/bin/{name}")
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        if argv[:2] == ["apt-get", "install"]:
            installed.update(absent)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(system.subprocess, "run", run)
    system.ensure(log=lambda msg: None)
    assert calls[0] == ["apt-get", "update", "-q"]
    assert calls[1][-2:] == ["containernetworking-plugins", "runc"]


def test_without_root_the_missing_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system, "_present", lambda what: what != "podman")
    monkeypatch.setattr(system.os, "geteuid", lambda: 1000)
    with pytest.raises(system.MissingPackages, match="podman"):
        system.ensure(log=lambda msg: None)


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("nothing should run")
