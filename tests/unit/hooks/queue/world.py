"""Objects as the API server serves them to the queue hook, and the answers it must give.

Request objects carry the server's metadata (uid, resourceVersion, finalizers, owner references)
the way Metacontroller forwards them from its informer cache. Expected answers are written from
the rules, with literal numbers in the cases; nothing here calls the hook's own code.
"""

from __future__ import annotations

import copy
from typing import Any

from builders import hook_reference, uid
from builders.instancetypes import ENTRANCE, served_instance_type, type_spec

Obj = dict[str, Any]

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"
N = "note.gpustack.ai/"
PROFILE = "fnv64-87bf574bea2a4f23"
TOPOLOGY = "gpustack-" + PROFILE
NVIDIA_CREDITS = "credits.gpustack.ai/nvidia"
STOP_RECORD = "schedule.gpustack.ai/stop-policy"
PROBLEM = "schedule.gpustack.ai/queue-problem"
MC_FINALIZER = "metacontroller.io/decoratorcontroller-gpustack-queue"
KUEUE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
CQ_GROUP = f"ClusterQueue.{KUEUE}"
RF_GROUP = f"ResourceFlavor.{KUEUE}"
AC_GROUP = f"AdmissionCheck.{KUEUE}"
SETTINGS_GROUP = "Settings.gpustack.ai/v1alpha1"


def _hook(path: str) -> Obj:
    return hook_reference("gpustack-hook-queue", path)


CONTROLLER = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "DecoratorController",
    "metadata": {
        "name": "gpustack-queue",
        "uid": uid("gpustack-queue"),
        "resourceVersion": "905",
        "generation": 1,
        "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
    },
    "spec": {
        "resources": [
            {
                "apiVersion": WORKER,
                "resource": "instancetypes",
                "ignoreStatusChanges": True,
            }
        ],
        "attachments": [
            {
                "apiVersion": KUEUE,
                "resource": "clusterqueues",
                "updateStrategy": {"method": "InPlace"},
            }
        ],
        "resyncPeriodSeconds": 60,
        "hooks": {
            "sync": _hook("/sync"),
            "finalize": _hook("/finalize"),
            "customize": _hook("/customize"),
        },
    },
}

# --- the InstanceTypes of the vectors' cluster (awareness off) --------------------------------


T4_SPEC = type_spec("nvidia-tesla-t4", display="Tesla-T4", cpu="8", ram="32Gi")
A10G_SPEC = type_spec("nvidia-a10g", display="NVIDIA-A10G", cpu="8", ram="64Gi")
GENERIC_SPEC = type_spec(display="CPU-only")


def instance_type(
    name: str,
    spec: Obj,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    generation: int = 1,
) -> Obj:
    """An InstanceType as served: webhook-stamped labels, the two decorators' finalizers, and
    the status the instancetype hook keeps (which this hook never reads)."""
    finalizers = [MC_FINALIZER, "metacontroller.io/decoratorcontroller-gpustack-instancetype"]
    status = {"phase": "Active", "entrance": ENTRANCE}
    return served_instance_type(
        name, spec, finalizers, status, annotations, deleting=deleting, generation=generation
    )


# --- ResourceFlavors, as the pools hook authors them ------------------------------------------


def flavor(
    name: str, gkey: str, count: int, capacity: int, akey: str = "", deleting: bool = False
) -> Obj:
    """A served ResourceFlavor of the flavor hook's shape (device flavor when `akey`)."""
    return _flavor(name, gkey, count, capacity, akey, deleting)


def slim_flavor(name: str, gkey: str, count: int, capacity: int, akey: str) -> Obj:
    """A device flavor with only what the queue hook reads (name and labels), for the cases
    that need dozens of them."""
    full = _flavor(name, gkey, count, capacity, akey, False)
    meta = full["metadata"]
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "uid": meta["uid"], "labels": meta["labels"]},
    }


