"""Object names of the chain: ResourceFlavors, InstanceTypes (= ClusterQueues), their catalog
entries, LocalQueues and Topologies.

Names are identities: a hook finds the object it owns by recomputing its name, so every format
here must stay byte-for-byte stable. `gpustack--` (double dash) marks chain objects, and a `--`
inside a name separates the CPU key from the accelerator key; neither key can contain `--`
because `normalize_name` never keeps two separators in a row.

Every variable part of a name passes through `name_segment`, the one rule that turns a key into
a DNS-1123 subdomain segment. Keys are label-key names, which may hold `_` (Hygon reports its
DCU as `K100_AI`, so its aKey is `hygon-k100_ai`) and, from a hand-set label, capitals; object
names may not. A key that is already a valid segment is kept as it is, so every pool that exists
keeps its name; any other gets a hash of the key, so two keys never share a name.

The hostname-only profile (docs/design/control-plane.md, "One hostname-level Topology") is the
default, and its flavor names carry no profile suffix, so every pool that exists keeps its flavor
names. A flavor of any other profile ends with `-fnv64-<profile hash>`: Kueue makes a flavor's
`topologyName` and `nodeLabels` immutable, so a node that changes profile must feed a flavor of
another name (docs/topology.md, "Topology profiles"). `flavor_count` reads both forms.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from chain.labels import HOSTNAME

CHAIN_PREFIX = "gpustack--"
GENERIC = "generic"
"""General group of the collapsed CPU pool, and the CPU key of a node with no CPU identity."""

LOCAL_QUEUE_PREFIX = "gpustack-fnv64-"
TOPOLOGY_PREFIX = "gpustack-"

_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

_PROFILE_MARK = "-fnv64-"

_SEGMENT = re.compile(r"[a-z0-9]+([-.][a-z0-9]+)*")
"""A part kept as it is in a name: what `normalize_name` gives when it keeps no `_`."""
_NOT_IN_SEGMENT = re.compile(r"[^a-z0-9]+")
_SEGMENT_DIGEST = 8
"""Hex digits of a rewritten part's hash: 32 bits, against the few keys of one cluster."""
_COUNT_SEGMENT = re.compile(r"([0-9]+)[cd]")


@functools.lru_cache(maxsize=1024)
def fnv64a(text: str) -> str:
    """FNV-1a 64 of the UTF-8 bytes of `text`, as 16 lowercase hex digits.

    Remembered (bounded): a Python loop per byte, and the pools hook names each flavor's
    profile by it, the same few profiles for hundreds of flavors on every sync.
    """
    digest = _FNV64_OFFSET
    for byte in text.encode("utf-8"):
        digest = ((digest ^ byte) * _FNV64_PRIME) & _MASK64
    return f"{digest:016x}"


@functools.lru_cache(maxsize=4096)
def name_segment(part: str) -> str:
    """`part` (a key, an os or an arch) as a segment of an object name.

    A part that is already lowercase `a-z0-9` with single inner `-`/`.` (what `normalize_name`
    gives, bar `_`) is returned unchanged: names of existing pools must not move. Any other is
    lowercased, each run of other characters becomes one `-`, and `-<8 hex>` of the part's
    FNV-1a is appended: `k100_ai` and `k100-ai` are different label keys, so they must not meet
    in one flavor or pool name. The result never holds `--` (the CPU/accelerator separator) and
    starts and ends alphanumeric, so a name built of such segments is a DNS-1123 subdomain.
    Remembered (bounded): every flavor and pool name is rebuilt from the same few keys on every
    sync.
    """
    if not part or _SEGMENT.fullmatch(part):
        return part
    spelled = _NOT_IN_SEGMENT.sub("-", part.lower()).strip("-")
    digest = fnv64a(part)[:_SEGMENT_DIGEST]
    return f"{spelled}-{digest}" if spelled else digest


def cpu_flavor_name(general_key: str, os: str, arch: str, cores: int) -> str:
    """`gpustack--<gKey>-<os>-<arch>-<N>c`, N = the node's whole CPU count."""
    return f"{CHAIN_PREFIX}{_platform(name_segment(general_key), os, arch)}-{cores}c"


def device_flavor_name(
    general_key: str, accelerator_key: str, os: str, arch: str, cards: int
) -> str:
    """`gpustack--<gKey>--<aKey>-<os>-<arch>-<N>d`, N = cards of that model per node."""
    return f"{CHAIN_PREFIX}{_platform(_keys(general_key, accelerator_key), os, arch)}-{cards}d"


def _keys(general_key: str, accelerator_key: str) -> str:
    """`<gKey>--<aKey>`, both as name segments."""
    return f"{name_segment(general_key)}--{name_segment(accelerator_key)}"


def _platform(keys: str, os: str, arch: str) -> str:
    """`<keys>-<os>-<arch>`, os and arch as name segments."""
    return f"{keys}-{name_segment(os)}-{name_segment(arch)}"


def flavor_count(name: str) -> int | None:
    """The per-node count a flavor name ends with (`...-8c`, `...-2d`), or None.

    Scans `-` segments from the end so a key that itself ends in digits cannot be misread.
    """
    head = name.split(_PROFILE_MARK, 1)[0]
    for segment in reversed(head.split("-")):
        match = _COUNT_SEGMENT.fullmatch(segment)
        if match:
            return int(match[1])
    return None


def instance_type_name(
    acceleratable: bool, aware: bool, general_key: str, accelerator_key: str, os: str, arch: str
) -> str:
    """Name of the InstanceType (and its ClusterQueue) a flavor rolls up into.

    With `instance-type-aware-cpu-manufacturer` off every CPU collapses: CPU flavors meet in
    one `generic` pool and accelerated flavors are pooled by accelerator alone.
    """
    keys = instance_type_flavor_name(acceleratable, aware, general_key, accelerator_key)
    return _platform(keys, os, arch)


def instance_type_flavor_name(
    acceleratable: bool, aware: bool, general_key: str, accelerator_key: str
) -> str:
    """Name of the read-only InstanceTypeFlavor catalog entry: the pool name without os/arch."""
    if not acceleratable:
        return f"{CHAIN_PREFIX}{name_segment(general_key) if aware else GENERIC}"
    if aware:
        return CHAIN_PREFIX + _keys(general_key, accelerator_key)
    return f"{CHAIN_PREFIX}{name_segment(accelerator_key)}"


def local_queue_name(cluster_queue: str) -> str:
    """`gpustack-fnv64-<16 hex>`: always 31 characters, so it fits the queue-name label value
    however long the ClusterQueue name is."""
    return LOCAL_QUEUE_PREFIX + fnv64a(cluster_queue)


def topology_profile(levels: Sequence[str]) -> str:
    """`fnv64-<hash>` of the ordered level keys; NUL cannot occur in a label key, so the join
    is unambiguous."""
    return "fnv64-" + fnv64a("\x00".join(levels))


def topology_name(profile: str) -> str:
    """Name of the Kueue Topology of a profile: `gpustack-<profile>`."""
    return TOPOLOGY_PREFIX + profile


HOSTNAME_LEVELS = (HOSTNAME,)
HOSTNAME_PROFILE = topology_profile(HOSTNAME_LEVELS)
"""The default profile (docs/design/control-plane.md, "One hostname-level Topology"), and the one
a node falls back to when it lacks a level of the configured profile."""


def profiled_flavor_name(name: str, profile: str) -> str:
    """A flavor's name in `profile`: as it is for the hostname-only profile (existing pools keep
    their names), else with `-<profile>` appended (`-fnv64-<16 hex>`)."""
    return name if profile == HOSTNAME_PROFILE else f"{name}-{profile}"
