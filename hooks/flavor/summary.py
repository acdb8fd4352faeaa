"""NodeFlavors: the per-node summary the Node decorator writes and the pools decorator relates.

The pools decorator needs, per node, only the flavors the node feeds and the descriptors that end up
in flavor notes. Relating the Nodes themselves would resend every Node on every heartbeat
(docs/architecture.md, "Scale"); this summary changes only when the node's flavors or descriptors
change, so the pools hook runs when a pool changes, on objects a tenth of a Node's size.

Shape (cluster-scoped, `gpustack.ai/v1alpha1`, named after its Node, owned by it):

    apiVersion: gpustack.ai/v1alpha1
    kind: NodeFlavors
    metadata:
      name: <node name>
      labels: {resource.gpustack.ai/type: nodeflavors}
    spec:
      node: <node name>                  # string, required
      acceleratable: <bool>              # node carries feature.gpustack.ai/acceleratable=true
      cpu:                               # strings, each omitted when unknown
        manufacturer: amd                # the CPU key's maker (gMfr)
        product: AMD EPYC 7763 64-Core Processor     # annotation feature.gpustack.ai/cpu-name
        family: "25"                     # annotation feature.gpustack.ai/cpu-family
        physicalCores, threadsPerPhysicalCore, logicalCores, stepping, clockSpeed,
        maxClockSpeed, cacheLine, cacheL1i, cacheL1d, cacheL2, cacheL3   # the other cpu-* notes
      levels: [<rack key>, kubernetes.io/hostname]   # the node's topology profile, absent when
                                         #   hostname-only (docs/topology.md, "Topology profiles")
      flavors:                           # CPU flavor first, then device flavors by aKey
      - name: gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d   # string, required
        generalKey: amd-epyc-7763        # string, required (gKey)
        acceleratorKey: nvidia-tesla-t4  # string, omitted on the CPU flavor (aKey)
        os: linux                        # string, required
        arch: amd64                      # string, required
        count: 2                         # integer >= 1: whole CPUs or cards per node
        product: Tesla-T4                # device flavors only, from the aKey's sibling labels;
        family: Turing                   #   each omitted when the node has no such label
        memory: 15Gi
        cores: "2560"

`name` is redundant with the identity fields; it is kept for people reading the object, and the
reader refuses a summary whose name disagrees, so the two can never drift apart silently.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chain.apis import CHAIN_API, NODE_FLAVORS
from chain.labels import RESOURCE_TYPE, cpu_annotation, resolved
from chain.names import HOSTNAME_LEVELS, cpu_flavor_name, device_flavor_name
from chain.pools import FlavorIdentity
from chain.settings import topology_levels
from hooks.request import BadRequest, Obj

TYPE_VALUE = "nodeflavors"
"""`resource.gpustack.ai/type` of a summary."""

CPU_DETAIL_FIELDS: tuple[tuple[str, str], ...] = (
    ("physical-cores", "physicalCores"),
    ("threads-per-core", "threadsPerPhysicalCore"),
    ("logical-cores", "logicalCores"),
    ("stepping", "stepping"),
    ("hz", "clockSpeed"),
    ("boost-freq", "maxClockSpeed"),
    ("cache-line", "cacheLine"),
    ("cache-l1i", "cacheL1i"),
    ("cache-l1d", "cacheL1d"),
    ("cache-l2", "cacheL2"),
    ("cache-l3", "cacheL3"),
)
"""CPU annotation attribute -> summary field, for the attributes that only feed `cpuDetail`."""
CPU_FIELDS = ("manufacturer", "product", "family", *(name for _, name in CPU_DETAIL_FIELDS))
DEVICE_FIELDS = ("product", "family", "memory", "cores")
_ONLY_STR = frozenset({str})


def cpu_facts(manufacturer: str, annotations: Mapping[str, str]) -> dict[str, str]:
    """The summary's `cpu` block from the node's CPU annotations; unresolved values dropped."""
    facts = {
        "manufacturer": manufacturer,
        "product": resolved(annotations.get(cpu_annotation("name"))),
        "family": resolved(annotations.get(cpu_annotation("family"))),
    }
    for attribute, name in CPU_DETAIL_FIELDS:
        facts[name] = resolved(annotations.get(cpu_annotation(attribute)))
    return {key: value for key, value in facts.items() if value}


@dataclass(frozen=True)
class FlavorEntry:
    """One flavor a node feeds, with the device descriptors its notes carry."""

    identity: FlavorIdentity
    device: Mapping[str, str] = field(default_factory=dict)
    """`product`, `family`, `memory`, `cores` of a device flavor (non-empty ones only)."""

    def to_spec(self) -> Obj:
        ident = self.identity
        entry: Obj = {"name": ident.name, "generalKey": ident.general_key}
        if ident.accelerator_key:
            entry["acceleratorKey"] = ident.accelerator_key
        entry.update(os=ident.os, arch=ident.arch, count=ident.count)
        entry.update((key, self.device[key]) for key in DEVICE_FIELDS if self.device.get(key))
        return entry


@dataclass(frozen=True)
class NodeSummary:
    node: str
    acceleratable: bool
    cpu: Mapping[str, str]
    flavors: tuple[FlavorEntry, ...]
    levels: tuple[str, ...] = HOSTNAME_LEVELS
    """The levels of the node's topology profile (`chain.profiles.node_levels`)."""

    def to_object(self) -> Obj:
        spec: Obj = {"node": self.node, "acceleratable": self.acceleratable}
        if self.cpu:
            spec["cpu"] = dict(self.cpu)
        if self.levels != HOSTNAME_LEVELS:
            spec["levels"] = list(self.levels)
        spec["flavors"] = [entry.to_spec() for entry in self.flavors]
        return {
            "apiVersion": CHAIN_API,
            "kind": NODE_FLAVORS,
            "metadata": {"name": self.node, "labels": {RESOURCE_TYPE: TYPE_VALUE}},
            "spec": spec,
        }


