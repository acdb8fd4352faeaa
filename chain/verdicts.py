"""The `gpustack-node-devices` verdict: can the cards Kueue's quota stands for be found, card by
card, in the ledger of the nodes the Workload was assigned? (docs/design/control-plane.md, "The
per-card check")

Kueue's credits see a pool's scalar total; eight cards each half sliced add up to four free
cards, yet none of them takes a whole-card request. This check walks the cards instead: each
demand is charged to concrete cards (`chain/charging.py`) with a per-card budget shared by the
whole Workload, after first charging the cards promised to Workloads admitted earlier whose Pods
have not reached the ledger yet (`chain/holdings.py`). The answer is Ready or Retry (never
Rejected): capacity frees by itself.

`judge` is pure: the driver hands in the flavors, the nodes' `Devices` (status rebuilt from the
Pods), node hostnames, the other Workloads and how many of their Pods the ledger holds.

Judgment calls (messages): the spec gives four texts in full (pool/node x Ready/Retry) and
elides the tails of the others; those tails, and the partition failure texts, are ours.
Promised cards that no longer fit (the ledger moved under them) are charged as far as they go.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chain import fields
from chain.charging import (
    Demand,
    Miss,
    NodeCards,
    candidate_cards,
    demands,
    first_miss,
    flavor_scope,
    unplaced_slice,
)
from chain.devices import Devices
from chain.families import Family
from chain.holdings import Holdings, workload_key
from chain.manufacturers import ManufacturerTable
from chain.queues import NODE_DEVICES_CHECK
from chain.workload_state import Share, State, workload_shares

POOL_READY = "the assigned flavor pool has enough free cards to place the request"
NODE_READY = 'the node "{node}" Kueue assigned has enough free cards to place the request'
POOL_RETRY = (
    "no node in the assigned flavor pool currently has enough free cards{roles}; "
    "will retry as capacity frees"
)
NODE_RETRY = (
    'no card on the node "{node}" Kueue assigned can host the request{roles}; '
    "will retry as capacity frees"
)
PROMISED = (
    "; cards promised to Workloads admitted before this one, whose Pods have not received them "
    "yet, are counted as taken"
)
UNRESOLVED = (
    "the Workload's admission does not resolve to a single accelerator flavor{roles} (one "
    "credits.gpustack.ai/<manufacturer> flavor per PodSet); will retry once it does"
)
NO_KEY = (
    'the ResourceFlavor "{flavor}" assigned{roles} pins no single accelerator key '
    "(acceleratable.feature.gpustack.ai/<key>=true in spec.nodeLabels); will retry once it does"
)
PROMISE_FLAVOR = (
    'cannot count the cards promised on the node "{node}": the ResourceFlavor "{flavor}" of a '
    "Workload admitted there is gone or pins no single accelerator key; will retry"
)
NOT_PARTITIONED = (
    "no card {where} is partitioned, so none can host the partition profile "
    '"{profile}"{roles}; will retry as capacity frees'
)
LEDGER_NOT_READY = (
    "no partitioned card {where} has reported its free placements yet (ledger not ready), so "
    'the partition profile "{profile}" cannot be placed{roles}; will retry once it has'
)
PROFILE_FULL = (
    'no partitioned card {where} has a free placement of the partition profile "{profile}" '
    "left{roles}; will retry as capacity frees"
)
_POOL = "in the assigned flavor pool"
_NODE = 'on the node "{node}" Kueue assigned'


@dataclass(frozen=True)
class Verdict:
    state: State
    message: str


# --- the verdict ------------------------------------------------------------------------------


def _roles(roles: Sequence[str], named: bool) -> str:
    if not named or not roles:
        return ""
    quoted = ", ".join(f'"{role}"' for role in roles)
    return f" for role {quoted}" if len(roles) == 1 else f" for roles {quoted}"


def _miss_message(demand: Demand, miss: Miss, named: bool) -> str:
    roles = _roles(demand.roles, named)
    if miss == Miss.CARDS:
        if demand.node:
            return NODE_RETRY.format(node=demand.node, roles=roles)
        return POOL_RETRY.format(roles=roles)
    where = _NODE.format(node=demand.node) if demand.node else _POOL
    text = {
        Miss.NOT_PARTITIONED: NOT_PARTITIONED,
        Miss.LEDGER_NOT_READY: LEDGER_NOT_READY,
        Miss.PROFILE_FULL: PROFILE_FULL,
    }[miss]
    return text.format(where=where, profile=demand.profile, roles=roles)


@dataclass(frozen=True)
class Snapshot:
    """What the driver read for one verdict."""

    flavors: Mapping[str, fields.Obj]
    """ResourceFlavors by name: the Workload's own and those of the Workloads holding cards."""
    devices: Sequence[Devices]
    hostnames: Mapping[str, str]
    """`kubernetes.io/hostname` of each Node by name; a node missing here is gone."""
    workloads: Sequence[fields.Obj] = ()
    """Other Workloads, to find those whose cards are promised but not yet in the ledger."""
    charged: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)
    """Pods the ledger holds, by (namespace, Workload, PodSet, hostname)."""
    holdings: Holdings | None = None
    """`workloads` already indexed by `Holdings.of` (a caller judging many Workloads against the
    same holders builds it once); None: index `workloads` for this verdict."""


