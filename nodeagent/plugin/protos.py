"""The kubelet gRPC APIs as Python modules, generated from `proto/` with grpcio-tools.

`proto/` holds the two APIs the agent speaks (device plugin v1beta1, pod-resources v1). Their
Python modules are generated, never written by hand nor committed: `generate()` runs
`python -m grpc_tools.protoc` into `.generated/` next to this file, and the accessors below
generate on first use when the output is missing or older than the protos, so a fresh checkout
with grpcio-tools installed works without a build step. An image build runs
`python -m nodeagent.plugin.protos` once so the running agent never needs grpcio-tools.

Why a dot directory loaded by file path: generated code is untyped, and mypy's package walk skips
dot directories, so strict checking stays on for everything else without a config exception. The
accessors are the narrow typed wrapper: they return `ModuleType` (attributes are `Any`), and
nothing imports the generated files statically.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from chain import cli

PROTO_DIR = Path(__file__).with_name("proto")
GENERATED_DIR = Path(__file__).with_name(".generated")
PROTOS = ("deviceplugin_v1beta1", "podresources_v1")
_STAMP = "STAMP"

DEVICE_PLUGIN_VERSION = "v1beta1"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = DEVICE_PLUGIN_DIR + "kubelet.sock"
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_lock = threading.Lock()


def _fingerprint() -> str:
    """What the output depends on: the protos only, so a tree generated at image build stays
    current in an image that does not ship grpcio-tools."""
    digest = hashlib.sha256()
    for stem in PROTOS:
        digest.update(stem.encode())
        digest.update((PROTO_DIR / f"{stem}.proto").read_bytes())
    return digest.hexdigest()


def is_current(target: Path = GENERATED_DIR) -> bool:
    stamp = target / _STAMP
    return stamp.is_file() and stamp.read_text() == _fingerprint()


def generate(target: Path = GENERATED_DIR) -> None:
    """Compile every proto into `target` (messages `_pb2`, services `_pb2_grpc`)."""
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as scratch:
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={PROTO_DIR}",
            f"--python_out={scratch}",
            f"--grpc_python_out={scratch}",
            *(str(PROTO_DIR / f"{stem}.proto") for stem in PROTOS),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"protoc failed ({done.returncode}): {done.stderr.strip()}")
        # Replace file by file (each rename is atomic), so a process importing concurrently
        # sees either the old or the new module, never half a file; the stamp goes last.
        for produced in sorted(Path(scratch).glob("*.py")):
            os.replace(produced, target / produced.name)
        stamp = Path(scratch) / _STAMP
        stamp.write_text(_fingerprint())
        os.replace(stamp, target / _STAMP)


def _load(module_name: str) -> ModuleType:
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        return loaded
    if not is_current():
        generate()
    path = GENERATED_DIR / f"{module_name}.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # The generated service module imports its messages by this bare name; registering it
    # before running the code keeps that import (and protobuf's one-registration rule) working.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _messages_and_services(stem: str) -> tuple[ModuleType, ModuleType]:
    with _lock:
        return _load(f"{stem}_pb2"), _load(f"{stem}_pb2_grpc")


def deviceplugin() -> ModuleType:
    """Messages of the device plugin API (`AllocateRequest`, `Device`, ...)."""
    return _messages_and_services("deviceplugin_v1beta1")[0]


def deviceplugin_grpc() -> ModuleType:
    """Services of the device plugin API (`DevicePluginServicer`, `RegistrationStub`, ...)."""
    return _messages_and_services("deviceplugin_v1beta1")[1]


def podresources() -> ModuleType:
    """Messages of the pod-resources API (`ListPodResourcesRequest`, ...)."""
    return _messages_and_services("podresources_v1")[0]


def podresources_grpc() -> ModuleType:
    """Services of the pod-resources API (`PodResourcesListerStub`, ...)."""
    return _messages_and_services("podresources_v1")[1]


def grpc_runtime() -> ModuleType:
    """grpcio itself. It ships no type information, so it is reached like the generated code:
    as a `ModuleType` whose attributes are `Any`, with no mypy exception needed."""
    return importlib.import_module("grpc")


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(
        "python -m nodeagent.plugin.protos",
        "Generate the kubelet gRPC modules (device plugin, pod-resources) from proto/ with "
        "grpcio-tools. An image build runs it once, so the agent never needs grpcio-tools (a "
        "checkout with grpcio-tools generates them on first use).",
        cli.exits(),
    )
    parser.parse(argv)
    generate()
    print(f"generated {', '.join(PROTOS)} into {GENERATED_DIR}")
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