def scan(
    obj: Obj, path: str, accepted: dict[Any, Obj] | None = None
) -> tuple[str, bool, dict[str, str], list[Obj]]:
    """Check a related summary in place: (node, acceleratable, cpu, flavor entries).

    The pools hook reads one summary per node on every sync, so this builds no object per
    entry (the entries are returned as they came) and checks with plain type tests: at 5,000
    nodes, typed views of every entry cost more in allocation and garbage collection than the
    rest of the sync. The field-by-field walk runs only to explain a failure. An accepted
    entry's `name` agrees with its identity fields; that name is computed once per identity
    (`_entry_name`), since thousands of nodes share a few hundred flavors.

    `accepted` (one per sync, filled here) holds an accepted entry per flavor name: an entry
    equal to it (one `==`, in C) passes without the field-by-field check. Equality stands for
    that check because the accepted entry holds strings where it looks, and no other JSON value
    equals a string; only `count` is checked again, since `true == 1` and `8.0 == 8`.
    """
    spec = obj.get("spec")
    # `type(x) is T` rather than isinstance: exact JSON types, and `True` is not a count.
    if type(spec) is dict:
        node = spec.get("node")
        acceleratable = spec.get("acceleratable", False)
        cpu = spec.get("cpu", {})
        raw = spec.get("flavors", [])
        if (
            type(node) is str
            and node
            and type(acceleratable) is bool
            and type(cpu) is dict
            and type(raw) is list
            # The set of the values' types, built in C: a third of a generator's cost per node.
            and set(map(type, cpu.values())) <= _ONLY_STR
        ):
            for index, entry in enumerate(raw):
                if accepted is not None and type(entry) is dict:
                    same = accepted.get(entry.get("name"))
                    if same is not None and same == entry and type(entry["count"]) is int:
                        continue
                if not _entry_ok(entry):
                    raise _explain_entry(entry, f"{path}.spec.flavors[{index}]")
                if accepted is not None:
                    accepted[entry["name"]] = entry
            return node, acceleratable, cpu, raw
    raise _explain_summary(spec, f"{path}.spec")


def _entry_ok(entry: Any) -> bool:
    if type(entry) is not dict:
        return False
    general = entry.get("generalKey")
    accelerator = entry.get("acceleratorKey", "")
    os, arch, count = entry.get("os"), entry.get("arch"), entry.get("count")
    if not (
        type(general) is str
        and general
        and type(accelerator) is str
        and type(os) is str
        and os
        and type(arch) is str
        and arch
        and type(count) is int
        and count >= 1
    ):
        return False
    for key in DEVICE_FIELDS:
        if type(entry.get(key, "")) is not str:
            return False
    return bool(entry.get("name") == _entry_name(general, accelerator, os, arch, count))


