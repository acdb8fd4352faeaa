"""The real kubectl of the pinned Kubernetes version, run against a testbed as a user runs it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from chain.conditions import find
from testbed import build
from testbed.harness import Testbed


def kubectl_argv(bed: Testbed, *args: str) -> list[str]:
    """The command line of the pinned kubectl against `bed`, for a caller that runs it itself
    (to follow `kubectl logs -f`, for example)."""
    return [
        str(build.bin_dir("kubernetes-node") / "kubectl"),
        f"--kubeconfig={bed.kubeconfig}",
        *args,
    ]


def kubectl(bed: Testbed, *args: str, stdin: str | None = None) -> str:
    """The real kubectl of the pinned Kubernetes version, as a user runs it."""
    done = subprocess.run(
        kubectl_argv(bed, *args),
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait_condition(
    bed: Testbed, resource: str, condition: str, namespace: str = "", timeout: int = 60
) -> str:
    """`kubectl wait --for=condition=<condition> <resource>`, as a user waits on an object's
    `status.conditions` (`Ready`, or `Ready=false` for a condition that is False)."""
    scope = ["-n", namespace] if namespace else []
    return kubectl(
        bed, "wait", f"--for=condition={condition}", resource, f"--timeout={timeout}s", *scope
    )


def condition_of(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any]:
    """The condition of `type_` in an object's `status.conditions` ({} when it has none)."""
    return dict(find(((obj or {}).get("status") or {}).get("conditions"), type_) or {})
