"""How a node agent's DaemonSet stages a manufacturer's slice isolation library onto its node.

A sliced grant preloads the manufacturer's isolation library from the host's
`/var/lib/gpustack/operator/lib/<manufacturer>/...` (nodeagent/plugin/grants.py), and the agent
advertises slices of a card only where that library is there and loads (nodeagent/plugin/
isolation.py). The library is not the chain's to build or ship: as production device plugins do,
an init container of the agent's Pod copies it from an image the platform team names, before
the agent starts. The chain ships this as a kustomize component per manufacturer
(`manifests/isolation/<manufacturer>`, generated from here by `python -m nodeagent.manifests`)
and as the Helm value `deviceManager.isolationLibrary.<manufacturer>`; a team that manages the
host directory itself (a node image, its own DaemonSet) names no image, and no init container
runs.

The init container needs only `sh`, `mkdir`, `cp` and `mv` in that image. It copies the first
file matching `SOURCE` to every path of `TARGETS`, each through a temporary name and a rename,
so a container that has the previous library mapped keeps it; and it writes the preload list the
grants mount as the container's `/etc/ld.so.preload`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from nodeagent.plugin.grants import OPERATOR_LIB_DIR, OPERATOR_STATE_DIR, PRELOAD_LIST, staged_dir
from nodeagent.vendors.common.hami_core import hami_core_kit

STATE_VOLUME = "state"
"""The agent's host-path volume of its state dir (nodeagent/manifests.py mounts it too)."""
CONTAINER_NAME = "stage-isolation-library"
STAGE_SCRIPT = (
    "set -eu\n"
    "set -- $SOURCE\n"
    'if [ ! -f "$1" ]; then\n'
    '  echo "no isolation library matches $SOURCE in this image" >&2; exit 1\n'
    "fi\n"
    "for target in $TARGETS; do\n"
    '  mkdir -p "${target%/*}"\n'
    '  cp -f "$1" "$target.staging"\n'
    '  mv -f "$target.staging" "$target"\n'
    '  echo "staged $1 as $target"\n'
    "done\n"
    'if [ -n "$PRELOAD_FILE" ]; then\n'
    '  mkdir -p "${PRELOAD_FILE%/*}"\n'
    '  printf "%s\\n" "$PRELOAD" > "$PRELOAD_FILE.staging"\n'
    '  mv -f "$PRELOAD_FILE.staging" "$PRELOAD_FILE"\n'
    "fi\n"
)


@dataclass(frozen=True)
class Staging:
    """What one manufacturer's init container copies, and where."""

    manufacturer: str
    source: str
    """A shell pattern of the library's path in the image; its first match is copied."""
    targets: tuple[str, ...]
    """Host paths (under the agent's state dir) the grants mount the library from."""
    preload: str = ""
    """The in-container path the preload list names; empty: the grants mount no list."""
    source_hint: str = ""
    """Where the most common published image keeps the library (for the docs and the patch)."""

    @property
    def image_placeholder(self) -> str:
        """The image name the component writes; the team renames it (kustomize `images:`)."""
        return f"gpustack-isolation-library-{self.manufacturer}"

    @property
    def preload_file(self) -> str:
        staged = staged_dir(OPERATOR_LIB_DIR, self.manufacturer)
        return f"{staged}/{PRELOAD_LIST}" if self.preload else ""


def hami_core_builds(manufacturer: str, builds: Iterable[str]) -> tuple[str, ...]:
    """Where the grants look for each HAMi-core build (`builds`: the build directories under
    the manufacturer's staged directory): the libraries of the very kit the responder's slices
    mount (`hami_core_kit`), so staging and grants cannot disagree."""
    staged = staged_dir(OPERATOR_LIB_DIR, manufacturer)
    kits = (hami_core_kit(staged, f"{build}/libvgpu.so") for build in builds)
    return tuple(part.path for kit in kits for part in kit if part.shared_object)


def init_container(staging: Staging, image: str) -> dict[str, Any]:
    """The init container that stages `staging`'s library from `image`."""
    env = [
        {"name": "SOURCE", "value": staging.source},
        {"name": "TARGETS", "value": " ".join(staging.targets)},
        {"name": "PRELOAD_FILE", "value": staging.preload_file},
        {"name": "PRELOAD", "value": staging.preload},
    ]
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["sh", "-c", STAGE_SCRIPT],
        "env": env,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        # Root, as the owner of the host directory (its mode lets the owner write); nothing else.
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": STATE_VOLUME, "mountPath": OPERATOR_STATE_DIR}],
    }


PATCH_FILE = "init-container.yaml"


def component(staging: Staging) -> dict[str, Any]:
    """The kustomize component that adds the init container to the manufacturer's agent (its
    patch is `PATCH_FILE` beside it, `json_patch`)."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "patches": [
            {
                "path": PATCH_FILE,
                "target": {
                    "kind": "DaemonSet",
                    "name": f"gpustack-device-manager-{staging.manufacturer}",
                },
            }
        ],
    }


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the script) as literal blocks, so the patch reads as it runs."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def json_patch(staging: Staging) -> str:
    """The JSON patch (as YAML) adding the init container, under its placeholder image."""
    ops = [
        {
            "op": "add",
            "path": "/spec/template/spec/initContainers",
            "value": [init_container(staging, staging.image_placeholder)],
        }
    ]
    return yaml.dump(ops, Dumper=_BlockDumper, sort_keys=False, width=100)