def _promised(
    workload: fields.Obj, snapshot: Snapshot, hosts: set[str], check: str, table: ManufacturerTable
) -> list[Share]:
    """Shares of other Workloads holding cards, on `hosts`, less the Pods already charged."""
    held = snapshot.holdings
    if held is None or held.check != check:
        held = Holdings.of(snapshot.workloads, table, check)
    shares = []
    for (namespace, name), share in held.on(hosts, workload_key(workload)):
        left = share.pods - snapshot.charged.get((namespace, name, share.role, share.node), 0)
        if left > 0:
            shares.append(Share(share.role, share.flavor, share.node, left, share.per_pod))
    return shares


def judge(
    workload: fields.Obj,
    snapshot: Snapshot,
    table: ManufacturerTable,
    check: str = NODE_DEVICES_CHECK,
) -> Verdict:
    """The per-card verdict on a Workload; ValueError naming a malformed field."""
    own = demands(workload_shares(workload, table))
    named = len(list(fields.items(fields.child(workload, "spec", ""), "podSets", "spec"))) > 1
    unresolved = [d for d in own if not d.flavor]
    if unresolved:
        roles = tuple(dict.fromkeys(r for d in unresolved for r in d.roles))
        return Verdict(State.RETRY, UNRESOLVED.format(roles=_roles(roles, named)))
    nodes: dict[str, NodeCards] = {}
    for name in sorted({d.flavor for d in own}):
        scope = flavor_scope(snapshot.flavors.get(name), name, table)
        if scope is None:
            continue
        if not scope.akey:
            roles = tuple(dict.fromkeys(r for d in own if d.flavor == name for r in d.roles))
            return Verdict(State.RETRY, NO_KEY.format(flavor=name, roles=_roles(roles, named)))
        for devices in snapshot.devices:
            if all(devices.labels.get(k) == v for k, v in scope.selector.items()):
                hostname = snapshot.hostnames.get(devices.name, "")
                nodes.setdefault(devices.name, NodeCards(devices, hostname)).scopes.append(scope)
    hosts = {node.hostname for node in nodes.values() if node.hostname}
    if own and all(d.node for d in own):
        hosts &= {d.node for d in own}
    promised = demands(_promised(workload, snapshot, hosts, check, table))
    for demand in promised:
        scope = flavor_scope(snapshot.flavors.get(demand.flavor), demand.flavor, table)
        if scope is None or not scope.akey:
            return Verdict(
                State.RETRY, PROMISE_FLAVOR.format(node=demand.node, flavor=demand.flavor)
            )
        for node in nodes.values():
            if node.hostname == demand.node and scope not in node.scopes:
                node.scopes.append(scope)
    cards = candidate_cards(nodes)
    for demand in promised:
        first_miss(cards, demand)
    sliced = [d for d in own if d.family == Family.SLICED]
    for demand in own:
        if demand.family == Family.SLICED:
            if demand is not sliced[0]:
                continue
            missed = unplaced_slice(cards, sliced)  # all of them, where the first one stood
            miss, demand = (None, demand) if missed is None else (Miss.CARDS, missed)
        else:
            miss = first_miss(cards, demand)
        if miss is not None:
            message = _miss_message(demand, miss, named)
            return Verdict(State.RETRY, message + (PROMISED if promised else ""))
    pinned = {d.node for d in own}
    if len(pinned) == 1 and "" not in pinned:
        return Verdict(State.READY, NODE_READY.format(node=pinned.pop()))
    return Verdict(State.READY, POOL_READY)
