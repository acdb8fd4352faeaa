"""Flavors and pools: the finest grain and what `instance-type-aware-cpu-manufacturer` groups it
into.

A flavor is one (key, os, arch, per-node count) and never depends on settings, so flipping the
awareness setting regroups pools without rewriting a single flavor. A pool (an InstanceType and
its same-named ClusterQueue) selects its flavors by the schedule labels below; flavors carry the
same label keys, so the selector is just the pool's labels with everything that is not a
discriminator removed.

Judgment call: `pool_flavor_selector` treats os and arch as filters, not discriminators; labels
holding nothing else would select every flavor of a platform, so they select nothing (None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chain.keys import CpuKey
from chain.labels import (
    ACCELERATABLE,
    ACCELERATABLE_PREFIX,
    ARCH,
    GENERAL_PREFIX,
    OS,
    TRUE,
    accelerator_feature_key,
    accelerator_keys_of,
    bool_value,
    count_key,
    general_feature_key,
)
from chain.names import (
    GENERIC,
    cpu_flavor_name,
    device_flavor_name,
    instance_type_flavor_name,
    instance_type_name,
)


def pool_schedule_labels(
    acceleratable: bool,
    aware: bool,
    general_group: str,
    accelerator_group: str,
    os: str,
    arch: str,
) -> dict[str, str]:
    """`PoolScheduleLabels`: the labels that say which flavors a pool is made of.

    `feature.gpustack.ai/acceleratable` is always set so the collapsed CPU pool never picks up an
    accelerated flavor (which also carries its node's CPU key).
    """
    labels = {ACCELERATABLE: bool_value(acceleratable)}
    if os:
        labels[OS] = os
    if arch:
        labels[ARCH] = arch
    if acceleratable and accelerator_group:
        labels[accelerator_feature_key(accelerator_group)] = TRUE
    if aware and general_group not in ("", GENERIC):
        labels[general_feature_key(general_group)] = TRUE
    return labels


def pool_flavor_selector(labels: Mapping[str, str]) -> dict[str, str] | None:
    """`PoolFlavorSelector`: the part of a pool's labels a flavor must match, or None when the
    labels carry no discriminator (they are then not a chain pool's labels)."""
    selector: dict[str, str] = {}
    discriminating = False
    for key, value in labels.items():
        if key in (OS, ARCH):
            selector[key] = value
        elif key == ACCELERATABLE or (
            value == TRUE and key.startswith((GENERAL_PREFIX, ACCELERATABLE_PREFIX))
        ):
            selector[key] = value
            discriminating = True
    return selector if discriminating else None


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True if `labels` carry every key of `selector` with the same value."""
    return all(labels.get(key) == value for key, value in selector.items())


@dataclass(frozen=True)
class PoolIdentity:
    """What an InstanceType stands for (its spec's identity fields)."""

    acceleratable: bool
    general_group: str
    accelerator_group: str
    os: str
    arch: str

    @classmethod
    def of_spec(cls, spec: object, where: str) -> PoolIdentity:
        """The pool an InstanceType's spec (at JSON path `where`) stands for; a missing
        `generalGroup` is the `generic` group, as the defaulting webhook writes it. A field of
        the wrong type is a ValueError naming it."""
        if spec is None:
            spec = {}
        if not isinstance(spec, Mapping):
            raise ValueError(f"{where}: expected an object, got {spec!r}")

        def read(key: str, kind: type) -> Any:
            value = spec.get(key)
            if value is None:
                return kind()
            if not isinstance(value, kind):
                raise ValueError(f"{where}.{key}: expected a {kind.__name__}, got {value!r}")
            return value

        return cls(
            acceleratable=read("acceleratable", bool),
            general_group=read("generalGroup", str) or GENERIC,
            accelerator_group=read("acceleratorGroup", str),
            os=read("os", str),
            arch=read("arch", str),
        )

    def schedule_labels(self, aware: bool) -> dict[str, str]:
        return pool_schedule_labels(
            self.acceleratable,
            aware,
            self.general_group,
            self.accelerator_group,
            self.os,
            self.arch,
        )


@dataclass(frozen=True)
class FlavorIdentity:
    """One ResourceFlavor: a CPU flavor when `accelerator_key` is empty, else a device flavor."""

    general_key: str
    accelerator_key: str
    os: str
    arch: str
    count: int
    """Whole CPUs per node (CPU flavor) or cards of the model per node (device flavor)."""

    @property
    def acceleratable(self) -> bool:
        return bool(self.accelerator_key)

    @property
    def name(self) -> str:
        if self.acceleratable:
            return device_flavor_name(
                self.general_key, self.accelerator_key, self.os, self.arch, self.count
            )
        return cpu_flavor_name(self.general_key, self.os, self.arch, self.count)

    @property
    def feature_key(self) -> str:
        """The flavor's own presence label: its aKey's if it has one, else its gKey's."""
        if self.acceleratable:
            return accelerator_feature_key(self.accelerator_key)
        return general_feature_key(self.general_key)

    def pool(self, aware: bool) -> PoolIdentity:
        """The pool (`DerivedInstanceTypeIdentity`) this flavor rolls up into."""
        return PoolIdentity(
            acceleratable=self.acceleratable,
            general_group=self.general_key if aware else GENERIC,
            accelerator_group=self.accelerator_key,
            os=self.os,
            arch=self.arch,
        )

    def instance_type_name(self, aware: bool) -> str:
        """Name of the derived InstanceType and its ClusterQueue."""
        return instance_type_name(
            self.acceleratable, aware, self.general_key, self.accelerator_key, self.os, self.arch
        )

    def instance_type_flavor_name(self, aware: bool) -> str:
        return instance_type_flavor_name(
            self.acceleratable, aware, self.general_key, self.accelerator_key
        )


def _positive_count(labels: Mapping[str, str], key: str) -> int:
    raw = labels.get(key, "")
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def node_flavors(
    labels: Mapping[str, str], cpu: CpuKey, manufacturers: Iterable[str]
) -> list[FlavorIdentity]:
    """`ExtractNodeFlavors`: the flavors a node's labels put it in, CPU flavor first.

    A flavor needs a positive `.count`: a node that lost its cards or reports no CPU leaves the
    pool instead of joining a zero-sized flavor. Whether the node is managed, and whether an
    accelerated node may feed a CPU flavor, is the caller's decision.
    """
    os, arch = labels.get(OS, ""), labels.get(ARCH, "")
    found = []
    cores = _positive_count(labels, count_key(general_feature_key(cpu.key)))
    if cores > 0:
        found.append(FlavorIdentity(cpu.key, "", os, arch, cores))
    for accelerator in accelerator_keys_of(labels, manufacturers):
        cards = _positive_count(labels, count_key(accelerator_feature_key(accelerator)))
        if cards > 0:
            found.append(FlavorIdentity(cpu.key, accelerator, os, arch, cards))
    return found
