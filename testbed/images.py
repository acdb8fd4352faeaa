"""The container images the testbed's real nodes run, built here without pulling anything.

- The project's image is built from the repository's own `Containerfile`, unchanged, on a base
  made offline: `mmdebstrap` lays a minimal Debian (python3, python3-venv, CA certificates) from
  Debian's archive and podman imports it. The host's extra trust anchors (a TLS-inspecting egress
  proxy, as on these machines) are copied in so that pip inside the build reaches PyPI.
- Upstream programs the testbed built with `go` (pause, CoreDNS, ...) are packed `FROM scratch`.
- Every image is named for the testbed's registry (`registry.gpustack.test/<name>:<version>`,
  testbed/registry.py), where the nodes pull it from: tagged with a version, never `:latest`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from testbed import build, standin
from testbed.registry import image_name

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT_IMAGE = image_name("gpustack-chain", "testbed")
PAUSE_IMAGE = image_name("pause", "testbed")
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
    return build_tree(REPO_ROOT, PROJECT_IMAGE)


def build_tree(tree: Path, tag: str) -> str:
    """Build `tree`'s own Containerfile, with `tree` as its context, on the offline base: the
    working tree, or a release's tree taken from the project's history (testbed/previous.py)."""
    base = ensure_base()
    _run(
        [
            "podman",
            "build",
            "--network=host",
            f"--build-arg=BASE_IMAGE={base}",
            "-f",
            str(tree / "Containerfile"),
            "-t",
            tag,
            str(tree),
        ]
    )
    return tag


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


ISOLATION_STANDIN_IMAGE = image_name("isolation-standin", "testbed")
STANDIN_PATH = "/k8s-vgpu/lib/nvidia/libvgpu.so"
"""Where HAMi's image keeps HAMi-core, so the component's default SOURCE finds the stand-in."""


def ensure_isolation_standin_image() -> str:
    """The stand-in slice isolation library (testbed/standin.py: compiled with `cc` as
    libvgpu.so) in an image laid out as HAMi's is, on the offline base (the init container
    needs its shell and coreutils). Rebuilt when the library or the base changes."""
    base = ensure_base()
    library = standin.compiled("libvgpu.so")
    digest = hashlib.sha256(library.read_bytes() + base.encode()).hexdigest()[:16]
    if exists(ISOLATION_STANDIN_IMAGE) and _label(ISOLATION_STANDIN_IMAGE, RECIPE_LABEL) == digest:
        return ISOLATION_STANDIN_IMAGE
    with tempfile.TemporaryDirectory(prefix="gpustack-standin-") as ctx:
        shutil.copy(library, Path(ctx) / "libvgpu.so")
        recipe = f"FROM {base}\nCOPY libvgpu.so {STANDIN_PATH}\n"
        (Path(ctx) / "Containerfile").write_text(recipe)
        label = f"--label={RECIPE_LABEL}={digest}"
        _run(["podman", "build", label, "-t", ISOLATION_STANDIN_IMAGE, ctx])
    return ISOLATION_STANDIN_IMAGE


def ensure_pause_image() -> str:
    return ensure_scratch_image(PAUSE_IMAGE, build.binary("pause"))
