"""The OCI registry every real node pulls its images from, as a user's cluster pulls from theirs.

go-containerregistry's `crane registry serve` (built from the Go module proxy, pinned in
versions.toml) listens on the host side of the node bridge, `<bridge address>:5000`, blobs on
disk under the run folder. Every image a node runs is named `registry.gpustack.test/<name>:<tag>`
(`.test` is reserved: no real host answers to it), built here under that very name and pushed with
the project's own `make push`. Each node's containerd maps the name to the testbed's registry in
its registry configuration (`certs.d/registry.gpustack.test/hosts.toml`, plain HTTP), the way a
cluster reaches a private registry or a mirror; nothing is ever imported into a node by hand.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import build
from testbed.components import http_ok

if TYPE_CHECKING:
    from testbed.harness import Testbed

REGISTRY_HOST = "registry.gpustack.test"
"""The name images are pulled by; containerd sends it to the testbed's registry."""
PORT = 5000
PROCESS = "registry"
REPO_ROOT = Path(__file__).resolve().parent.parent


class PushError(RuntimeError):
    """An image could not be pushed; the message carries the tool's output."""


def image_name(name: str, tag: str) -> str:
    """`registry.gpustack.test/<name>:<tag>`: what a node pulls."""
    return f"{REGISTRY_HOST}/{name}:{tag}"


def address(bed: Testbed) -> str:
    """Where the registry listens: the host's address on this testbed's node bridge."""
    return f"{bed.network.host_ip}:{PORT}"


def start(bed: Testbed, timeout: float = 30.0) -> None:
    """Serve the registry for this testbed's nodes (call once the node bridge exists)."""
    crane = build.binary("crane")
    blobs = bed.root / "registry"
    blobs.mkdir(exist_ok=True)
    argv = [str(crane), "registry", "serve", f"--address={address(bed)}", f"--disk={blobs}"]
    bed.spawn(PROCESS, argv, exe=str(crane))
    bed.wait_ready(PROCESS, lambda: http_ok(f"http://{address(bed)}/v2/"), timeout)


def push(bed: Testbed, image: str) -> None:
    """Push a locally built `registry.gpustack.test/...` image to this testbed's registry with
    the project's `make push` (README.md, "Install"): the name nodes pull it by, the registry's
    address as the destination, and plain HTTP (the testbed's registry has no TLS)."""
    if not image.startswith(REGISTRY_HOST + "/"):
        raise PushError(f"{image} is not named for {REGISTRY_HOST}")
    destination = f"docker://{address(bed)}/{image.removeprefix(REGISTRY_HOST + '/')}"
    argv = [
        "make",
        "-s",
        "-C",
        str(REPO_ROOT),
        "push",
        "CONTAINER_TOOL=podman",
        f"IMAGE={image}",
        f"PUSH_TO={destination}",
        "PUSH_FLAGS=--tls-verify=false --quiet",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise PushError(f"{' '.join(argv)} failed ({done.returncode}):\n{tail}")


def hosts_toml(bed: Testbed) -> str:
    """A node's containerd registry configuration for `registry.gpustack.test`."""
    server = f"http://{address(bed)}"
    return f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n'
