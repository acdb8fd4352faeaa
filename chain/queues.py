"""ClusterQueue vocabulary: stop policies, the node-devices check, and a flavor's quota.

A pool's ClusterQueue has quota in one resource: credits of the pool's manufacturer for an
accelerated pool (M per whole card), plain `cpu` cores for a CPU pool. Each flavor contributes
what its labels say the pool holds of it (`<own key>.capacity` = nodes x per-node count), so a
queue is sized without listing a single node.

Judgment call: a flavor's own key is found from its `.capacity` label rather than from its name.
A device flavor also carries its node's CPU key (`general...=true`) but only its accelerator key
has `.count`/`.capacity` siblings, so the family prefix plus `.capacity` picks exactly one key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chain.families import credits_resource
from chain.labels import (
    ACCELERATABLE_PREFIX,
    CAPACITY_SUFFIX,
    GENERAL_PREFIX,
    QUEUE_STOP_POLICY,
    RESOURCE_TYPE,
    RESOURCE_TYPE_INSTANCE_TYPES,
    RESOURCE_TYPE_NODES,
    TRUE,
    capacity_key,
    count_key,
)
from chain.pools import selector_matches
from chain.units import accelerators_to_credits

STOP_NONE = "None"
STOP_HOLD = "Hold"
"""No new reservations; admitted workloads run to completion."""
STOP_HOLD_AND_DRAIN = "HoldAndDrain"
"""Like Hold, and admitted workloads are evicted."""
STOP_POLICIES = (STOP_NONE, STOP_HOLD, STOP_HOLD_AND_DRAIN)
"""From the weakest stop to the hardest."""

NODE_DEVICES_CHECK = "gpustack-node-devices"
"""The AdmissionCheck that checks per-card fit against the Devices ledger."""
NODE_DEVICES_CONTROLLER = "worker.gpustack.ai/node-devices"
"""Its `spec.controllerName`: the admission driver acts only on checks naming it."""

CPU_RESOURCE = "cpu"


@dataclass(frozen=True)
class FlavorSize:
    """What one ResourceFlavor's labels say about its size."""

    feature_key: str
    """The flavor's own presence label (`acceleratable...<aKey>` or `general...<gKey>`)."""
    count: int
    """Cards (device flavor) or whole CPUs (CPU flavor) per node."""
    capacity: int
    """Contributing nodes x count: what the pool holds of this flavor."""


def _whole(labels: Mapping[str, str], key: str, minimum: int) -> int:
    raw = labels.get(key)
    if raw is None:
        raise ValueError(f"metadata.labels['{key}']: missing")
    if not (raw.isascii() and raw.isdigit()) or int(raw) < minimum:
        raise ValueError(
            f"metadata.labels['{key}']: expected a whole number >= {minimum}, got {raw!r}"
        )
    return int(raw)


def flavor_size(labels: Mapping[str, str], acceleratable: bool) -> FlavorSize:
    """The per-node count and pool capacity of a device (or CPU) flavor, from its labels.

    ValueError names the label (`metadata.labels['...']: ...`) when the flavor is not sized the
    way the flavor hook sizes flavors.
    """
    prefix = ACCELERATABLE_PREFIX if acceleratable else GENERAL_PREFIX
    owners = sorted(
        key.removesuffix(CAPACITY_SUFFIX)
        for key in labels
        if key.startswith(prefix) and key.endswith(CAPACITY_SUFFIX)
    )
    if len(owners) != 1:
        raise ValueError(
            f"metadata.labels: expected exactly one {prefix}<key>{CAPACITY_SUFFIX} label, "
            f"found {len(owners)}"
        )
    own = owners[0]
    if labels.get(own) != TRUE:
        raise ValueError(f"metadata.labels['{own}']: expected {TRUE!r} beside its capacity")
    return FlavorSize(own, _whole(labels, count_key(own), 1), _whole(labels, capacity_key(own), 0))


@dataclass(frozen=True)
class PoolFlavor:
    """One live ResourceFlavor of a pool: its name, its size, and the object it was read from."""

    name: str
    size: FlavorSize
    obj: dict[str, Any]


class FlavorError(ValueError):
    """A ResourceFlavor the pool rule cannot read: the message is `<field>: <why>`, the field
    under `flavor` (the object), so a hook names it in its 400."""

    def __init__(self, flavor: dict[str, Any], message: str) -> None:
        super().__init__(message)
        self.flavor = flavor


