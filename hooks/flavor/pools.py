"""The pools decorator: ResourceFlavors, the Topology and derived InstanceTypes from summaries.

Target: the Settings singleton. Related: every NodeFlavors summary. Answer `attachments`:

- one ResourceFlavor per flavor name some summary feeds, in the summary's topology profile (the
  name carries the profile unless it is hostname-only); the contributors sorted by node name,
  the first describes it, capacity = #contributors x per-node count. A flavor nobody feeds is
  not returned, so Metacontroller deletes it.
- one Topology per profile some flavor names (a Topology no flavor names would only be clutter,
  and the next flavor brings it back); docs/topology.md, "Topology profiles".
- with `instance-type-derived-from-node`: one InstanceType per pool, described by the pool's
  first flavor by name.

InstanceTypes are create-only (update strategy OnDelete), but an attachment left out of the
answer is deleted. So every InstanceType already attached is returned as observed, whatever its
pool's fate: a derived type outlives its pool (the queue hook drains it), and an admin's later
edits stand. Pools whose type is missing get a fresh one, so a type deleted by hand comes back
while its pool lives. A type is never rewritten.

`instance-type-mixed-on-node=false` is applied here as well as in the Node decorator: right
after a flip the summaries still reflect the old value, and a CPU flavor counting an accelerated
node while its nodeLabels exclude such nodes would promise capacity that cannot be scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chain.apis import (
    CHAIN_API,
    INSTANCE_TYPE,
    INSTANCE_TYPE_RESOURCE,
    KUEUE_API,
    NODE_FLAVORS,
    NODE_FLAVORS_RESOURCE,
    RESOURCE_FLAVOR,
    RESOURCE_FLAVORS_RESOURCE,
    TOPOLOGIES_RESOURCE,
    TOPOLOGY,
    WORKER_API,
)
from chain.labels import RESOURCE_TYPE, RESOURCE_TYPE_NODES, RESOURCE_TYPE_TOPOLOGY
from chain.names import profiled_flavor_name, topology_profile
from chain.settings import Settings
from hooks.flavor.objects import as_observed, instance_type, resource_flavor, topology
from hooks.flavor.summary import FlavorEntry, entry_of, scan, summary_levels
from hooks.readers import parent_settings
from hooks.request import BadRequest, DecoratorRequest, Obj, object_path

RELEASE_WAIT = 2
"""Seconds between finalize calls while the lifecycle keeper releases the attachments."""


def customize(parent: Obj) -> Obj:
    """Relate every summary, and every object whose name an attachment could take (every
    InstanceType, the chain's flavors and Topology); the rules depend on nothing in the parent
    (the answer is cached)."""

    def labelled(value: str) -> Obj:
        return {"matchLabels": {RESOURCE_TYPE: value}}

    return {
        "relatedResources": [
            {"apiVersion": CHAIN_API, "resource": NODE_FLAVORS_RESOURCE},
            {"apiVersion": WORKER_API, "resource": INSTANCE_TYPE_RESOURCE},
            {
                "apiVersion": KUEUE_API,
                "resource": RESOURCE_FLAVORS_RESOURCE,
                "labelSelector": labelled(RESOURCE_TYPE_NODES),
            },
            {
                "apiVersion": KUEUE_API,
                "resource": TOPOLOGIES_RESOURCE,
                "labelSelector": labelled(RESOURCE_TYPE_TOPOLOGY),
            },
        ]
    }


@dataclass(frozen=True)
class Flavor:
    """One flavor over all its contributors."""

    entry: FlavorEntry
    """The first contributor's entry (by node name): it describes the flavor."""
    cpu: Mapping[str, str]
    """The first contributor's CPU descriptors."""
    contributors: int
    levels: tuple[str, ...]
    """The levels of the topology profile its nodes are in (the name carries the profile)."""


def gather(summaries: Iterable[Obj], mixed: bool) -> dict[str, Flavor]:
    """Flavors by name, sorted by name, each described by its first contributor by node name.

    This is the loop that runs once per node and entry, so it keeps no per-entry objects: a
    flavor's group is [first node, its entry, its cpu, contributors, levels], and typed views
    are made only for the entry that describes a flavor. Nodes of one flavor identity in two
    profiles feed two flavors: the profile is part of the name.
    """
    groups: dict[str, list[Any]] = {}
    profiles: dict[tuple[str, ...], str] = {}
    accepted: dict[Any, Obj] = {}
    for obj in summaries:
        try:
            node, accelerated, cpu, entries = scan(obj, "", accepted)
            levels = summary_levels(obj, "")
        except BadRequest as err:
            raise BadRequest(object_path("related", obj) + err.field, err.message) from None
        profile = profiles.get(levels)
        if profile is None:
            profile = profiles[levels] = topology_profile(levels)
        for entry in entries:
            if not mixed and accelerated and not entry.get("acceleratorKey"):
                continue
            name = profiled_flavor_name(entry["name"], profile)
            group = groups.get(name)
            if group is None:
                groups[name] = [node, entry, cpu, 1, levels]
                continue
            group[3] += 1
            if node < group[0]:
                group[0:3] = node, entry, cpu
    return {
        name: Flavor(entry_of(groups[name][1]), groups[name][2], groups[name][3], groups[name][4])
        for name in sorted(groups)
    }


def sync(request: DecoratorRequest) -> Obj:
    settings = parent_settings(request)
    if settings is None:
        return {"attachments": []}
    summaries = request.related.of(NODE_FLAVORS, CHAIN_API)
    observed = [as_observed(obj) for obj in request.attachments.of(INSTANCE_TYPE, WORKER_API)]
    attached = {_identity(obj) for obj in request.attachments}
    desired = attachments(summaries, observed, settings)
    if request.finalizing:
        # The singleton is being deleted. The lifecycle keeper releases every attachment (it
        # drops the controller reference), so none is deleted with it; until then each stays
        # as it is (an attachment left out would be deleted, a new one would only be released).
        # Released objects no longer point at the singleton, so their changes do not wake
        # Metacontroller for it: ask to be called again soon.
        kept = [obj for obj in desired if _identity(obj) in attached]
        if attached:
            return {"attachments": kept, "finalized": False, "resyncAfterSeconds": RELEASE_WAIT}
        return {"attachments": [], "finalized": True}
    # A name taken by an object that is not ours (an InstanceType an admin made or the keeper
    # released, a flavor released with an earlier singleton and not yet adopted back) is not
    # created: Metacontroller would fail the whole sync on AlreadyExists.
    owned_kinds = ((RESOURCE_FLAVOR, KUEUE_API), (TOPOLOGY, KUEUE_API), (INSTANCE_TYPE, WORKER_API))
    related = (obj for kind, api in owned_kinds for obj in request.related.of(kind, api))
    taken = {_identity(obj) for obj in related} - attached
    return {"attachments": [obj for obj in desired if _identity(obj) not in taken]}


def _identity(obj: Obj) -> tuple[str, str]:
    return str(obj["kind"]), str(obj["metadata"]["name"])


def attachments(summaries: Iterable[Obj], observed: list[Obj], settings: Settings) -> list[Obj]:
    """The full desired attachment set: flavors by name, the Topologies by name, InstanceTypes
    by name."""
    mixed = settings.instance_type_mixed_on_node
    aware = settings.instance_type_aware_cpu_manufacturer
    flavors = gather(summaries, mixed)
    result = [
        resource_flavor(flavor.entry, flavor.cpu, flavor.contributors, mixed, aware, flavor.levels)
        for flavor in flavors.values()
    ]
    profiles = {flavor.levels for flavor in flavors.values()}
    topologies = [topology(levels) for levels in profiles]
    result.extend(sorted(topologies, key=lambda obj: str(obj["metadata"]["name"])))

    types = {obj["metadata"]["name"]: obj for obj in observed}
    if settings.instance_type_derived_from_node:
        for flavor in flavors.values():
            name = flavor.entry.identity.instance_type_name(aware)
            if name not in types:
                types[name] = instance_type(flavor.entry, flavor.cpu, aware)
    result.extend(types[name] for name in sorted(types))
    return result
