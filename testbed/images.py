"""The container images the testbed's real nodes run, built here without pulling anything.

- The project's image is built from the repository's own `Containerfile`, unchanged, on a base
  made offline: `mmdebstrap` lays a minimal Debian (python3, python3-venv, CA certificates) from
  Debian's archive and podman imports it. The host's extra trust anchors (a TLS-inspecting egress
  proxy, as on these machines) are copied in so that pip inside the build reaches PyPI.
- Upstream programs the testbed built with `go` (pause, CoreDNS, ...) are packed `FROM scratch`.
- Images reach a node's containerd as archives (`podman save`), cached by image ID.

Everything is tagged under `localhost/` with a version, never `:latest`, so the kubelet's default
pull policy is IfNotPresent and it never tries a registry.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from testbed import build

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_IMAGE = "localhost/gpustack-chain:testbed"
PAUSE_IMAGE = "localhost/pause:testbed"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")
RECIPE_LABEL = "ai.gpustack.testbed.recipe"


class ImageError(RuntimeError):
    """An image could not be made; the message carries the tool's output."""


def _run(argv: Sequence[str], cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise ImageError(f"{' '.join(argv)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def exists(tag: str) -> bool:
    done = subprocess.run(["podman", "image", "exists", tag], capture_output=True, check=False)
    return done.returncode == 0


def image_id(tag: str) -> str:
    return _run(["podman", "image", "inspect", "--format", "{{.Id}}", tag]).strip()


def suite() -> str:
    return build.versions()["image"]["suite"]


def base_tag() -> str:
    """Named after everything that goes into it, so a change makes a new base."""
    digest = hashlib.sha256(f"{suite()} {' '.join(BASE_PACKAGES)}".encode())
    for ca in sorted(EXTRA_CA_DIR.glob("*.crt")) if EXTRA_CA_DIR.is_dir() else []:
        digest.update(ca.read_bytes())
    return f"localhost/gpustack-testbed-base:{suite()}-{digest.hexdigest()[:12]}"


def ensure_base() -> str:
    tag = base_tag()
    if exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="gpustack-base-") as scratch:
        tarball = Path(scratch) / "base.tar"
        argv = [
            "mmdebstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
        ]
        if EXTRA_CA_DIR.is_dir() and any(EXTRA_CA_DIR.glob("*.crt")):
            argv += [
                f"--customize-hook=copy-in {EXTRA_CA_DIR} /usr/local/share",
                '--customize-hook=chroot "$1" update-ca-certificates',
            ]
        _run([*argv, suite(), str(tarball), DEBIAN_MIRROR])
        _run(["podman", "import", str(tarball), tag])
    return tag


def ensure_project_image() -> str:
    """Build the repository's Containerfile on the offline base (podman's layer cache makes an
    unchanged tree a no-op)."""
    base = ensure_base()
    _run(
        [
            "podman",
            "build",
            "--network=host",
            f"--build-arg=BASE_IMAGE={base}",
            "-f",
            str(REPO_ROOT / "Containerfile"),
            "-t",
            PROJECT_IMAGE,
            str(REPO_ROOT),
        ]
    )
    return PROJECT_IMAGE


def ensure_scratch_image(tag: str, binary: Path, path: str = "", user: str = "") -> str:
    """Pack one static binary `FROM scratch` at `path` (default `/<its name>`), as the
    entrypoint, running as `user` when given (upstream manifests that name their own command, or
    insist on a non-root user, find the image as upstream's is)."""
    path = path or f"/{binary.name}"
    return ensure_scratch_files(tag, {path: binary}, entrypoint=path, user=user)


def ensure_scratch_files(
    tag: str, files: dict[str, Path], entrypoint: str = "", user: str = ""
) -> str:
    """Pack static binaries `FROM scratch` (image path -> binary). Rebuilt when the recipe or a
    binary changes: the image carries their digest as a label."""
    recipe = "FROM scratch\n" + "".join(
        f"COPY {binary.name} {path}\n" for path, binary in sorted(files.items())
    )
    if entrypoint:
        recipe += f'ENTRYPOINT ["{entrypoint}"]\n'
    if user:
        recipe += f"USER {user}\n"
    digest = hashlib.sha256(recipe.encode())
    for _path, binary in sorted(files.items()):
        digest.update(binary.read_bytes())
    label = digest.hexdigest()[:16]
    if exists(tag) and _label(tag, RECIPE_LABEL) == label:
        return tag
    with tempfile.TemporaryDirectory(prefix="gpustack-scratch-") as ctx:
        for binary in files.values():
            shutil.copy(binary, Path(ctx) / binary.name)
        (Path(ctx) / "Containerfile").write_text(recipe)
        _run(["podman", "build", f"--label={RECIPE_LABEL}={label}", "-t", tag, ctx])
    return tag


def _label(tag: str, key: str) -> str:
    return _run(
        ["podman", "image", "inspect", "--format", f'{{{{index .Labels "{key}"}}}}', tag]
    ).strip()


def ensure_pause_image() -> str:
    return ensure_scratch_image(PAUSE_IMAGE, build.binary("pause"))


def archive(tag: str) -> Path:
    """A docker-archive of `tag` for `ctr images import`, reused while the image is the same;
    the archive of the tag's previous image is removed (the project's image changes with every
    edit of the code, and each archive is hundreds of MiB)."""
    folder = build.cache_root() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    name = tag.replace("/", "_").replace(":", "_")
    path = folder / f"{name}-{image_id(tag)[:24]}.tar"
    if not path.is_file():
        for stale in folder.glob(f"{name}-*"):
            stale.unlink(missing_ok=True)
        for unnamed in folder.glob("[0-9a-f]" * 24 + ".tar"):  # the old naming, by ID alone
            unnamed.unlink(missing_ok=True)
        partial = path.with_suffix(".partial")
        _run(["podman", "save", "--format=docker-archive", "-o", str(partial), tag])
        partial.rename(path)
    return path