def pool_flavors(
    flavors: Iterable[dict[str, Any]], selector: Mapping[str, str] | None, acceleratable: bool
) -> list[PoolFlavor]:
    """A pool's live flavors among `flavors`, in the queue's preference order: smallest per-node
    count first, then by name. The one rule the queue hook (its resource group) and the status
    hook (the first flavor describes the pool) must agree on.

    Only the chain's node flavors matching `selector` count (none when the pool has no
    selector), and a flavor with a deletionTimestamp is gone: Kueue keeps it only until no
    queue names it, so naming it again would keep it alive."""
    if selector is None:
        return []
    found = []
    for obj in flavors:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise FlavorError(obj, "metadata.labels: expected a map of strings")
        ours = labels.get(RESOURCE_TYPE) == RESOURCE_TYPE_NODES
        if not ours or not selector_matches(selector, labels) or meta.get("deletionTimestamp"):
            continue
        try:
            size = flavor_size(labels, acceleratable)
        except ValueError as err:
            raise FlavorError(obj, str(err)) from None
        found.append(PoolFlavor(meta["name"], size, obj))
    return sorted(found, key=lambda flavor: (flavor.size.count, flavor.name))


def quota_resource(acceleratable: bool, manufacturer: str) -> str:
    """The one resource a pool's queue covers: `credits.gpustack.ai/<mfr>` or `cpu`."""
    return credits_resource(manufacturer) if acceleratable else CPU_RESOURCE


def nominal_quota(size: FlavorSize, acceleratable: bool) -> int:
    """A flavor's nominal quota: capacity x M credits (accelerated) or capacity cores (CPU)."""
    return accelerators_to_credits(size.capacity) if acceleratable else size.capacity


# --- Who stopped a queue, and what the stop asks of its InstanceType ------------------------
#
# Upstream keeps `InstanceType.spec.inactive` and the queue's stop policy in step: Inactive
# holds the queue, and a queue stopped by someone else (an admin's Hold or drain) marks its type
# Inactive for good, until an admin clears it. The drain of a pool that lost every flavor is
# the operator's own and marks nothing (upstream's newest docs pause the backfill while that
# drain runs and release the queue when flavors return): a pool whose nodes only went out of
# sight, as they do while the node agents are uninstalled, comes back active with them. No hook
# may write a spec, so the queue hook writes its own decision beside the stop policy
# (`QUEUE_STOP_POLICY`) and the credentialed lifecycle keeper (`verdictdriver.lifecycle`) writes
# `spec.inactive` from what these rules say.


def stronger_stop(a: str, b: str) -> str:
    """The harder of two stop policies (None < Hold < HoldAndDrain)."""
    return max(a, b, key=STOP_POLICIES.index)


def foreign_stop(stop: str, decided: str | None) -> bool:
    """The queue is stopped, and not by the queue hook: its stop policy differs from the one
    the hook wrote beside it. A queue without the hook's record is taken as the hook's."""
    return stop != STOP_NONE and decided is not None and stop != decided


def _stop_of(queue: Mapping[str, Any]) -> tuple[str, str | None]:
    spec = queue.get("spec") or {}
    annotations = (queue.get("metadata") or {}).get("annotations") or {}
    return str(spec.get("stopPolicy") or STOP_NONE), annotations.get(QUEUE_STOP_POLICY)


def is_chain_queue(queue: Mapping[str, Any]) -> bool:
    labels = (queue.get("metadata") or {}).get("labels") or {}
    return labels.get(RESOURCE_TYPE) == RESOURCE_TYPE_INSTANCE_TYPES


def drain_on_delete(queue: Mapping[str, Any]) -> bool:
    """A chain queue being deleted must drain: Kueue never evicts on delete by itself, so its
    admitted workloads would keep a Terminating queue forever. Metacontroller never updates a
    child pending deletion, so the keeper writes this one."""
    meta = queue.get("metadata") or {}
    stop, _ = _stop_of(queue)
    return (
        is_chain_queue(queue)
        and bool(meta.get("deletionTimestamp"))
        and (stop != STOP_HOLD_AND_DRAIN)
    )


def backfill_inactive(queue: Mapping[str, Any], instance_type: Mapping[str, Any] | None) -> bool:
    """The queue's InstanceType must be marked `spec.inactive: true`: it is active and alive,
    and its live queue was stopped (Hold or HoldAndDrain) by someone other than the hook.

    A stop the hook decided itself marks nothing: its Hold (an inactive type not yet
    reactivated, an empty pool), nor its drain of a pool that lost every flavor. That drain
    lasts as long as its cause, and the pool reopens when its flavors return: the flavors go
    whenever the nodes' accelerator labels do, which an uninstall of the node agents causes (their
    namespace takes their NFD NodeFeatures with it) while the nodes keep their cards. A mark
    would have kept such a pool closed after a reinstall until an admin cleared it."""
    if instance_type is None or not is_chain_queue(queue):
        return False
    if (queue.get("metadata") or {}).get("deletionTimestamp"):
        return False
    it_meta = instance_type.get("metadata") or {}
    if it_meta.get("deletionTimestamp") or (instance_type.get("spec") or {}).get("inactive"):
        return False
    stop, decided = _stop_of(queue)
    return foreign_stop(stop, decided)
