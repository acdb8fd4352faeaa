"""The manufacturer table: who we know, how their cards show up in PCI and in Kubernetes.

The table is the root of every other rule (resource families, credits names, accelerator keys), and
an operator may re-point a manufacturer at another device plugin's resource name. So the core is
`manufacturers(env)`, a pure function of an explicit environment mapping, and
`default_manufacturers()` reads `os.environ` once per process, the way upstream reads it at start.

Judgment calls:
- An override set to the empty string counts as unset, so `GPUSTACK_<MFR>_PARTITION_KIND=""` does
  not switch partitioning off; a broken deployment template cannot silently erase a default.
- Hygon's partition kind `mig` comes from the newest docs (docs/design/control-plane.md, "Hygon
  partitions", lists it as docs-only); the docs are the newest source, so we follow them.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from chain.validation import is_qualified_name

_KIND_PATTERN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Manufacturer:
    name: str
    """Lowercase key used in labels, aKeys and credits names (`nvidia`)."""
    pci_vendor_id: str
    """`<vendor>` or `<class>_<vendor>`, as configured."""
    resource_name: str
    """The base resource `<base>` every family key hangs off (`nvidia.com/gpu`)."""
    runtime_name: str
    """RuntimeClass name; empty when the manufacturer needs none."""
    partition_kind: str
    """Segment in `<base>.partitioned.<kind>-<profile>`; empty when cards cannot be partitioned."""

    @property
    def pci_vendor(self) -> str:
        """The bare vendor id, i.e. what follows the last `_` of the configured id."""
        return self.pci_vendor_id.rsplit("_", 1)[-1]

    @property
    def env_prefix(self) -> str:
        return f"GPUSTACK_{self.name.upper()}_"


_BUILTIN: tuple[Manufacturer, ...] = (
    Manufacturer("amd", "1002", "amd.com/gpu", "amd", ""),
    Manufacturer("ascend", "19e5", "huawei.com/npu", "ascend", ""),
    Manufacturer("cambricon", "cabc", "cambricon.com/mlu", "cambricon", ""),
    Manufacturer("hygon", "1d94", "hygon.com/dcu", "hygon", "mig"),
    Manufacturer("iluvatar", "1e3e", "iluvatar.com/gpu", "iluvatar", ""),
    Manufacturer("metax", "9999", "metax-tech.com/gpu", "metax", ""),
    Manufacturer("mthreads", "1ed5", "mthreads.com/gpu", "mthreads", ""),
    Manufacturer("nvidia", "10de", "nvidia.com/gpu", "nvidia", "mig"),
    Manufacturer("thead", "1ded", "alibabacloud.com/ppu", "", "mig"),
)


@dataclass(frozen=True)
class ManufacturerTable(Mapping[str, Manufacturer]):
    """Known manufacturers by name, plus the reverse index from base resource."""

    entries: tuple[Manufacturer, ...]

    def __getitem__(self, name: str) -> Manufacturer:
        for entry in self.entries:
            if entry.name == name:
                return entry
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (entry.name for entry in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def by_resource(self, base: str) -> Manufacturer | None:
        """The manufacturer whose base resource is exactly `base`."""
        for entry in self.entries:
            if entry.resource_name == base:
                return entry
        return None


def _override(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "")
    return value if value != "" else default


def _configured(default: Manufacturer, env: Mapping[str, str]) -> Manufacturer:
    prefix = default.env_prefix
    entry = Manufacturer(
        name=default.name,
        pci_vendor_id=_override(env, prefix + "PCI_VENDOR_ID", default.pci_vendor_id),
        resource_name=_override(env, prefix + "ACCELERATABLE_RESOURCE_NAME", default.resource_name),
        runtime_name=_override(env, prefix + "ACCELERATABLE_RUNTIME_NAME", default.runtime_name),
        partition_kind=_override(env, prefix + "PARTITION_KIND", default.partition_kind),
    )
    # Every family key is built by appending to the base, so a bad base would poison every
    # label and quota we derive; refuse it at start rather than emit invalid objects later.
    if "/" not in entry.resource_name or not is_qualified_name(entry.resource_name):
        raise ValueError(
            f"{prefix}ACCELERATABLE_RESOURCE_NAME: {entry.resource_name!r} is not a "
            "domain-prefixed resource name"
        )
    if entry.partition_kind and not _KIND_PATTERN.fullmatch(entry.partition_kind):
        raise ValueError(
            f"{prefix}PARTITION_KIND: {entry.partition_kind!r} must be lowercase letters and digits"
        )
    return entry


def manufacturers(env: Mapping[str, str]) -> ManufacturerTable:
    """The manufacturer table with the `GPUSTACK_<MFR>_*` overrides found in `env` applied."""
    table = ManufacturerTable(tuple(_configured(entry, env) for entry in _BUILTIN))
    bases = [entry.resource_name for entry in table.entries]
    if len(set(bases)) != len(bases):
        # Classification maps a base back to one manufacturer; two owners make it ambiguous.
        raise ValueError(f"two manufacturers share one base resource: {sorted(bases)}")
    return table


@functools.cache
def default_manufacturers() -> ManufacturerTable:
    """The process-wide table, read from `os.environ` on first use only."""
    return manufacturers(os.environ)
