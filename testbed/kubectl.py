"""The real kubectl of the pinned Kubernetes version, run against a testbed as a user runs it."""

from __future__ import annotations

import subprocess

from testbed import build
from testbed.harness import Testbed


def kubectl(bed: Testbed, *args: str, stdin: str | None = None) -> str:
    """The real kubectl of the pinned Kubernetes version, as a user runs it."""
    argv = [str(build.bin_dir("kubernetes-node") / "kubectl"), f"--kubeconfig={bed.kubeconfig}"]
    done = subprocess.run(
        [*argv, *args], input=stdin, capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout
