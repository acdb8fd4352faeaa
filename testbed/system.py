"""The host programs the real nodes need, installed from Debian's packages when missing.

The testbed builds every Kubernetes-side binary with `go`; what the nodes take from the
distribution instead is the low-level runtime (runc), the CNI plugins, iptables for kube-proxy,
and the image tools (mmdebstrap makes the offline base, podman builds the images). A fresh
machine of this workplace runs as root with Debian's archive reachable, so `ensure()` installs
what is missing; anywhere else it says what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

# program (or file) -> the Debian package that provides it
REQUIRED: dict[str, str] = {
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "iptables": "iptables",
    "ipset": "ipset",  # kube-router's NetworkPolicy rules
    "mmdebstrap": "mmdebstrap",
    "podman": "podman",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "cc": "gcc",  # the stand-in slice isolation library (testbed/isolation/standin.c)
}
CNI_BIN_DIR = Path("/usr/lib/cni")


class MissingPackages(RuntimeError):
    """A host prerequisite is missing and cannot be installed here."""


def _present(what: str) -> bool:
    return Path(what).exists() if what.startswith("/") else shutil.which(what) is not None


def missing() -> dict[str, str]:
    return {what: pkg for what, pkg in REQUIRED.items() if not _present(what)}


def ensure(log: Callable[[str], None] = print) -> None:
    """Install the missing packages with apt-get (as root), or raise naming them."""
    absent = missing()
    if not absent:
        return
    packages = sorted(set(absent.values()))
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise MissingPackages(
            "the testbed's real nodes need these Debian packages: " + " ".join(packages)
        )
    log(f"testbed: installing {' '.join(packages)} from Debian's archive ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise MissingPackages(
                f"{' '.join(argv)} failed:\n{(done.stdout + done.stderr)[-3000:]}"
            )
    still = missing()
    if still:
        raise MissingPackages(f"still missing after apt-get: {still}")
