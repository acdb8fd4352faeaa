"""Objects as the API server serves them to the status hook, and the status it must write.

Devices objects are rendered with `chain.devices` types (the node agent's own wire form) and get
the server's metadata; flavors and queues have the shapes the flavor and queue hooks author.
The hook never sees the Devices: each request relates the pool's PoolCards, the pool-cards
keeper's tally of the case's Devices (`chain.pool_cards`, the keeper's own pure code), so the
hand-worked numbers check the tally and the hook together. Expected statuses are written from
the rules with literal numbers in the cases; nothing here calls the hook's own code.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Any

from builders import hook_reference, uid
from builders.instancetypes import ENTRANCE, served_instance_type
from chain.apis import SETTINGS_NAME
from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    Devices,
    DevicesGroup,
    DevicesSpec,
    DeviceTopology,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
    Placement,
    aggregate_sliced_detail,
)
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.pool_cards import POOL_CARDS, POOL_CARDS_API, pool_cards, pool_cards_object
from chain.pools import PoolIdentity
from chain.settings import Settings
from tests.unit.hooks.clock import NOW

Obj = dict[str, Any]
View = tuple[str, str, str]
"""(onceMaxRequest, remaining, capacity) as the status writes them."""

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"
N = "note.gpustack.ai/"
PROFILE = "fnv64-87bf574bea2a4f23"
DEVICES_GROUP = f"Devices.{WORKER}"
POOL_CARDS_GROUP = f"{POOL_CARDS}.{POOL_CARDS_API}"
RF_GROUP = f"ResourceFlavor.{KUEUE}"
CQ_GROUP = f"ClusterQueue.{KUEUE}"
SETTINGS_GROUP = "Settings.gpustack.ai/v1alpha1"
RESOURCE_MAX_UNITS = 1_600_000


def _hook(path: str) -> Obj:
    return hook_reference("gpustack-hook-instancetype", path)


CONTROLLER = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "DecoratorController",
    "metadata": {
        "name": "gpustack-instancetype-status",
        "uid": uid("gpustack-instancetype-status"),
        "resourceVersion": "911",
        "generation": 1,
        "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
    },
    "spec": {
        "resources": [
            {"apiVersion": WORKER, "resource": "instancetypes", "ignoreStatusChanges": True}
        ],
        "resyncPeriodSeconds": 300,
        "hooks": {"sync": _hook("/sync"), "customize": _hook("/customize")},
    },
}

# --- InstanceTypes ------------------------------------------------------------------------------


def instance_type(name: str, spec: Obj, deleting: bool = False, status: Obj | None = None) -> Obj:
    """An InstanceType as served: webhook-stamped labels, the queue hook's finalizer, and the
    status this hook wrote last time (of which it reads only the conditions' transition times).
    """
    finalizers = ["metacontroller.io/decoratorcontroller-gpustack-queue"]
    last = status or {"phase": "Pending", "entrance": ENTRANCE}
    return served_instance_type(name, spec, finalizers, last, deleting=deleting)


# --- ResourceFlavors, as the pools hook authors them --------------------------------------------


def flavor(
    name: str,
    gkey: str,
    count: int,
    capacity: int,
    akey: str = "",
    notes: dict[str, str] | None = None,
    deleting: bool = False,
) -> Obj:
    """A served ResourceFlavor (device flavor when `akey`) with its `note.gpustack.ai/*`."""
    own = A + akey if akey else G + gkey
    labels = {
        own: "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true" if akey else "false",
        f"{own}.count": str(count),
        f"{own}.capacity": str(capacity),
        "resource.gpustack.ai/type": "nodes",
        "topology.gpustack.ai/profile": PROFILE,
    }
    if akey:
        labels[G + gkey] = "true"
    annotations = {N + "acceleratable": "true" if akey else "false", N + "generalGroup": gkey}
    if akey:
        annotations[N + "acceleratorGroup"] = akey
    annotations.update({N + key: value for key, value in (notes or {}).items()})
    annotations["metacontroller.k8s.io/decorator-controller"] = "gpustack-flavor-pools"
    meta: Obj = {
        "name": name,
        "uid": uid(name),
        "resourceVersion": "20411",
        "generation": 1,
        "creationTimestamp": "2026-11-30T05:00:00Z",
        "labels": labels,
        "annotations": annotations,
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T08:00:00Z"
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": meta,
        "spec": {
            "nodeLabels": {"gpustack.ai/managed": "true", own: "true", f"{own}.count": str(count)},
            "tolerations": [{"operator": "Exists"}],
            "topologyName": "gpustack-" + PROFILE,
        },
    }


# --- ClusterQueues, as the queue hook answers them and Kueue then serves them ------------------


def queue(
    name: str,
    resource: str,
    quotas: Sequence[tuple[str, str]],
    stop: str = "None",
    active: bool | None = True,
    message: str = "Can admit new workloads",
    reserved: Sequence[tuple[str, str]] = (),
) -> Obj:
    """A served ClusterQueue: `quotas` = (flavor, nominalQuota), `reserved` = (flavor, total);
    `active` None = Kueue has not written its condition yet."""
    groups = [
        {
            "coveredResources": [resource],
            "flavors": [
                {"name": flavor_name, "resources": [{"name": resource, "nominalQuota": quota}]}
                for flavor_name, quota in quotas
            ],
        }
    ]
    usage = [
        {"name": flavor_name, "resources": [{"name": resource, "total": total, "borrowed": "0"}]}
        for flavor_name, total in reserved
    ]
    status: Obj = {
        "pendingWorkloads": 0,
        "reservingWorkloads": len(usage),
        "admittedWorkloads": len(usage),
        "flavorsReservation": usage,
        "flavorsUsage": copy.deepcopy(usage),
    }
    if active is not None:
        status["conditions"] = [
            {
                "type": "Active",
                "status": "True" if active else "False",
                "reason": "Ready" if active else "Stopped",
                "message": message,
                "observedGeneration": 2,
                "lastTransitionTime": "2026-11-30T06:00:00Z",
            }
        ]
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {
            "name": name,
            "uid": uid("cq-" + name),
            "resourceVersion": "40002",
            "generation": 2,
            "labels": {"resource.gpustack.ai/type": "instancetypes"},
            "annotations": {"metacontroller.k8s.io/decorator-controller": "gpustack-queue"},
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "namespaceSelector": {},
            "stopPolicy": stop,
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": groups,
        },
        "status": status,
    }


def settings(**spec: Any) -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {"name": "default", "uid": uid("settings-default"), "generation": 3},
        "spec": {key.replace("_", "-"): value for key, value in spec.items()},
    }


# --- Devices, rendered from the node agent's own types ------------------------------------------

A100_MIG = (
    ("1g.10gb", 9728, 7, 1),
    ("2g.20gb", 19968, 3, 2),
    ("3g.40gb", 40192, 2, 4),
    ("7g.80gb", 80896, 1, 8),
)


def card(node: str, number: int, kind: str = "sliced") -> Accelerator:
    """A card: `sliced` (128 logical slices, overcommit), `whole` (no cutting), `mig` (A100)."""
    if kind == "mig":
        profiles = tuple(
            PartitionProfile(
                name,
                memory,
                count,
                compute_slices=length,
                memory_slices=length,
                placements=tuple(Placement(start * length, length) for start in range(count)),
            )
            for name, memory, count, length in A100_MIG
        )
        status = AcceleratorStatus(physical_sliced=PhysicalSliced(7, profiles))
    elif kind == "sliced":
        status = AcceleratorStatus(logical_sliced=LogicalSliced(128, True))
    else:
        status = AcceleratorStatus()
    digest = hashlib.sha256(f"{node}/{number}".encode()).hexdigest()
    topology = DeviceTopology(
        pci_bus_id=f"0000:{16 + number:02x}:00.0", numa_affinity="0", cpu_affinity="0-31"
    )
    ident = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return Accelerator(ident, number, (number,), topology, status)


def row(
    target: Accelerator,
    mode: Mode,
    remaining: int = 0,
    slices: int = 0,
    allocated: Sequence[tuple[str, int]] = (),
    left: Sequence[tuple[str, int]] = (),
) -> AcceleratorAllocation:
    """A ledger row; `remaining` 0 is left off the wire (Go's omitempty)."""
    return AcceleratorAllocation(
        target.id,
        target.index,
        mode,
        remaining=remaining,
        allocated_slices=slices,
        allocated_profiles=tuple(ProfileCount(n, c) for n, c in allocated),
        remaining_profiles=tuple(ProfileCount(n, c) for n, c in left),
    )


MODELS: dict[str, Obj] = {
    "nvidia-a10g": {
        "id": "a10g",
        "name": "NVIDIA A10G",
        "memory": 23028,
        "cores": 9216,
        "compute_capability": "8.6",
        "family": "Ampere",
    },
    "nvidia-tesla-t4": {
        "id": "tesla-t4",
        "name": "Tesla T4",
        "memory": 15360,
        "cores": 2560,
        "compute_capability": "7.5",
        "family": "Turing",
    },
    "nvidia-a100-sxm4-80gb": {
        "id": "a100-sxm4-80gb",
        "name": "NVIDIA A100-SXM4-80GB",
        "memory": 81920,
        "cores": 6912,
        "compute_capability": "8.0",
        "family": "Ampere",
    },
}


def group(akey: str, cards: Sequence[Accelerator], runtime: str = "12.8") -> DevicesGroup:
    model = MODELS[akey]
    return DevicesGroup(
        manufacturer="nvidia",
        driver_version="570.124.06",
        runtime_version=runtime,
        accelerators=tuple(cards),
        sliced_detail=aggregate_sliced_detail(cards),
        **model,
    )


def devices(
    node: str,
    groups: Sequence[DevicesGroup],
    rows: Sequence[AcceleratorAllocation] = (),
    gkey: str = "amd-epyc-7763",
    managed: str | None = "true",
) -> Obj:
    """A node's Devices as served: the agent's labels plus the mirrored managed/CPU keys, the
    ledger (all `rows`, filed under the group of their card), server metadata."""
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    for entry in groups:
        labels[A + entry.accelerator_key] = "true"
    labels[G + gkey] = "true"
    if managed is not None:
        labels["gpustack.ai/managed"] = managed
    labels["topology.gpustack.ai/profile"] = PROFILE
    ledger = []
    for entry in groups:
        ids = {c.id for c in entry.accelerators}
        mine = tuple(r for r in rows if r.id in ids)
        if mine:
            ledger.append(DevicesAllocationGroup(entry.id, entry.manufacturer, mine))
    obj = Devices(node, DevicesSpec(tuple(groups)), DevicesStatus(tuple(ledger)), labels).render()
    obj["metadata"].update(
        uid=uid("devices-" + node),
        resourceVersion="52188",
        generation=2,
        creationTimestamp="2026-11-30T04:30:00Z",
        ownerReferences=[
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node,
                "uid": uid("node-" + node),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    return obj


# --- requests and answers -----------------------------------------------------------------------


def _map(objects: Sequence[Obj]) -> dict[str, Obj]:
    return {obj["metadata"]["name"]: copy.deepcopy(obj) for obj in objects}


def _identity(target: Obj) -> PoolIdentity | None:
    """The pool of a well-formed InstanceType (the error cases send others)."""
    if target.get("kind") != "InstanceType":
        return None
    try:
        return PoolIdentity.of_spec(target.get("spec"), "spec")
    except ValueError:
        return None


def served_pool_cards(target: Obj, nodes: Sequence[Obj], chain_settings: Obj | None) -> list[Obj]:
    """What the keeper writes for `target` over `nodes`, as served (none for a CPU pool)."""
    identity = _identity(target)
    aware = False
    if chain_settings is not None and chain_settings["metadata"]["name"] == SETTINGS_NAME:
        aware = Settings.from_spec(chain_settings["spec"]).instance_type_aware_cpu_manufacturer
    cards = None if identity is None else pool_cards(identity, aware, nodes)
    if cards is None:
        return []
    obj = pool_cards_object(target, cards)
    name = obj["metadata"]["name"]
    obj["metadata"].update(
        uid=uid(POOL_CARDS + name),
        resourceVersion="31002",
        creationTimestamp="2026-11-30T05:00:00Z",
    )
    return [obj]


def request(
    target: Obj,
    nodes: Sequence[Obj] = (),
    flavors: Sequence[Obj] = (),
    queues: Sequence[Obj] = (),
    chain_settings: Obj | None = None,
) -> Obj:
    """A sync body: no attachments, one (possibly empty) map per related type."""
    return {
        "controller": CONTROLLER,
        "object": copy.deepcopy(target),
        "attachments": {},
        "related": {
            POOL_CARDS_GROUP: _map(served_pool_cards(target, nodes, chain_settings)),
            RF_GROUP: _map(flavors),
            CQ_GROUP: _map(queues),
            SETTINGS_GROUP: _map([chain_settings] if chain_settings else []),
        },
        "finalizing": False,
    }


def customize_request(target: Obj) -> Obj:
    return {"controller": CONTROLLER, "parent": copy.deepcopy(target)}


ZERO: View = ("0", "0", "0")


def view(v: View) -> Obj:
    return {"onceMaxRequest": v[0], "remaining": v[1], "capacity": v[2]}


def status(
    name_hash: str,
    summary: str,
    cpu_summary: str = "0/0",
    *,
    detail: Obj | None = None,
    phase: tuple[str, str] = ("Active", "Can admit new workloads"),
    ex: View = ZERO,
    sh: View = ZERO,
    sl: View = ZERO,
    pt: View = ZERO,
    allocated: Sequence[tuple[str, int]] = (),
    offered: Sequence[tuple[str, int]] = (),
    cpu: View = ZERO,
    reasons: tuple[str, str, str] = ("QueueActive", "CapacityFree", "Ready"),
    cpu_pool: bool = False,
    since: Sequence[str] = (NOW, NOW, NOW),
) -> Obj:
    """The expected answer. `summary`/`cpu_summary` are the printer columns, written out in the
    cases; they must agree with the views (checked here, so a typo fails loudly). `reasons` are
    those of the conditions Active, Available and Ready (docs/queues.md, "Conditions of the
    InstanceType")."""
    columns = " ".join(f"{v[0]}/{v[1]}" for v in (ex, sh, sl, pt))
    assert summary == columns, (summary, columns)
    assert cpu_summary == f"{cpu[0]}/{cpu[1]}", (cpu_summary, cpu)
    shown = f"CPU {cpu_summary}" if cpu_pool else f"Accelerator(EX/SH/SL/PT) {summary}"
    return {
        "status": {
            "detail": detail or {},
            "entrance": "gpustack-fnv64-" + name_hash,
            "phase": phase[0],
            "phaseMessage": phase[1],
            "accelerator": view(ex),
            "acceleratorShared": view(sh),
            "acceleratorSliced": view(sl),
            "acceleratorPartitioned": {
                **view(pt),
                "allocatedProfiles": [{"name": n, "count": c} for n, c in allocated],
                "remainingProfiles": [{"name": n, "count": c} for n, c in offered],
            },
            "cpu": view(cpu),
            "acceleratorSummary": summary,
            "cpuSummary": cpu_summary,
            "partitionSummary": ",".join(f"{n}={c}" for n, c in offered),
            "conditions": conditions(phase[1], shown, reasons, cpu_pool, since),
        }
    }


def cpu_status(name_hash: str, cpu_summary: str, **rest: Any) -> Obj:
    """The expected answer for a CPU pool: no card views, the CPU view's words."""
    return status(name_hash, "0/0 0/0 0/0 0/0", cpu_summary, cpu_pool=True, **rest)


def conditions(
    message: str,
    shown: str,
    reasons: tuple[str, str, str],
    cpu_pool: bool,
    since: Sequence[str] = (NOW, NOW, NOW),
) -> list[Obj]:
    """The three conditions as docs/queues.md words them: True for the reasons that say so, each
    with the message the reason's rule gives, and the transition time `since` gives (`NOW`: it
    flips in this answer)."""
    active_reason, available_reason, ready_reason = reasons
    what = "CPU cores" if cpu_pool else "cards"
    empty = f"the pool has no {what} counted: no node of it reported any, or every node of it left"
    active = {
        "Terminating": "the InstanceType is being deleted",
        "Draining": "its ClusterQueue is HoldAndDrain: it admits nothing and evicts what it holds",
        "NoCapacity": f"{message}: {empty}",
    }.get(active_reason, message)
    available = {
        "CapacityFree": f"a new Instance fits now ({shown})",
        "NoCapacity": empty,
        "Full": f"every {what[:-1]} is taken; new Instances wait ({shown})",
        "Inactive": f"not Active: {active}",
    }[available_reason]
    # Ready says what Active does while that is False, else why the pool counts nothing.
    ready = {"Ready": "the pool is active and has counted capacity", "NoCapacity": empty}.get(
        ready_reason, active
    )
    if active_reason != "QueueActive":
        ready = active
    words = (
        ("Active", active_reason, active, "QueueActive"),
        ("Available", available_reason, available, "CapacityFree"),
        ("Ready", ready_reason, ready, "Ready"),
    )
    return [
        {
            "type": type_,
            "status": "True" if reason == holds else "False",
            # The served InstanceType's generation (builders.instancetypes).
            "observedGeneration": 1,
            "lastTransitionTime": time,
            "reason": reason,
            "message": text,
        }
        for (type_, reason, text, holds), time in zip(words, since, strict=True)
    ]
