"""How granted cards reach a container: a visibility env var, or a CDI annotation
(docs/design/node-agent.md, "Injection channel").

`GPUSTACK_<MFR>_DEVICE_INJECTION_STRATEGY` picks the channel: `envvar` (default), `cdi-annotations`
or `auto`. A response carries exactly one of the two. `auto` takes CDI only when the node can
resolve it: the Pod names no RuntimeClass, containerd's default handler is not the vendor's
runtime (which would inject from the env var anyway), containerd resolves CDI names, and every
granted name is in a CDI spec on the node. Anything unknown keeps the env var, which always works.

The decisions are pure over `NodeFacts`; `read_node_facts` is the one reader of the host (once
per process: containerd's config and the CDI spec directories).

Judgment calls:
- containerd's config `version = 3` is taken to mean containerd 2.x (CDI on unless
  `enable_cdi = false`); older versions need `enable_cdi = true` under the CRI plugin.
- The default handler is the vendor's runtime when its name or its `BinaryName` contains the
  manufacturer's runtime name (`nvidia`, `/usr/bin/nvidia-container-runtime`).
"""

from __future__ import annotations

import enum
import json
import logging
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/gpustack-"
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
"""Read in this order; a later directory's file of the same name replaces an earlier one's."""
CONTAINERD_CONFIG_DIR = "/etc/containerd"
_CDI_SUFFIXES = (".yaml", ".yml", ".json")


class Strategy(enum.StrEnum):
    ENVVAR = "envvar"
    CDI_ANNOTATIONS = "cdi-annotations"
    AUTO = "auto"


def strategy_from_env(env: Mapping[str, str], manufacturer: str) -> Strategy:
    """The configured strategy; empty means envvar, an unknown value is logged and ignored."""
    variable = f"GPUSTACK_{manufacturer.upper()}_DEVICE_INJECTION_STRATEGY"
    raw = env.get(variable, "").strip()
    if not raw:
        return Strategy.ENVVAR
    try:
        return Strategy(raw)
    except ValueError:
        log.warning("%s=%r is not envvar, cdi-annotations or auto; using envvar", variable, raw)
        return Strategy.ENVVAR


@dataclass(frozen=True)
class NodeFacts:
    containerd_config: Mapping[str, object] | None = None
    """containerd's parsed `config.toml`; None when it could not be read."""
    cdi_names: frozenset[str] | None = None
    """Every `kind=device` name the CDI specs declare; None when a spec could not be read."""


@dataclass(frozen=True)
class Channel:
    """Everything that decides the channel of one response."""

    manufacturer: str
    runtime_name: str
    """The manufacturer's RuntimeClass/handler name (`nvidia`); may be empty."""
    strategy: Strategy = Strategy.ENVVAR
    facts: NodeFacts = NodeFacts()
    pod_runtime_class: str = ""


@dataclass(frozen=True)
class Injection:
    envs: Mapping[str, str]
    annotations: Mapping[str, str]


def inject(
    channel: Channel, env_name: str, env_values: Sequence[str], cdi_names: Sequence[str]
) -> Injection:
    """Show the granted cards through one channel. ValueError when `cdi-annotations` names a
    device that the node's (readable, non-empty) CDI specs do not declare."""
    names = ",".join(cdi_names)
    annotation = {CDI_ANNOTATION_PREFIX + channel.manufacturer: names}
    known = channel.facts.cdi_names
    if channel.strategy == Strategy.CDI_ANNOTATIONS:
        missing = [name for name in cdi_names if known and name not in known]
        if missing:
            raise ValueError(f"CDI devices {', '.join(missing)} are not declared by any CDI spec")
        return Injection({}, annotation)
    if channel.strategy == Strategy.AUTO and _auto_takes_cdi(channel, cdi_names):
        return Injection({}, annotation)
    return Injection({env_name: ",".join(env_values)}, {})


def _auto_takes_cdi(channel: Channel, cdi_names: Sequence[str]) -> bool:
    config = channel.facts.containerd_config
    known = channel.facts.cdi_names
    return (
        not channel.pod_runtime_class
        and config is not None
        and not default_handler_is_vendor(config, channel.runtime_name)
        and resolves_cdi(config)
        and known is not None
        and all(name in known for name in cdi_names)
    )


def _table(node: object, *path: str) -> Mapping[str, object]:
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def _cri_plugins(config: Mapping[str, object]) -> tuple[Mapping[str, object], bool]:
    """The CRI runtime settings and whether the config is containerd 2.x's."""
    version = config.get("version")
    if isinstance(version, int) and version >= 3:
        return _table(config, "plugins", "io.containerd.cri.v1.runtime"), True
    return _table(config, "plugins", "io.containerd.grpc.v1.cri"), False


def resolves_cdi(config: Mapping[str, object]) -> bool:
    cri, modern = _cri_plugins(config)
    enabled = cri.get("enable_cdi")
    return enabled is not False if modern else enabled is True


def default_handler_is_vendor(config: Mapping[str, object], runtime_name: str) -> bool:
    if not runtime_name:
        return False
    cri, _ = _cri_plugins(config)
    runtime = _table(cri, "containerd")
    handler = runtime.get("default_runtime_name")
    if not isinstance(handler, str):
        return False
    binary = _table(runtime, "runtimes", handler, "options").get("BinaryName")
    return runtime_name in handler or (isinstance(binary, str) and runtime_name in binary)


def cdi_names(documents: Sequence[object]) -> frozenset[str] | None:
    """`kind=device` names of CDI spec documents; None if one lacks `cdiVersion` or `kind`."""
    names: set[str] = set()
    for document in documents:
        if not isinstance(document, Mapping):
            return None
        kind, version = document.get("kind"), document.get("cdiVersion")
        if not isinstance(kind, str) or not kind or not version:
            return None
        devices = document.get("devices") or []
        if not isinstance(devices, list):
            return None
        for device in devices:
            name = device.get("name") if isinstance(device, Mapping) else None
            if isinstance(name, str) and name:
                names.add(f"{kind}={name}")
    return frozenset(names)


def read_cdi_names(dirs: Sequence[str] = CDI_SPEC_DIRS) -> frozenset[str] | None:
    files: dict[str, Path] = {}
    try:
        for directory in dirs:
            root = Path(directory)
            if root.is_dir():
                for path in sorted(root.iterdir()):
                    if path.suffix in _CDI_SUFFIXES and path.is_file():
                        files[path.name] = path
        documents = [
            json.loads(path.read_text())
            if path.suffix == ".json"
            else yaml.safe_load(path.read_text())
            for _, path in sorted(files.items())
        ]
    except (OSError, ValueError, yaml.YAMLError) as error:
        log.warning("CDI specs unreadable, keeping the env var channel: %s", error)
        return None
    return cdi_names(documents)


def read_containerd_config(directory: str = CONTAINERD_CONFIG_DIR) -> Mapping[str, object] | None:
    try:
        return tomllib.loads((Path(directory) / "config.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        log.info("containerd config unreadable, auto keeps the env var channel: %s", error)
        return None


def read_node_facts(env: Mapping[str, str]) -> NodeFacts:
    directory = env.get("GPUSTACK_CONTAINERD_CONFIG_DIR", "") or CONTAINERD_CONFIG_DIR
    return NodeFacts(read_containerd_config(directory), read_cdi_names())
