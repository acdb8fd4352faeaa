"""The upgrade test is long, so `make test` leaves it out, and says so: tests marked `upgrade` are
deselected (counted as such, never skipped) unless pytest runs with `--upgrade-real-nodes`, as
`make upgrade-real-nodes` does. And the previous release it installs is read from the project's
history as that release was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from testbed import previous

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests/e2e/test_real_nodes_upgrade.py"


def _collect(*options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *options, MODULE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    return done.stdout + done.stderr


def test_the_upgrade_module_is_deselected_unless_asked_for() -> None:
    left_out = _collect()
    assert "1 deselected" in left_out and "skipped" not in left_out
    assert "--upgrade-real-nodes runs them" in left_out
    asked = _collect("--upgrade-real-nodes")
    assert f"{MODULE}::test_an_upgrade_from_0_1_0" in asked and "deselected" not in asked


def test_the_make_target_asks_for_it() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nupgrade-real-nodes:", 1)[1].split("\n\n", 1)[0]
    assert "--upgrade-real-nodes" in target and MODULE in target
    assert "flock /tmp/gpustack-testbed.lock" in target


def test_the_previous_release_is_0_1_0_from_its_commit(tmp_path: Path) -> None:
    overlay = previous.overlay(tmp_path)
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["images"] == [
        {"name": "registry.gpustack.test/gpustack-chain", "newTag": "0.1.0"}
    ]
    base = (overlay / kustomization["resources"][0]).resolve()
    assert (base / "kustomization.yaml").is_file()
    release = tmp_path / "tree" / "manifests" / "kustomization.yaml"
    assert release.is_file()
    # The tree is that commit's: its Containerfile did not copy packages added since.
    containerfile = previous.extract(tmp_path / "whole", "Containerfile") / "Containerfile"
    assert "COPY workergateway/" not in containerfile.read_text()


def test_the_upgrade_keeps_the_previous_releases_simulated_cards(tmp_path: Path) -> None:
    """0.1.0's overlay simulates node-b as `l4x2` (it has no `l4x2-roce`, whose L4 UUIDs differ):
    the upgrade replaces the current overlay's simulation argument with the old one, in place."""
    previous.overlay(tmp_path)
    rendered = ["serve", "--simulate=node-a=t4x4,node-b=l4x2-roce", "--sim-root=/x"]
    upgrade = previous.upgrade_overlay(tmp_path, ROOT / "testbed" / "overlay", rendered)
    kustomization = yaml.safe_load((upgrade / "kustomization.yaml").read_text())
    assert (upgrade / kustomization["resources"][0]).resolve() == ROOT / "testbed" / "overlay"
    (patch,) = kustomization["patches"]
    assert yaml.safe_load(patch["patch"]) == [
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/args/1",
            "value": "--simulate=node-a=t4x4,node-b=l4x2",
        }
    ]
