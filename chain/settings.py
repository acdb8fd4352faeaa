"""Chain settings: the online settings object and the startup environment.

Online settings live in one cluster-scoped singleton object; hooks receive it as a related object
and read `spec`, keyed by the upstream setting names. Values may be JSON booleans or the strings
`"true"`/`"false"` (upstream stores every setting as a string, and a migrated object may still
hold strings). A missing key takes the upstream default.

Judgment call: an unknown key is an error, not ignored. A typo (`workload-fit-afinity: false`)
would otherwise leave the default silently in force, and the hook's error answer names the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from chain.labels import HOSTNAME
from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from chain.validation import is_qualified_name

ENV_PREFIX = "GPUSTACK_"
_STRING_BOOLS = {"true": True, "false": False}
# strconv.ParseBool's spellings, which upstream's environment readers accept.
_ENV_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def _setting(default: bool, name: str) -> bool:
    return field(default=default, metadata={"name": name})


@dataclass(frozen=True)
class Settings:
    """The online settings (docs/design/control-plane.md, "Settings"), with upstream defaults."""

    node_management_manual: bool = _setting(False, "node-management-manual")
    """Nodes join only when an admin labels them `gpustack.ai/managed=true`."""
    instance_type_mixed_on_node: bool = _setting(True, "instance-type-mixed-on-node")
    """Accelerated nodes also feed CPU flavors; off pins CPU flavors to non-accelerated nodes."""
    instance_type_derived_from_node: bool = _setting(True, "instance-type-derived-from-node")
    """Flavors author their InstanceTypes; also gates the node-devices check on queues."""
    instance_type_drain_when_no_flavors: bool = _setting(
        True, "instance-type-drain-when-no-flavors"
    )
    """Drain a queue that lost all flavors instead of waiting for its reservations to end."""
    instance_type_aware_cpu_manufacturer: bool = _setting(
        False, "instance-type-aware-cpu-manufacturer"
    )
    """Split pools by CPU key as well as by accelerator."""
    workload_fit_affinity: bool = _setting(True, "workload-fit-affinity")
    """The Workload webhook pins Workloads to nodes whose fit labels show room."""
    instance_general_resources_overcommit: bool = _setting(
        True, "instance-general-resources-overcommit"
    )
    instance_privileged_allowed: bool = _setting(False, "instance-privileged-allowed")
    instance_host_path_volume_allowed: bool = _setting(False, "instance-host-path-volume-allowed")
    instance_persistent_volume_placement: bool = _setting(
        True, "instance-persistent-volume-placement"
    )
    entrance_excluded_namespaces: tuple[str, ...] = field(
        default=(), metadata={"name": "entrance-excluded-namespaces"}
    )
    """Namespaces that get no LocalQueue, beyond kube-system and the chain's own (a chain
    setting, not an upstream one)."""
    topology_levels: tuple[str, ...] = field(
        default=(HOSTNAME,), metadata={"name": "topology-levels"}
    )
    """The topology profile: node label keys, top to bottom, ending with the hostname
    (docs/topology.md, "Topology profiles"; a chain setting)."""

    @staticmethod
    def names() -> tuple[str, ...]:
        """The upstream setting names, in table order."""
        return tuple(entry.metadata["name"] for entry in fields(Settings))

    @classmethod
    def from_spec(cls, spec: object) -> Settings:
        """Parse the settings object's `spec`; ValueError naming the field on bad input."""
        if spec is None:
            return cls()
        if not isinstance(spec, Mapping):
            raise ValueError(f"spec: expected an object, got {type(spec).__name__}")
        by_name = {entry.metadata["name"]: entry.name for entry in fields(cls)}
        unknown = sorted(str(key) for key in spec if key not in by_name)
        if unknown:
            raise ValueError(f"spec.{unknown[0]}: unknown setting; known: {', '.join(by_name)}")
        values: dict[str, Any] = {
            by_name[name]: _spec_value(name, value) for name, value in spec.items()
        }
        return cls(**values)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Seed values from `GPUSTACK_<UPPER_SNAKE>` (first deploy only; later edits win)."""
        values: dict[str, Any] = {}
        for entry in fields(cls):
            variable = env_name(entry.metadata["name"])
            raw = env.get(variable, "")
            if raw != "":
                if entry.name == "topology_levels":
                    values[entry.name] = topology_levels(variable, raw)
                elif entry.name in _LIST_FIELDS:
                    values[entry.name] = _names(variable, raw)
                else:
                    values[entry.name] = _env_bool(variable, raw)
        return cls(**values)

    def to_spec(self) -> dict[str, bool | list[str]]:
        """The `spec` that parses back into these settings."""
        spec: dict[str, bool | list[str]] = {}
        for entry in fields(self):
            value = getattr(self, entry.name)
            spec[entry.metadata["name"]] = list(value) if isinstance(value, tuple) else value
        return spec


def seeded_spec(env: Mapping[str, str]) -> dict[str, bool | list[str]]:
    """The first deploy's settings `spec`: the settings `GPUSTACK_<UPPER_SNAKE>` names, and
    nothing else (a missing key keeps taking the upstream default)."""
    seeded = Settings.from_env(env).to_spec()
    return {name: value for name, value in seeded.items() if env.get(env_name(name), "") != ""}


def env_name(setting: str) -> str:
    """`node-management-manual` -> `GPUSTACK_NODE_MANAGEMENT_MANUAL`."""
    return ENV_PREFIX + setting.upper().replace("-", "_")


_LIST_FIELDS = frozenset({"entrance_excluded_namespaces", "topology_levels"})
_LIST_SETTINGS = frozenset({"entrance-excluded-namespaces", "topology-levels"})
TOPOLOGY_LEVELS_MAX = 16
"""Kueue's cap on a Topology's levels (`spec.levels` maxItems)."""


def _spec_value(name: str, value: object) -> bool | tuple[str, ...]:
    if name == "topology-levels":
        return topology_levels(f"spec.{name}", value)
    return _names(f"spec.{name}", value) if name in _LIST_SETTINGS else _spec_bool(name, value)


def topology_levels(where: str, value: object) -> tuple[str, ...]:
    """The `topology-levels` setting: distinct label keys, at most 16, the last the hostname.

    Kueue refuses a Topology that breaks any of these (its CRD rules), and the per-card check
    judges the nodes a topology assignment names, which only a hostname lowest level does; so
    the setting is refused here, naming it, rather than the flavor hook failing later.
    """
    levels = _names(where, value)
    for index, key in enumerate(levels):
        if not is_qualified_name(key):
            raise ValueError(f"{where}[{index}]: {key!r} is not a node label key")
        if key in levels[:index]:
            raise ValueError(f"{where}[{index}]: {key!r} is named twice (levels must be distinct)")
    if not levels or levels[-1] != HOSTNAME:
        raise ValueError(
            f"{where}: the last (lowest) level must be {HOSTNAME}, got {list(levels)!r}; the "
            "per-card check judges the nodes Kueue names, and only a hostname level names them"
        )
    if len(levels) > TOPOLOGY_LEVELS_MAX:
        raise ValueError(f"{where}: {len(levels)} levels, Kueue allows {TOPOLOGY_LEVELS_MAX}")
    return levels


def _names(where: str, value: object) -> tuple[str, ...]:
    """A list of names: a JSON list of strings, or one comma-separated string."""
    if isinstance(value, str):
        items: list[object] = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ValueError(f"{where}: expected a list of names, got {value!r}")
    if not all(isinstance(item, str) and item for item in items):
        raise ValueError(f"{where}: expected a list of non-empty names, got {value!r}")
    return tuple(str(item) for item in items)


def _spec_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _STRING_BOOLS:
        return _STRING_BOOLS[value.lower()]
    raise ValueError(f"spec.{name}: expected true or false, got {value!r}")


def _env_bool(variable: str, raw: str) -> bool:
    if raw.strip() in _ENV_BOOLS:
        return _ENV_BOOLS[raw.strip()]
    raise ValueError(f"{variable}: expected a boolean, got {raw!r}")


SYSTEM_NAMESPACE_DEFAULT = SYSTEM_NAMESPACE
PCI_CLASS_PREFIXES_DEFAULT = ("02", "03", "0b", "12")


@dataclass(frozen=True)
class StartupEnv:
    """Environment read once at start by the hooks and the node agent (docs/design/control-plane.md,
    "Settings")."""

    devices_group_id_with_memory: bool = False
    """`GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`: group ids get a `-<mem>` suffix."""
    ledger_release_terminated_pods: bool = True
    """`GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS`: finished Pods stop charging whole, shared and
    sliced cards."""
    device_plugin_sliced_allocate_gate: bool = True
    """`GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE`: Allocate refuses a slice without room."""
    system_namespace: str = SYSTEM_NAMESPACE_DEFAULT
    """`KUBERNETES_POD_NAMESPACE`: the chain's own namespace (the manifests set it from the Pod's
    `metadata.namespace`, so a Helm release namespace is followed)."""
    pci_class_prefixes: tuple[str, ...] = PCI_CLASS_PREFIXES_DEFAULT
    """`GPUSTACK_PCI_CLASS_PREFIXES`, comma separated."""
    device_plugin_identify_by_kubelet: bool = True
    """`GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET`: ask the kubelet's pod-resources which
    container is allocating before the heuristic (`false`: the heuristic alone)."""
    agent_namespace: str = AGENT_NAMESPACE
    """`GPUSTACK_AGENT_NAMESPACE`: the node agents' namespace (the chart's
    `agentNamespace.name`)."""

    @property
    def reserved_namespaces(self) -> frozenset[str]:
        """Namespaces that get no LocalQueue: the chain's own two (the agents run apart, where
        Pod Security allows privileged Pods; no tenant works there) and kube-system."""
        return frozenset((self.system_namespace, self.agent_namespace, "kube-system"))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StartupEnv:
        def flag(variable: str, default: bool) -> bool:
            raw = env.get(variable, "")
            return default if raw == "" else _env_bool(variable, raw)

        prefixes = tuple(
            part.strip().lower()
            for part in env.get("GPUSTACK_PCI_CLASS_PREFIXES", "").split(",")
            if part.strip()
        )
        return cls(
            devices_group_id_with_memory=flag("GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY", False),
            ledger_release_terminated_pods=flag("GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS", True),
            device_plugin_sliced_allocate_gate=flag(
                "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE", True
            ),
            device_plugin_identify_by_kubelet=flag(
                "GPUSTACK_DEVICE_PLUGIN_IDENTIFY_BY_KUBELET", True
            ),
            system_namespace=env.get("KUBERNETES_POD_NAMESPACE", "") or SYSTEM_NAMESPACE_DEFAULT,
            agent_namespace=env.get("GPUSTACK_AGENT_NAMESPACE", "") or AGENT_NAMESPACE,
            pci_class_prefixes=prefixes or PCI_CLASS_PREFIXES_DEFAULT,
        )
