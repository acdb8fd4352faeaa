"""What this release of the chain ships under: the one image every component runs (the hooks,
the webhooks, the verdict driver, the node agent, and SSH-enabled Instances' `sshd` sidecar).
The manifests name it (`python -m nodeagent.manifests` writes it into the DaemonSets; Helm's
`image` value replaces it everywhere); its tag is the project's `version()` (a test holds them
equal)."""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

CHAIN_IMAGE = "ghcr.io/gpustack-chain/gpustack-chain:0.1.0"
SYSTEM_NAMESPACE = "gpustack-system"
"""Where every component but the node agents runs, under the `restricted` Pod Security level."""
AGENT_NAMESPACE = "gpustack-agents"
"""The node agents' own namespace: their DaemonSets need host paths and device access, so it is
the one namespace of the chain labelled for `privileged` Pods."""

DISTRIBUTION = "gpustack-chain"
"""The project's name in pyproject.toml: the distribution whose version every `--version` prints."""
VERSION_UNKNOWN = "0+unknown"
"""What `version()` answers with neither a source tree nor an installed distribution to read (a
PEP 440 local version, so tools that compare versions still parse it)."""


@cache
def version() -> str:
    """The project's version: `project.version` of pyproject.toml, its one definition.

    A source checkout (this module beside the pyproject.toml that names the project) reads the
    file itself: an editable install's metadata is a copy made at install time, stale after a
    bump, and the chart rendered from the tree must carry the tree's version. Anywhere else (the
    image installs the project into a virtual environment) the installed metadata, written from
    that same file, answers."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        project = {}
    if project.get("name") == DISTRIBUTION and isinstance(project.get("version"), str):
        return str(project["version"])
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return VERSION_UNKNOWN
