"""What the agent reports about its node, as objects (pure builders; the writes live elsewhere).

- The NFD `NodeFeature` `<node>-gpustack-device-manager` in the system namespace: its
  `spec.labels` become node labels through nfd-master (`chain.labels.accelerator_labels`).
- The `Devices` object named after the node, owned by the Node: the detected groups, merged into
  what the object already holds so another manufacturer's agent keeps its groups.

Judgment calls:
- The Devices labels are `kubernetes.io/os`/`arch`, `gpustack.ai/managed`, the topology profile
  and the CPU key presence labels (copied from the Node), and
  `acceleratable.feature.gpustack.ai/<aKey>=true` per spec group with cards (never a `.count`).
- The owner reference is a controller reference with `blockOwnerDeletion`, like
  controller-runtime's `SetControllerReference`; deleting the Node deletes its Devices.
- The NodeFeature's labels are written whole, each report: a model that left the node takes its
  keys with it. Upstream only adds and overwrites them, so a departed model's keys (its `.count`
  too) stay until the NodeFeature is recreated, and a flavor selecting them would keep the node
  in a pool whose cards are gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from chain.apis import CORE_V1, NODE
from chain.devices import DEVICES_API, DEVICES_KIND, DevicesGroup
from chain.keys import accelerator_key
from chain.labels import (
    ARCH,
    GENERAL_PREFIX,
    MANAGED,
    OS,
    PART_OF,
    RDMA_CAPABLE,
    TOPOLOGY_PROFILE,
    TRUE,
    accelerator_feature_key,
    accelerator_labels,
)
from nodeagent.topology.nics import NodeNetwork

NODE_FEATURE_API = "nfd.k8s-sigs.io/v1alpha1"
NODE_FEATURE_KIND = "NodeFeature"
NFD_NODE_NAME = "nfd.node.kubernetes.io/node-name"
"""Tells nfd-master which node a NodeFeature's labels go to."""
DEVICE_MANAGER = "gpustack-operator-device-manager"
NODE_FEATURE_SUFFIX = "-gpustack-device-manager"

Obj = dict[str, object]


def node_feature_name(node: str) -> str:
    return node + NODE_FEATURE_SUFFIX


def node_feature_labels(
    groups: Iterable[DevicesGroup], network: NodeNetwork | None = None
) -> dict[str, str]:
    """The node labels the detected groups stand for (docs/design/node-agent.md, "Node labels"),
    and `feature.gpustack.ai/rdma.capable=true` while an RDMA port of the node is up
    (docs/topology.md, "Network cards")."""
    labels = accelerator_labels(group.facts() for group in groups)
    if network is not None and network.rdma_capable:
        labels[RDMA_CAPABLE] = TRUE
    return labels


def node_feature(
    node: str,
    namespace: str,
    groups: Iterable[DevicesGroup],
    node_uid: str,
    network: NodeNetwork | None = None,
) -> Obj:
    """The device manager's NodeFeature for `node`, owned by the Node (upstream): when the node
    leaves the cluster the garbage collector takes its NodeFeature with it."""
    return {
        "apiVersion": NODE_FEATURE_API,
        "kind": NODE_FEATURE_KIND,
        "metadata": {
            "name": node_feature_name(node),
            "namespace": namespace,
            "labels": {NFD_NODE_NAME: node, PART_OF: DEVICE_MANAGER},
            "ownerReferences": [owner_reference(node, node_uid)],
        },
        "spec": {"labels": node_feature_labels(groups, network)},
    }


