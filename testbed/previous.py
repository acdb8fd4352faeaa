"""The chain's previous release, made here from the project's history, as its users had it.

No release was ever tagged: 0.1.0 is commit f2965f5 (`pyproject.toml` and the chart say 0.1.0
there; the commits after it are 0.2.0's). From that commit's tree (`git archive`), unchanged:

- its image, built from its own Containerfile on the testbed's offline base, exactly as the
  current image is (`images.build_tree`), named `registry.gpustack.test/gpustack-chain:0.1.0`;
- its manifests with its own testbed overlay (its simulated cards, its isolation component), and
  over that overlay one kustomization that only points the chain's image at that tag, as a user
  pins the release they install;
- its Helm chart (`tests/e2e/test_real_nodes_helm.py`);
- its node agent as a Python tree to run as a process on the emulated testbed (`agent_tree`),
  over the simulated NVIDIA driver of this host.

A clone without that commit (`--depth`) cannot make any of them: `HistoryMissing` says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from testbed import images
from testbed.registry import REGISTRY_HOST, image_name

REPOSITORY = Path(__file__).resolve().parent.parent
COMMIT = "f2965f5"
"""The commit released as 0.1.0."""
VERSION = "0.1.0"
IMAGE = image_name("gpustack-chain", VERSION)


class HistoryMissing(RuntimeError):
    """The previous release's commit is not in this checkout's history."""


def extract(into: Path, *paths: str) -> Path:
    """`paths` of the previous release's tree (all of it when none) written under `into`."""
    found = subprocess.run(
        ["git", "-C", str(REPOSITORY), "cat-file", "-e", f"{COMMIT}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if not (REPOSITORY / ".git").exists() or found.returncode:
        raise HistoryMissing(
            f"commit {COMMIT} (release {VERSION}) is not in {REPOSITORY}: clone without --depth, "
            "or fetch it"
        )
    archive = subprocess.run(
        ["git", "-C", str(REPOSITORY), "archive", COMMIT, *paths], capture_output=True, check=True
    )
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def ensure_image() -> str:
    """The previous release's image, built once from its tree (a commit never changes, so an
    image of that name is that build)."""
    if images.exists(IMAGE):
        return IMAGE
    with tempfile.TemporaryDirectory(prefix="gpustack-previous-") as scratch:
        return images.build_tree(extract(Path(scratch)), IMAGE)


def overlay(into: Path) -> Path:
    """A kustomization of the previous release's testbed overlay with its image pinned to
    `IMAGE` (that overlay names the `testbed` tag, which is the current build's); `kubectl
    apply -k` it to install the previous release."""
    extract(into / "tree", "manifests", "testbed/overlay")
    folder = into / "previous"
    folder.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../tree/testbed/overlay"],
        "images": [{"name": f"{REGISTRY_HOST}/gpustack-chain", "newTag": VERSION}],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder


AGENT_PACKAGES = ("nodeagent", "chain", "kubeapi")
"""What 0.1.0's `python -m nodeagent` imports of its own tree."""
_DRIVER_IMPORT = "from nodeagent.simulate.mig import GpuState, MigHandle, MigMaterialization\n"
_DRIVER_STARTS = "        self._failures: dict[str, str] = {}\n"
"""Where 0.1.0's `SimulatedNvml.__init__` ends: its MIG instances are set up by then."""


def agent_tree(into: Path) -> Path:
    """0.1.0's agent (`AGENT_PACKAGES` of its tree, under `into`): run `python -m nodeagent` with
    `PYTHONPATH` set to the path returned.

    Its simulated NVIDIA driver is the one thing changed. A simulator stands in for the node's
    driver, which is the host's and not the release's: a real driver keeps its MIG instances
    when the agent's process ends, and 0.1.0's simulator kept them in the process. So its
    MIG state (`nodeagent/simulate/mig.py`, the same class with the state file added since) is
    this checkout's, and its `SimulatedNvml` starts from the state file `STATE_ENV` names, as
    the current one does. The agent's own code (detection, plugins, ledger, reclaimer) is
    0.1.0's, unchanged."""
    extract(into, *AGENT_PACKAGES)
    simulate = into / "nodeagent" / "simulate"
    shutil.copyfile(REPOSITORY / "nodeagent" / "simulate" / "mig.py", simulate / "mig.py")
    nvml = simulate / "nvml.py"
    source = nvml.read_text(encoding="utf-8")
    if source.count(_DRIVER_IMPORT) != 1 or source.count(_DRIVER_STARTS) != 1:
        raise RuntimeError(f"{COMMIT}'s {nvml.relative_to(into)} is not the one agent_tree knows")
    source = source.replace(
        _DRIVER_IMPORT,
        _DRIVER_IMPORT.replace("\n", ", state_file_from_env\n"),
    ).replace(
        _DRIVER_STARTS,
        _DRIVER_STARTS + "        self._state_file = state_file_from_env()\n"
        "        self._load_instances()\n",
    )
    nvml.write_text(source, encoding="utf-8")
    return into


def _simulated(overlay: Path) -> str:
    """The `--simulate=...` argument a testbed overlay gives the NVIDIA agent."""
    patch = yaml.safe_load((overlay / "simulate-nvidia.yaml").read_text())
    (argument,) = [op["value"] for op in patch if str(op["value"]).startswith("--simulate=")]
    return str(argument)


def upgrade_overlay(into: Path, current: Path, rendered_args: list[str]) -> Path:
    """The current release's testbed overlay `current` with the NVIDIA agent simulating the
    machines the previous release's overlay simulated (`extract`ed under `into` by `overlay`).
    Since 0.1.0 the testbed's node-b shows a RoCE port (profile `l4x2-roce`, which 0.1.0 lacks):
    its cards' simulated UUIDs differ from `l4x2`'s, and an upgrade keeps a machine's cards, so
    the upgrade keeps the old simulation. `rendered_args` are the agent's arguments as `current`
    renders them (the patch replaces the simulation's own entry)."""
    (index,) = [i for i, arg in enumerate(rendered_args) if arg.startswith("--simulate=")]
    folder = into / "upgrade"
    folder.mkdir(parents=True, exist_ok=True)
    value = _simulated(into / "tree" / "testbed" / "overlay")
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(current, folder)],
        "patches": [
            {
                "target": {"kind": "DaemonSet", "name": "gpustack-device-manager-nvidia"},
                "patch": yaml.safe_dump(
                    [
                        {
                            "op": "replace",
                            "path": f"/spec/template/spec/containers/0/args/{index}",
                            "value": value,
                        }
                    ]
                ),
            }
        ],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return folder
