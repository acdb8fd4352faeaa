"""The objects the pools decorator authors: ResourceFlavors, Topologies, derived InstanceTypes.

Every builder returns only the fields the chain decides (Metacontroller applies them); nothing here
depends on anything but its arguments, so equal inputs always give byte-equal objects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from chain.apis import INSTANCE_TYPE, KUEUE_API, RESOURCE_FLAVOR, TOPOLOGY, WORKER_API
from chain.keys import split_accelerator_key
from chain.labels import (
    ACCELERATABLE,
    ARCH,
    DERIVED_FROM_NODE,
    FALSE,
    MANAGED,
    OS,
    RESOURCE_TYPE,
    RESOURCE_TYPE_NODES,
    RESOURCE_TYPE_TOPOLOGY,
    TOPOLOGY_PROFILE,
    TRUE,
    bool_value,
    capacity_key,
    count_key,
    general_feature_key,
    note_key,
)
from chain.names import (
    HOSTNAME_LEVELS,
    profiled_flavor_name,
    topology_name,
    topology_profile,
)
from hooks.flavor.presets import CPU_POOL_UNITS, LOCAL_STORAGE, preset_unit_resources
from hooks.flavor.summary import FlavorEntry
from hooks.request import BadRequest, Obj, object_path

CPU_ONLY_DISPLAY_NAME = "CPU-only"
"""Display name of the collapsed CPU pool: no single CPU model describes it."""
DISPLAY_NAME_MAX = 64

_DETAIL_FIELDS = (
    "physicalCores",
    "threadsPerPhysicalCore",
    "logicalCores",
    "stepping",
    "clockSpeed",
    "maxClockSpeed",
    "cacheLine",
)
_CACHE_FIELDS = (("cacheL1i", "l1i"), ("cacheL1d", "l1d"), ("cacheL2", "l2"), ("cacheL3", "l3"))


def topology(levels: tuple[str, ...] = HOSTNAME_LEVELS) -> Obj:
    """The Topology of a profile: the hostname-level one by default (docs/design/control-plane.md,
    "One hostname-level Topology"), named by the hash of its levels, which Kueue makes
    immutable (docs/topology.md, "Topology profiles")."""
    return {
        "apiVersion": KUEUE_API,
        "kind": TOPOLOGY,
        "metadata": {
            "name": topology_name(topology_profile(levels)),
            "labels": {RESOURCE_TYPE: RESOURCE_TYPE_TOPOLOGY},
        },
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


def resource_flavor(
    entry: FlavorEntry,
    cpu: Mapping[str, str],
    contributors: int,
    mixed: bool,
    aware: bool,
    levels: tuple[str, ...] = HOSTNAME_LEVELS,
) -> Obj:
    """A flavor as described by its first contributor, sized by all `contributors`, in the
    topology profile of `levels`.

    The labels let pools select the flavor and read its size without listing nodes; the
    nodeLabels pin admitted Pods to exactly the contributing nodes (≤ 8 entries, Kueue's cap).
    The profile is in the name, the profile label and `topologyName`: Kueue refuses a change
    to a flavor's `nodeLabels` or `topologyName`, so another profile is another flavor.
    """
    profile = topology_profile(levels)
    ident = entry.identity
    own = ident.feature_key
    count = str(ident.count)
    labels = {
        own: TRUE,
        OS: ident.os,
        ARCH: ident.arch,
        ACCELERATABLE: bool_value(ident.acceleratable),
        count_key(own): count,
        capacity_key(own): str(contributors * ident.count),
        RESOURCE_TYPE: RESOURCE_TYPE_NODES,
        TOPOLOGY_PROFILE: profile,
    }
    node_labels = {
        MANAGED: TRUE,
        OS: ident.os,
        ARCH: ident.arch,
        own: TRUE,
        count_key(own): count,
        TOPOLOGY_PROFILE: profile,
    }
    if ident.acceleratable:
        # The node's CPU key rides along so a CPU-aware pool can select the flavor, and the
        # pin keeps a same-card node with another CPU out of it.
        labels[general_feature_key(ident.general_key)] = TRUE
        node_labels[general_feature_key(ident.general_key)] = TRUE
    elif not mixed:
        node_labels[ACCELERATABLE] = FALSE
    return {
        "apiVersion": KUEUE_API,
        "kind": RESOURCE_FLAVOR,
        "metadata": {
            "name": profiled_flavor_name(ident.name, profile),
            "labels": labels,
            "annotations": flavor_notes(entry, cpu, aware),
        },
        "spec": {
            "nodeLabels": node_labels,
            "tolerations": [{"operator": "Exists"}],
            "topologyName": topology_name(profile),
        },
    }


def flavor_notes(entry: FlavorEntry, cpu: Mapping[str, str], aware: bool) -> dict[str, str]:
    """`note.gpustack.ai/*` descriptors; empty ones are left out rather than written as "".

    `cpuDetail` is always on a CPU flavor; a device flavor carries it only under CPU awareness,
    where the pool's CPU is part of what the InstanceType describes.
    """
    ident = entry.identity
    notes = {
        "acceleratable": bool_value(ident.acceleratable),
        "generalGroup": ident.general_key,
        "acceleratorGroup": ident.accelerator_key,
    }
    if ident.acceleratable:
        notes["manufacturer"] = split_accelerator_key(ident.accelerator_key)[0]
        notes.update(entry.device)
        if aware:
            notes["cpuDetail"] = cpu_detail(cpu, with_identity=True)
    else:
        notes.update((key, cpu.get(key, "")) for key in ("manufacturer", "product", "family"))
        notes["cpuDetail"] = cpu_detail(cpu, with_identity=False)
    return {note_key(key): value for key, value in notes.items() if value}


def cpu_detail(cpu: Mapping[str, str], with_identity: bool) -> str:
    """The `cpuDetail` note: compact JSON, keys sorted, so equal CPUs give equal notes.

    On a device flavor the CPU's own maker, product and family are included, since the flavor's
    top-level notes describe the card.
    """
    return _cpu_detail(tuple(cpu.items()), with_identity)


@functools.lru_cache(maxsize=1024)
def _cpu_detail(items: tuple[tuple[str, str], ...], with_identity: bool) -> str:
    """`cpu_detail` of a CPU's descriptors, remembered (bounded): a flavor's notes are rebuilt on
    every sync, and the few CPU models of a cluster describe hundreds of flavors."""
    cpu = dict(items)
    detail: dict[str, object] = {key: cpu[key] for key in _DETAIL_FIELDS if cpu.get(key)}
    cache = {short: cpu[key] for key, short in _CACHE_FIELDS if cpu.get(key)}
    if cache:
        detail["cache"] = cache
    if with_identity:
        identity = ("manufacturer", "product", "family")
        detail.update((key, cpu[key]) for key in identity if cpu.get(key))
    return json.dumps(detail, sort_keys=True, separators=(",", ":"))


def instance_type(entry: FlavorEntry, cpu: Mapping[str, str], aware: bool) -> Obj:
    """The derived InstanceType of the pool `entry` rolls up into, at creation-time defaults."""
    ident = entry.identity
    pool = ident.pool(aware)
    if ident.acceleratable:
        product = entry.device.get("product", "")
        units = preset_unit_resources(split_accelerator_key(ident.accelerator_key)[0], product)
        display = product
    else:
        units = CPU_POOL_UNITS
        display = cpu.get("product", "") if aware else CPU_ONLY_DISPLAY_NAME
    spec: Obj = {"generalGroup": pool.general_group}
    if pool.accelerator_group:
        spec["acceleratorGroup"] = pool.accelerator_group
    spec.update(acceleratable=pool.acceleratable, os=pool.os, arch=pool.arch)
    if display:
        spec["displayName"] = display[:DISPLAY_NAME_MAX]
    spec.update(unitResources=units.as_spec(), localStorage=LOCAL_STORAGE)
    return {
        "apiVersion": WORKER_API,
        "kind": INSTANCE_TYPE,
        "metadata": {"name": ident.instance_type_name(aware), "labels": {DERIVED_FROM_NODE: TRUE}},
        "spec": spec,
    }


def as_observed(obj: Obj) -> Obj:
    """An observed attachment returned as it is, minus what the server owns.

    Only name, labels and spec are kept: resourceVersion, uid, ownerReferences, managedFields
    and status are the server's or Metacontroller's to set, and echoing them would be wrong.
    """
    meta = obj["metadata"]
    kept: Obj = {"name": meta["name"]}
    labels = meta.get("labels")
    if labels is not None and not (
        isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())
    ):
        path = object_path("attachments", obj)
        raise BadRequest(f"{path}.metadata.labels", "expected a map of strings")
    if labels:
        kept["labels"] = dict(labels)
    observed: Obj = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": kept}
    if "spec" in obj:
        observed["spec"] = obj["spec"]
    return observed