@functools.lru_cache(maxsize=4096)
def _entry_name(general: str, accelerator: str, os: str, arch: str, count: int) -> str:
    """The flavor name of an entry's identity fields (a pure function of them). Remembered
    because every node of a flavor repeats its identity, and building a name runs a pattern
    over each part; bounded, so a stream of odd identities cannot grow a worker."""
    if accelerator:
        return device_flavor_name(general, accelerator, os, arch, count)
    return cpu_flavor_name(general, os, arch, count)


def summary_levels(obj: Obj, path: str) -> tuple[str, ...]:
    """The levels of a summary `scan` accepted: hostname-only when absent, else checked as the
    setting is (an unknown profile would name a Topology Kueue refuses)."""
    raw = obj["spec"].get("levels")
    if raw is None:
        return HOSTNAME_LEVELS
    if type(raw) is list:
        try:
            return _accepted_levels(tuple(raw))
        except (TypeError, ValueError):
            pass  # an unhashable or refused item: the check below names the field
    try:
        return topology_levels(f"{path}.spec.levels", raw)
    except ValueError as err:
        field, _, message = str(err).partition(": ")
        raise BadRequest(field, message) from None


@functools.lru_cache(maxsize=256)
def _accepted_levels(levels: tuple[str, ...]) -> tuple[str, ...]:
    """`topology_levels` of a list of levels, remembered: every node of a profile names the same
    few keys, and checking them (a pattern per key) cost a third of the pools hook's sync at
    5,000 nodes. Only accepted lists are remembered (a refusal raises); a JSON list equal to an
    accepted tuple holds the same strings, since no other JSON value equals a string."""
    return topology_levels("levels", list(levels))


def entry_of(entry: Obj) -> FlavorEntry:
    """The typed view of an entry `scan` accepted."""
    identity = FlavorIdentity(
        entry["generalKey"],
        entry.get("acceleratorKey", ""),
        entry["os"],
        entry["arch"],
        entry["count"],
    )
    return FlavorEntry(identity, {key: entry[key] for key in DEVICE_FIELDS if entry.get(key)})


def _explain_summary(spec: Any, path: str) -> BadRequest:
    """The BadRequest for a summary spec the fast check refused."""
    if not isinstance(spec, dict):
        return _wrong(path, "an object", spec)
    checks: tuple[tuple[str, type, str, Any], ...] = (
        ("node", str, "a non-empty string", None),
        ("acceleratable", bool, "a boolean", False),
        ("cpu", dict, "an object", {}),
        ("flavors", list, "a list", []),
    )
    for key, kind, what, default in checks:
        value = spec.get(key, default)
        if type(value) is not kind or (key == "node" and not value):
            return _wrong(f"{path}.{key}", what, value)
    for key, value in spec["cpu"].items():
        if not isinstance(value, str):
            return _wrong(f"{path}.cpu.{key}", "a string", value)
    return BadRequest(path, "unreadable summary")


def _explain_entry(entry: Any, path: str) -> BadRequest:
    """The BadRequest for a flavor entry the fast check refused."""
    if not isinstance(entry, dict):
        return _wrong(path, "an object", entry)
    count = entry.get("count")
    if type(count) is not int or count < 1:
        return _wrong(f"{path}.count", "an integer >= 1", count)
    for key in ("generalKey", "os", "arch", "name"):
        value = entry.get(key)
        if not isinstance(value, str) or not value:
            return _wrong(f"{path}.{key}", "a non-empty string", value)
    for key in ("acceleratorKey", *DEVICE_FIELDS):
        if not isinstance(entry.get(key, ""), str):
            return _wrong(f"{path}.{key}", "a string", entry[key])
    identity = FlavorIdentity(
        entry["generalKey"], entry.get("acceleratorKey", ""), entry["os"], entry["arch"], count
    )
    return BadRequest(
        f"{path}.name", f"{entry['name']!r} does not match its fields ({identity.name!r})"
    )


def _wrong(path: str, what: str, value: Any) -> BadRequest:
    return BadRequest(path, f"expected {what}, got {value!r}")
