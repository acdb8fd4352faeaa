"""PoolCards: one pool's cards tallied from its nodes' `Devices`, the InstanceType views' input.

The status hook used to relate every `Devices` object of its pool: 36 MiB per request at 5,000
nodes, whose decoding alone neared Metacontroller's 10 s hook timeout. One small summary per
node (as `NodeFlavors` is for the pools hook) would still weigh about 3.8 KiB as served
(Metacontroller's last-applied copy, managedFields, the owner reference; measured for a node
with two MIG cards), 18 MiB at 5,000 nodes. Every number a pool's status reads from its nodes
is a sum, a maximum or a first-by-name over them, so one object per InstanceType carries them
exactly: the four views, the cutting capacity (`slicedDetail`), the runtime versions and the
compute capability.

It is written by the pool-cards keeper (`verdictdriver/pool_cards.py`, in the verdict driver),
which watches the Devices, and read by the status hook, which relates it by name. The pool's
members are chosen here as the hook chose them: the Devices carrying the pool's labels (narrowed
by the CPU key when the settings ask for CPU-aware pools), and on each the pool's card group.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chain import fields
from chain.accelerators import Accelerator
from chain.apis import CHAIN_API, INSTANCE_TYPE, WORKER_API
from chain.devices import (
    PhysicalSlicedDetail,
    ProfileTotal,
    SlicedDetail,
    aggregate_sliced_detail,
)
from chain.partitions import publish_profile_name
from chain.pool_nodes import PoolNode, pool_devices_selector, pool_node
from chain.pools import PoolIdentity, selector_matches
from chain.views import AcceleratorViews, accelerator_views, free_whole_cards

POOL_CARDS = "PoolCards"
POOL_CARDS_RESOURCE = "poolcards"
POOL_CARDS_API = CHAIN_API

Obj = dict[str, Any]
ReadNode = Callable[[Mapping[str, object], str], PoolNode | None]

_VERSION = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:\.[0-9]+)*")


def runtime_versions(versions: Iterable[str]) -> list[str]:
    """Sorted by (major, minor) ascending and deduplicated on that pair (`12.4` and `12.4.1` are
    one); strings that are not versions are dropped."""
    keyed: dict[tuple[int, int], str] = {}
    for text in sorted(versions):
        match = _VERSION.fullmatch(text)
        if match:
            keyed.setdefault((int(match[1]), int(match[2] or 0)), text)
    return [keyed[key] for key in sorted(keyed)]


def _sliced_detail(nodes: Sequence[PoolNode]) -> SlicedDetail:
    """The pool's cutting capacity: every card of the pool's group, summed; profile names
    published."""
    cards = (
        Accelerator(card.id, 0, status=card.capability) for node in nodes for card in node.cards
    )
    total = aggregate_sliced_detail(cards)
    maker = nodes[0].manufacturer if nodes else ""
    profiles = tuple(
        ProfileTotal(publish_profile_name(maker, profile.name), profile.count, profile.memory_mib)
        for profile in total.physical.profiles
    )
    return SlicedDetail(total.logical, PhysicalSlicedDetail(total.physical.count, profiles))


def render_sliced_detail(detail: SlicedDetail) -> Obj:
    """`status.detail.slicedDetail`: every field written, zeros included."""
    return {
        "logical": {
            "count": detail.logical.count,
            "coresPercentageOvercommit": detail.logical.cores_percentage_overcommit,
        },
        "physical": {
            "count": detail.physical.count,
            "profiles": [profile.render() for profile in detail.physical.profiles],
        },
    }


@dataclass(frozen=True)
class DomainCards:
    """One topology domain's nodes of the pool (docs/topology.md, "Views")."""

    name: str
    """The domain: the values of the profile's levels above the hostname, top first, joined
    by `/` (`block-1/rack-3`), so equal rack names of two blocks stay apart."""
    free: tuple[int, ...]
    """Free whole cards of each node of the domain, most first."""
    idle: int
    """Nodes whose every card of the pool is free: whole-node gangs."""

    def render(self) -> Obj:
        return {"name": self.name, "freeWholeCards": list(self.free), "idleNodes": self.idle}

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> DomainCards:
        free = obj.get("freeWholeCards") or []
        where = fields.at(path, "freeWholeCards")
        if not isinstance(free, list):
            raise ValueError(f"{where}: expected a list of integers")
        counts = tuple(fields.whole(value, f"{where}[{i}]") for i, value in enumerate(free))
        return cls(
            fields.string(obj, "name", path, required=True),
            counts,
            fields.integer(obj, "idleNodes", path),
        )

    def summary(self) -> str:
        """`<domain>:<idle>/<nodes>` for the printer column."""
        return f"{self.name}:{self.idle}/{len(self.free)}"


def domain_cards(
    nodes: Sequence[PoolNode], domain_of: Mapping[str, str]
) -> tuple[DomainCards, ...]:
    """Per domain (by name), the free whole cards of its nodes; nodes without a domain (in
    the hostname-only profile, or gone from `domain_of`) or without a card are in none."""
    free: dict[str, list[int]] = {}
    idle: dict[str, int] = {}
    for node in nodes:
        domain = domain_of.get(node.name)
        if domain is None or not node.cards:
            continue
        count = free_whole_cards(node)
        free.setdefault(domain, []).append(count)
        idle[domain] = idle.get(domain, 0) + (count == len(node.cards))
    return tuple(
        DomainCards(name, tuple(sorted(free[name], reverse=True)), idle[name])
        for name in sorted(free)
    )