def _flavor(name: str, gkey: str, count: int, capacity: int, akey: str, deleting: bool) -> Obj:
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
    node_labels = {
        "gpustack.ai/managed": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        own: "true",
        f"{own}.count": str(count),
        "topology.gpustack.ai/profile": PROFILE,
    }
    notes = {N + "acceleratable": "true" if akey else "false", N + "generalGroup": gkey}
    if akey:
        labels[G + gkey] = "true"
        node_labels[G + gkey] = "true"
        notes.update({N + "acceleratorGroup": akey, N + "manufacturer": akey.split("-")[0]})
    meta: Obj = {
        "name": name,
        "uid": uid(name),
        "resourceVersion": "20411",
        "generation": 1,
        "creationTimestamp": "2026-11-30T05:00:00Z",
        "labels": labels,
        "annotations": {
            **notes,
            "metacontroller.k8s.io/decorator-controller": "gpustack-flavor-pools",
        },
        "finalizers": [KUEUE_FINALIZER],
        "ownerReferences": [
            {
                "apiVersion": "gpustack.ai/v1alpha1",
                "kind": "Settings",
                "name": "default",
                "uid": uid("settings-default"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T08:00:00Z"
        meta["deletionGracePeriodSeconds"] = 0
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": meta,
        "spec": {
            "nodeLabels": node_labels,
            "tolerations": [{"operator": "Exists"}],
            "topologyName": TOPOLOGY,
        },
    }


A10G_1D = flavor(
    "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d", "amd-epyc-7r13", 1, 1, "nvidia-a10g"
)
T4_2D = flavor(
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    "amd-epyc-7763",
    2,
    4,
    "nvidia-tesla-t4",
)
T4_1D = flavor(
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
    "intel-xeon-platinum-8259cl",
    1,
    1,
    "nvidia-tesla-t4",
)
CPU_16C = flavor("gpustack--amd-25-1-linux-amd64-16c", "amd-25-1", 16, 16)
CPU_8C = flavor("gpustack--amd-epyc-7763-linux-amd64-8c", "amd-epyc-7763", 8, 16)
CPU_R13_96C = flavor("gpustack--amd-epyc-7r13-linux-amd64-96c", "amd-epyc-7r13", 96, 96)
CPU_XEON_96C = flavor(
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64-96c", "intel-xeon-platinum-8259cl", 96, 96
)

# --- the AdmissionCheck and the settings -------------------------------------------------------


def admission_check(active: bool) -> Obj:
    condition: Obj = {
        "type": "Active",
        "status": "True" if active else "False",
        "reason": "Ready" if active else "Starting",
        "message": "the node-devices admission driver is running" if active else "",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-11-30T04:00:00Z",
    }
    return {
        "apiVersion": KUEUE,
        "kind": "AdmissionCheck",
        "metadata": {
            "name": "gpustack-node-devices",
            "uid": uid("gpustack-node-devices"),
            "resourceVersion": "1200",
            "generation": 1,
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
            "finalizers": [KUEUE_FINALIZER],
        },
        "spec": {"controllerName": "worker.gpustack.ai/node-devices"},
        "status": {"conditions": [condition]},
    }


def settings(**spec: Any) -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {
            "name": "default",
            "uid": uid("settings-default"),
            "resourceVersion": "1500",
            "generation": 3,
            "finalizers": ["metacontroller.io/decoratorcontroller-gpustack-flavor-pools"],
        },
        "spec": {key.replace("_", "-"): value for key, value in spec.items()},
    }


# --- ClusterQueues: what the hook answers, and what the server then serves -------------------

T4_LABELS = {
    "feature.gpustack.ai/acceleratable": "true",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    A + "nvidia-tesla-t4": "true",
    "resource.gpustack.ai/type": "instancetypes",
}
A10G_LABELS = {
    "feature.gpustack.ai/acceleratable": "true",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    A + "nvidia-a10g": "true",
    "resource.gpustack.ai/type": "instancetypes",
}
GENERIC_LABELS = {
    "feature.gpustack.ai/acceleratable": "false",
    "kubernetes.io/os": "linux",
    "kubernetes.io/arch": "amd64",
    "resource.gpustack.ai/type": "instancetypes",
}


def group(resource: str, *flavors: tuple[str, str]) -> list[Obj]:
    """One resource group: `(flavor name, nominal quota)` in preference order."""
    return [
        {
            "coveredResources": [resource],
            "flavors": [
                {"name": name, "resources": [{"name": resource, "nominalQuota": quota}]}
                for name, quota in flavors
            ],
        }
    ]


def queue(
    name: str,
    labels: dict[str, str],
    stop: str,
    groups: list[Obj] | None = None,
    checks: bool = False,
    decided: str | None = None,
) -> Obj:
    """A ClusterQueue exactly as the hook answers it; `decided` (default: `stop`) is the
    hook's own decision recorded beside the stop."""
    spec: Obj = {
        "namespaceSelector": {},
        "stopPolicy": stop,
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"},
        "preemption": {
            "reclaimWithinCohort": "Never",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "LowerPriority",
        },
    }
    if groups:
        spec["resourceGroups"] = copy.deepcopy(groups)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": "gpustack-node-devices"}]}
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {
            "name": name,
            "labels": dict(labels),
            "annotations": {STOP_RECORD: decided or stop},
        },
        "spec": spec,
    }


def kueue_status(
    generation: int,
    stopped: bool = False,
    reserving: int = 0,
    admitted: int = 0,
    reserved: dict[str, str] | None = None,
    resource: str = NVIDIA_CREDITS,
) -> Obj:
    """The status Kueue writes: counters, per-flavor reservation, the Active condition."""
    usage = [
        {"name": name, "resources": [{"name": resource, "total": total, "borrowed": "0"}]}
        for name, total in (reserved or {}).items()
    ]
    active = {
        "type": "Active",
        "status": "False" if stopped else "True",
        "reason": "Stopped" if stopped else "Ready",
        "message": "Can't admit new workloads: is stopped."
        if stopped
        else "Can admit new workloads",
        "observedGeneration": generation,
        "lastTransitionTime": "2026-11-30T06:00:00Z",
    }
    return {
        "pendingWorkloads": 0,
        "reservingWorkloads": reserving,
        "admittedWorkloads": admitted,
        "flavorsReservation": usage,
        "flavorsUsage": copy.deepcopy(usage),
        "conditions": [active],
    }


def served_queue(
    answered: Obj, owner: Obj, generation: int, status: Obj | None, deleting: bool = False
) -> Obj:
    """A ClusterQueue as served after Metacontroller applied `answered` and Kueue defaulted it."""
    obj = copy.deepcopy(answered)
    meta = obj["metadata"]
    meta.update(
        uid=uid("cq-" + meta["name"]),
        resourceVersion=str(40000 + generation),
        generation=generation,
        creationTimestamp="2026-11-30T05:00:01Z",
        annotations={
            **(meta.get("annotations") or {}),
            "metacontroller.k8s.io/decorator-controller": "gpustack-queue",
        },
        finalizers=[KUEUE_FINALIZER],
        ownerReferences=[
            {
                "apiVersion": WORKER,
                "kind": "InstanceType",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T09:00:05Z"
        meta["deletionGracePeriodSeconds"] = 0
    obj["spec"]["queueingStrategy"] = "BestEffortFIFO"
    if status is not None:
        obj["status"] = status
    return obj


def _map(objects: list[Obj]) -> dict[str, Obj]:
    return {obj["metadata"]["name"]: copy.deepcopy(obj) for obj in objects}


def request(
    target: Obj,
    queues: list[Obj] | None = None,
    flavors: list[Obj] | None = None,
    check: Obj | None = None,
    chain_settings: Obj | None = None,
    finalizing: bool = False,
) -> Obj:
    """A sync or finalize body: one (possibly empty) map per attachment and related type."""
    return {
        "controller": CONTROLLER,
        "object": copy.deepcopy(target),
        "attachments": {CQ_GROUP: _map(queues or [])},
        "related": {
            RF_GROUP: _map(flavors or []),
            AC_GROUP: _map([check] if check else []),
            SETTINGS_GROUP: _map([chain_settings] if chain_settings else []),
        },
        "finalizing": finalizing,
    }


def answer(attached: list[Obj], problem: str | None = None, resync: int = 0) -> Obj:
    annotations: dict[str, str | None] = {PROBLEM: problem}
    return {"annotations": annotations, "attachments": attached, "resyncAfterSeconds": resync}


def finalize_answer(attached: list[Obj], finalized: bool, resync: int) -> Obj:
    return {"attachments": attached, "finalized": finalized, "resyncAfterSeconds": resync}