def owner_reference(node: str, uid: str) -> Obj:
    return {
        "apiVersion": CORE_V1,
        "kind": NODE,
        "name": node,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def devices_labels(
    node_labels: Mapping[str, str], groups: Iterable[Mapping[str, object]]
) -> dict[str, str]:
    """The labels on the Devices object, from the Node's labels and the (rendered, merged) spec
    groups: every manufacturer's models with cards count.

    The Node's `gpustack.ai/managed` mark, its topology profile and its CPU key presence labels
    are mirrored too: the pool views (`chain.pool_nodes.pool_devices_selector`) and the per-card
    verdict (a flavor's node labels, less the counts) select a pool's Devices by them. Upstream
    a separate worker controller mirrors them; here the agent, which reads its Node on every
    round and re-reports when those labels change, owns the whole label set.
    """
    mirrored = (OS, ARCH, MANAGED, TOPOLOGY_PROFILE)
    labels = {key: node_labels[key] for key in mirrored if node_labels.get(key)}
    for key, value in node_labels.items():
        if key.startswith(GENERAL_PREFIX) and value == TRUE:
            labels[key] = value
    for group in groups:
        maker, ident = group.get("manufacturer"), group.get("id")
        if group.get("accelerators") and isinstance(maker, str) and isinstance(ident, str):
            labels[accelerator_feature_key(accelerator_key(maker, ident))] = TRUE
    return labels


def _index(card: object) -> int:
    value = card.get("index") if isinstance(card, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1 << 32


def _canonical(group: Mapping[str, object]) -> Obj:
    out = dict(group)
    cards = group.get("accelerators")
    if isinstance(cards, list):
        out["accelerators"] = sorted(cards, key=_index)
    return out


def _group_order(group: Mapping[str, object]) -> tuple[str, int, str]:
    cards = group.get("accelerators")
    lowest = (
        min((_index(card) for card in cards), default=1 << 32)
        if isinstance(cards, list)
        else 1 << 32
    )
    return str(group.get("manufacturer", "")), lowest, str(group.get("id", ""))


def align_device_groups(
    existing: Sequence[Mapping[str, object]],
    fresh: Iterable[DevicesGroup],
    owned: Iterable[str],
) -> list[Obj]:
    """`spec.groups` after a detection: groups of the `owned` manufacturers are replaced by the
    fresh ones (added, updated, removed), other manufacturers' groups are kept as they are
    (unknown fields included), and the result is in canonical order: cards by index, groups by
    manufacturer, then lowest card index, then id. Equal inputs give equal lists, so a caller
    can skip the write when nothing changed."""
    mine = set(owned)
    kept = [_canonical(group) for group in existing if group.get("manufacturer") not in mine]
    rendered = [_canonical(group.render()) for group in fresh if group.manufacturer in mine]
    return sorted(kept + rendered, key=_group_order)


def card_addresses(groups: Iterable[Mapping[str, object]]) -> list[str]:
    """The PCI addresses of the cards of (rendered) spec groups, every manufacturer's."""
    found = []
    for group in groups:
        cards = group.get("accelerators")
        for card in cards if isinstance(cards, list) else []:
            topology = card.get("topology") if isinstance(card, Mapping) else None
            address = topology.get("pciBusId") if isinstance(topology, Mapping) else None
            if isinstance(address, str) and address:
                found.append(address)
    return sorted(found)


def devices_object(
    node: str,
    node_uid: str,
    node_labels: Mapping[str, str],
    groups: Sequence[DevicesGroup],
    owned: Iterable[str],
    existing: Mapping[str, object] | None = None,
    network: NodeNetwork | None = None,
) -> Obj:
    """The Devices object for `node` (no status: the ledger is written on its own).

    `existing` is the object as read (or None); only its spec is used, to keep the groups of
    manufacturers this agent does not own and the spec fields it does not write. The labels are
    only the device manager's keys: write them by merge, since the worker adds its own.

    With `network`, `spec.interfaces` lists the node's network cards and, for each, the cards of
    every group (all manufacturers', as merged) by link class. The NICs belong to the machine:
    every agent of the node writes the same list, so under server-side apply they share it.
    """
    spec_before = existing.get("spec") if existing else None
    spec: Obj = dict(spec_before) if isinstance(spec_before, Mapping) else {}
    groups_before = spec.get("groups")
    previous = [
        group
        for group in (groups_before if isinstance(groups_before, list) else [])
        if isinstance(group, Mapping)
    ]
    merged = align_device_groups(previous, groups, owned)
    spec["groups"] = merged
    if network is not None:
        # None found: no field at all, as on a node before this inventory existed.
        interfaces = network.render(card_addresses(merged))
        if interfaces:
            spec["interfaces"] = interfaces
        else:
            spec.pop("interfaces", None)
    return {
        "apiVersion": DEVICES_API,
        "kind": DEVICES_KIND,
        "metadata": {
            "name": node,
            "labels": devices_labels(node_labels, merged),
            "ownerReferences": [owner_reference(node, node_uid)],
        },
        "spec": spec,
    }