@dataclass(frozen=True)
class PoolCards:
    """What a pool's status reads from its nodes (the `spec` of a PoolCards object)."""

    nodes: int = 0
    """Nodes with at least one card of the pool's group."""
    compute_capability: str = ""
    """The first node's (by name) that reports one."""
    runtime_versions: tuple[str, ...] = ()
    """Oldest first, see `runtime_versions`."""
    sliced_detail: SlicedDetail = field(default_factory=SlicedDetail)
    views: AcceleratorViews = field(default_factory=AcceleratorViews)
    rdma_nodes: int = 0
    """Of `nodes`, those with an RDMA port up (docs/topology.md, "Network cards")."""
    domains: tuple[DomainCards, ...] = ()
    """Per topology domain, when the pool's nodes are in a profile above the hostname."""

    def render(self) -> Obj:
        rendered: Obj = {
            "nodes": self.nodes,
            "rdmaNodes": self.rdma_nodes,
            "computeCapability": self.compute_capability,
            "runtimeVersions": list(self.runtime_versions),
            "slicedDetail": render_sliced_detail(self.sliced_detail),
            "views": self.views.render(),
        }
        if self.domains:
            rendered["domains"] = [domain.render() for domain in self.domains]
        return rendered

    @classmethod
    def parse(cls, spec: fields.Obj, path: str) -> PoolCards:
        versions = spec.get("runtimeVersions") or []
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            raise ValueError(f"{fields.at(path, 'runtimeVersions')}: expected a list of strings")
        return cls(
            nodes=fields.integer(spec, "nodes", path),
            rdma_nodes=fields.integer(spec, "rdmaNodes", path),
            compute_capability=fields.string(spec, "computeCapability", path),
            runtime_versions=tuple(versions),
            sliced_detail=SlicedDetail.parse(
                fields.child(spec, "slicedDetail", path, required=True),
                fields.at(path, "slicedDetail"),
            ),
            views=AcceleratorViews.parse(
                fields.child(spec, "views", path, required=True), fields.at(path, "views")
            ),
            domains=tuple(
                DomainCards.parse(item, where)
                for item, where in fields.items(spec, "domains", path)
            ),
        )


def tally(nodes: Sequence[PoolNode], domain_of: Mapping[str, str] | None = None) -> PoolCards:
    """The PoolCards of a pool whose nodes (sorted by name) are `nodes`; `domain_of` maps a
    node's name to its topology domain (`chain.profiles.node_domain`)."""
    capability = next((node.compute_capability for node in nodes if node.compute_capability), "")
    versions = runtime_versions(node.runtime_version for node in nodes if node.runtime_version)
    return PoolCards(
        nodes=len(nodes),
        compute_capability=capability,
        runtime_versions=tuple(versions),
        sliced_detail=_sliced_detail(nodes),
        views=accelerator_views(nodes),
        rdma_nodes=sum(1 for node in nodes if node.rdma),
        domains=domain_cards(nodes, domain_of or {}),
    )


@dataclass(frozen=True)
class Membership:
    """Which Devices belong to a pool, and which card group on each."""

    selector: Mapping[str, str]
    akey: str

    @classmethod
    def of(cls, identity: PoolIdentity, aware: bool) -> Membership | None:
        """None for a pool without cards: a CPU pool, or a card pool without an accelerator
        group (which validation refuses; its labels alone would match every card node)."""
        if not identity.acceleratable or not identity.accelerator_group:
            return None
        selector = pool_devices_selector(identity.schedule_labels(aware))
        return None if selector is None else cls(selector, identity.accelerator_group)

    def admits(self, devices: Mapping[str, object]) -> bool:
        """Whether a Devices object carries the pool's labels (a ValueError for labels that are
        not a map of strings)."""
        meta = devices.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        labels = labels or {}
        if not isinstance(labels, Mapping) or not all(
            isinstance(value, str) for value in labels.values()
        ):
            raise ValueError("metadata.labels: expected a map of strings")
        return selector_matches(self.selector, labels)

    def members(
        self,
        devices: Iterable[Mapping[str, object]],
        skip: Callable[[Mapping[str, object], ValueError], None] | None = None,
    ) -> list[Mapping[str, object]]:
        """The Devices objects that carry the pool's labels. One whose labels cannot be read
        raises, or is passed to `skip` and left out."""
        found = []
        for obj in devices:
            try:
                member = self.admits(obj)
            except ValueError as err:
                if skip is None:
                    raise
                skip(obj, err)
                continue
            if member:
                found.append(obj)
        return found

    def nodes(
        self, members: Iterable[Mapping[str, object]], read: ReadNode = pool_node
    ) -> list[PoolNode]:
        """The pool's group on every member with a card of it, by name. `read` may cache (the
        keeper's does); the default raises a ValueError naming the field it cannot read."""
        found = [node for obj in members if (node := read(obj, self.akey)) is not None]
        return sorted(found, key=lambda node: node.name)


def pool_cards(
    identity: PoolIdentity, aware: bool, devices: Iterable[Mapping[str, object]]
) -> PoolCards | None:
    """A pool's PoolCards over every Devices object given; None for a pool without cards."""
    membership = Membership.of(identity, aware)
    return None if membership is None else tally(membership.nodes(membership.members(devices)))


def pool_cards_object(instance_type: Mapping[str, Any], cards: PoolCards) -> Obj:
    """The PoolCards object of an InstanceType: named after it, and owned by it, so it goes
    when the type goes (not as controller: nothing but the keeper writes it). A type not yet
    created (the offline planner's) has no uid, so no owner."""
    meta = instance_type["metadata"]
    metadata: Obj = {"name": meta["name"]}
    if meta.get("uid"):
        owner = {"apiVersion": WORKER_API, "kind": INSTANCE_TYPE, "name": meta["name"]}
        metadata["ownerReferences"] = [{**owner, "uid": meta["uid"]}]
    return {
        "apiVersion": POOL_CARDS_API,
        "kind": POOL_CARDS,
        "metadata": metadata,
        "spec": cards.render(),
    }
