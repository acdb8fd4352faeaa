"""Build the testbed's upstream binaries with `go` against the module proxy.

Every component is built in a throwaway module under the cache folder and installed into
`<cache>/<component>-<version>/bin`; a binary that is already there is reused, so only the first
run on a machine pays for the builds. Nothing here is ever written into the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VERSIONS_FILE = Path(__file__).with_name("versions.toml")

# Static binaries, no toolchain downloads, no VCS stamping (the module zips carry no .git).
GO_ENV = {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false"}


class BuildError(RuntimeError):
    """A component could not be built; the message carries go's own output."""


def versions() -> dict[str, dict[str, str]]:
    with VERSIONS_FILE.open("rb") as f:
        return tomllib.load(f)


def cache_root() -> Path:
    default = Path.home() / ".cache" / "gpustack-chain" / "testbed"
    return Path(os.environ.get("GPUSTACK_TESTBED_CACHE", default))


def _go_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(GO_ENV)
    env.update(extra or {})
    return env


def go(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> str:
    """Run one go command; on failure raise with the tail of its output."""
    proc = subprocess.run(
        ["go", *args], cwd=cwd, env=_go_env(extra_env), capture_output=True, text=True
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise BuildError(f"go {' '.join(args)} failed in {cwd}:\n{tail}")
    return proc.stdout


def mod_download(module_at_version: str, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """`go mod download -json`: the module's source dir and its go.mod in the module cache."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            ["go", "mod", "download", "-json", module_at_version],
            cwd=tmp,
            env=_go_env(extra_env),
            capture_output=True,
            text=True,
        )
    info: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
    if out.returncode != 0 or "Error" in info:
        raise BuildError(f"go mod download {module_at_version}: {info.get('Error') or out.stderr}")
    return info


def gomod_json(path: str | Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(go(["mod", "edit", "-json", str(path)], Path.cwd()))
    return result


@dataclass(frozen=True)
class Component:
    name: str
    binaries: tuple[str, ...]
    build: Callable[[dict[str, str], Path, Path], None]  # (pins, workdir, bindir)
    pin: str = ""  # the versions.toml table it is built from (default: its own name)

    @property
    def table(self) -> str:
        return self.pin or self.name


def _new_module(work: Path, name: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for f in ("go.mod", "go.sum"):
        (work / f).unlink(missing_ok=True)
    go(["mod", "init", name], work)


def _tools_file(work: Path, packages: list[str]) -> None:
    imports = "\n".join(f'\t_ "{p}"' for p in packages)
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")


def _copy_go_header(work: Path, upstream: dict[str, Any]) -> None:
    """Match upstream's go line and godebug settings: a dependency's godebug is ignored."""
    go(["mod", "edit", f"-go={upstream['Go']}"], work)
    for entry in upstream.get("GoDebug") or []:
        go(["mod", "edit", f"-godebug={entry['Key']}={entry['Value']}"], work)


def _version_ldflags(packages: list[str], values: dict[str, str]) -> str:
    flags = ["-s", "-w"]
    for pkg in packages:
        flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def _kubernetes_builder(*commands: str) -> Callable[[dict[str, str], Path, Path], None]:
    return lambda pins, work, bindir: build_kubernetes(pins, work, bindir, commands)


def build_kubernetes(
    pins: dict[str, str], work: Path, bindir: Path, commands: tuple[str, ...]
) -> None:
    version = pins["version"]  # v1.36.3
    major, minor, _patch = version.lstrip("v").split(".")
    staging_version = f"v0.{minor}.{_patch}"
    info = mod_download(f"k8s.io/kubernetes@{version}")
    upstream = gomod_json(info["GoMod"])
    _new_module(work, "local/kbuild")
    _copy_go_header(work, upstream)
    go(["mod", "edit", f"-require=k8s.io/kubernetes@{version}"], work)
    # k8s requires its staging modules at v0.0.0 and maps them to ./staging; a throwaway main
    # module must map each one to its published v0.X.Y instead (kubernetes#79384).
    for rep in upstream.get("Replace") or []:
        if rep["New"]["Path"].startswith("./staging/"):
            path = rep["Old"]["Path"]
            go(["mod", "edit", f"-replace={path}={path}@{staging_version}"], work)
    cmds = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    _tools_file(work, cmds)
    go(["mod", "tidy"], work)
    # Without these the server reports v0.0.0-master+$Format:%H$, which Kueue cannot parse.
    ldflags = _version_ldflags(
        ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"],
        {
            "gitVersion": version,
            "gitMajor": major,
            "gitMinor": minor,
            "gitTreeState": "clean",
            "buildDate": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    )
    tags = "selinux,notest,grpcnotrace"
    go(["build", "-trimpath", "-tags", tags, "-ldflags", ldflags, "-o", f"{bindir}/", *cmds], work)


def build_etcd(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # server/v3 is itself the main package; its ../api replaces are plumbing only, and the
    # module already requires the same released versions, so a plain `go get` resolves.
    module, version = pins["module"], pins["version"]
    _new_module(work, "local/etcdbuild")
    go(["get", f"{module}@{version}"], work)
    go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(bindir / "etcd"), module], work)


def _go_install(package_at_version: str, ldflags: str, work: Path, bindir: Path) -> None:
    """`go install` of a module whose go.mod has no replaces, into `bindir`."""
    go(
        ["install", "-trimpath", "-ldflags", ldflags, package_at_version],
        work,
        {"GOBIN": str(bindir)},
    )


def build_kueue(pins: dict[str, str], work: Path, bindir: Path) -> None:
    module, version = pins["module"], pins["version"]
    ldflags = f"-s -w -X {module}/pkg/version.GitVersion={version}"
    _go_install(f"{module}/cmd/kueue@{version}", ldflags, work, bindir)


def _build_copied_module(src: Path, work: Path, args: list[str], env: dict[str, str]) -> None:
    """Build inside a writable copy of a module so that its own replace directives apply."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work, symlinks=True)
    for dirpath, _dirs, _files in os.walk(work):
        os.chmod(dirpath, 0o755)
    for path in work.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)
    go(["mod", "download"], work, env)
    go(args, work, env)


def metacontroller_env(pins: dict[str, str]) -> dict[str, str]:
    # The checksum database has no entry for this repository's versions (lookup answers 404);
    # the module proxy's own zip is then the only source of truth we can reach.
    return {"GONOSUMDB": pins["repository"], "GOFLAGS": "-buildvcs=false -mod=mod"}


def build_metacontroller(pins: dict[str, str], work: Path, bindir: Path) -> None:
    env = metacontroller_env(pins)
    info = mod_download(f"{pins['repository']}@{pins['version']}", env)
    src = Path(info["Dir"])
    main_pkg = "./pkg/cmd/metacontroller" if (src / "pkg/cmd/metacontroller").is_dir() else "."
    ldflags = f"-s -w -X main.version={pins['version']}"
    out = str(bindir / "metacontroller")
    _build_copied_module(
        src, work, ["build", "-trimpath", "-ldflags", ldflags, "-o", out, main_pkg], env
    )


def build_jobset(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # The manager is the module's root package; built as the main module from a copy of the
    # module cache's source, so exactly upstream's go.mod and go.sum decide every dependency.
    module, version = pins["module"], pins["version"]
    src = Path(mod_download(f"{module}@{version}")["Dir"])
    ldflags = f"-s -w -X {module}/pkg/version.GitVersion={version}"
    out = str(bindir / "jobset")
    _build_copied_module(src, work, ["build", "-trimpath", "-ldflags", ldflags, "-o", out, "."], {})


def build_nfd(pins: dict[str, str], work: Path, bindir: Path) -> None:
    module, version = pins["module"], pins["version"]
    info = mod_download(f"{module}@{version}")
    upstream = gomod_json(info["GoMod"])
    _new_module(work, "local/nfdbuild")
    _copy_go_header(work, upstream)
    go(
        ["mod", "edit", f"-require={module}@{version}", f"-require={module}/api/nfd@{version}"],
        work,
    )
    # NFD pins k8s staging modules through replaces; copy every versioned one (its ./api/nfd
    # replace is local plumbing: the api module is published under the same tag).
    for rep in upstream.get("Replace") or []:
        new = rep["New"]
        if new.get("Version"):
            go(
                ["mod", "edit", f"-replace={rep['Old']['Path']}={new['Path']}@{new['Version']}"],
                work,
            )
    # The master for the host-process testbed; worker and garbage collector too for NFD's own
    # manifests on the real nodes.
    cmds = [f"{module}/cmd/{name}" for name in ("nfd-master", "nfd-worker", "nfd-gc")]
    _tools_file(work, cmds)
    go(["mod", "tidy"], work)
    # As NFD's own image is built: the worker reads the host's /sys, /etc, ... where its
    # DaemonSet mounts them (/host-sys, ...), not the container's own.
    ldflags = (
        f"-s -w -X {module}/pkg/version.version={version}"
        f" -X {module}/pkg/utils/hostpath.pathPrefix=/host-"
    )
    go(["build", "-trimpath", "-ldflags", ldflags, "-o", f"{bindir}/", *cmds], work)


def build_containerd(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # Static, without the snapshotters that need cgo or kernel headers; overlayfs is built in.
    module, version = pins["module"], pins["version"]
    _new_module(work, "local/containerdbuild")
    go(["get", f"{module}@{version}"], work)
    cmds = [f"{module}/cmd/{name}" for name in ("containerd", "containerd-shim-runc-v2", "ctr")]
    _tools_file(work, cmds)
    go(["mod", "tidy"], work)
    ldflags = f"-s -w -X {module}/version.Version={version}"
    tags = "no_btrfs no_devmapper no_zfs no_aufs"
    go(["build", "-trimpath", "-tags", tags, "-ldflags", ldflags, "-o", f"{bindir}/", *cmds], work)


def build_coredns(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # Cluster DNS for the real nodes; its go.mod has no replaces, so a plain install works.
    module, version = pins["module"], pins["version"]
    ldflags = f"-s -w -X {module}/coremain.GitCommit={version}"
    _go_install(f"{module}@{version}", ldflags, work, bindir)


def build_kube_router(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # NetworkPolicy on the real nodes: only its firewall controller runs (testbed/realnode.py).
    module, version = pins["module"], pins["version"]
    ldflags = f"-s -w -X {module}/pkg/version.Version={version}"
    _go_install(f"{module}/cmd/kube-router@{version}", ldflags, work, bindir)


def build_helm(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # The chart's tests only (charts/): its go.mod has no replaces, so a plain install works.
    module, version = pins["module"], pins["version"]
    ldflags = f"-s -w -X {module}/internal/version.version={version}"
    _go_install(f"{module}/cmd/helm@{version}", ldflags, work, bindir)


def build_registry(pins: dict[str, str], work: Path, bindir: Path) -> None:
    # The real nodes' image registry (testbed/registry.py); crane's go.mod has no replaces.
    module, version = pins["module"], pins["version"]
    _go_install(f"{module}/cmd/crane@{version}", "-s -w", work, bindir)


def build_pause(pins: dict[str, str], work: Path, bindir: Path) -> None:
    """The sandbox process of every Pod: the testbed's own few lines (testbed/pause/), since
    no image can be pulled."""
    _new_module(work, "local/pause")
    shutil.copy(Path(__file__).with_name("pause") / "main.go", work / "main.go")
    go(["build", "-trimpath", "-ldflags", "-s -w", "-o", str(bindir / "pause"), "."], work)


COMPONENTS: dict[str, Component] = {
    "kubernetes": Component(
        "kubernetes",
        ("kube-apiserver", "kube-controller-manager"),
        _kubernetes_builder("kube-apiserver", "kube-controller-manager"),
    ),
    # The node side and the tools, from the same pin: a separate cache folder, so a machine
    # that has the control plane builds only these (the Go build cache makes it quick).
    "kubernetes-node": Component(
        "kubernetes-node",
        ("kubelet", "kube-scheduler", "kube-proxy", "kubectl"),
        _kubernetes_builder("kubelet", "kube-scheduler", "kube-proxy", "kubectl"),
        pin="kubernetes",
    ),
    "containerd": Component(
        "containerd", ("containerd", "containerd-shim-runc-v2", "ctr"), build_containerd
    ),
    "coredns": Component("coredns", ("coredns",), build_coredns),
    "kube-router": Component("kube-router", ("kube-router",), build_kube_router),
    "pause": Component("pause", ("pause",), build_pause),
    "registry": Component("registry", ("crane",), build_registry),
    "helm": Component("helm", ("helm",), build_helm),
    "etcd": Component("etcd", ("etcd",), build_etcd),
    "kueue": Component("kueue", ("kueue",), build_kueue),
    "jobset": Component("jobset", ("jobset",), build_jobset),
    "metacontroller": Component("metacontroller", ("metacontroller",), build_metacontroller),
    "nfd": Component("nfd", ("nfd-master", "nfd-worker", "nfd-gc"), build_nfd),
}


def bin_dir(name: str, pins: dict[str, str] | None = None) -> Path:
    """Where a component's binaries are cached: by version, and by the revision of how the
    testbed builds it (`build` in versions.toml), so a changed recipe is never mistaken for the
    old one."""
    pins = pins or versions()[COMPONENTS[name].table]
    revision = f"-build{pins['build']}" if "build" in pins else ""
    return cache_root() / f"{name}-{pins['version']}{revision}" / "bin"


def binary(name: str) -> Path:
    """Path of one built binary, looked up by binary name."""
    for comp in COMPONENTS.values():
        if name in comp.binaries:
            return bin_dir(comp.name) / name
    raise KeyError(name)


def is_built(comp: Component) -> bool:
    return all((bin_dir(comp.name) / b).is_file() for b in comp.binaries)


def ensure(
    names: list[str] | None = None, log: Callable[[str], None] | None = None
) -> dict[str, float]:
    """Build what is missing; return the seconds each component took (0 when reused)."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    pins = versions()
    took: dict[str, float] = {}
    for name in names or list(COMPONENTS):
        comp = COMPONENTS[name]
        pin = pins[comp.table]
        target = bin_dir(name, pin)
        if is_built(comp):
            took[name] = 0.0
            say(f"testbed: {name} {pin['version']} reused from {target}")
            continue
        say(f"testbed: building {name} {pin['version']} ...")
        start = time.monotonic()
        staging = target.with_name("bin.partial")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        (target.parent / "work").mkdir(exist_ok=True)
        comp.build(pin, target.parent / "work", staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)  # only a complete build ever appears as bin/
        shutil.rmtree(target.parent / "work", ignore_errors=True)
        took[name] = time.monotonic() - start
        say(f"testbed: built {name} in {took[name]:.0f}s")
    return took


def module_dir(name: str) -> Path:
    """Source of a pinned component in the Go module cache (for its CRDs and manifests)."""
    pins = versions()[name]
    if name == "metacontroller":
        info = mod_download(f"{pins['repository']}@{pins['version']}", metacontroller_env(pins))
    else:
        info = mod_download(f"{pins['module']}@{pins['version']}")
    return Path(info["Dir"])
