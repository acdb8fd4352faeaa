"""Fixture cases of the Instance hook: one Metacontroller request each and the exact answer.

The pool is the T4 InstanceType (NVIDIA, MIG off, queue entrance `gpustack-fnv64-...`), with its
ClusterQueue; a CPU-only pool for the CPU cases."""

from __future__ import annotations

import copy
from typing import Any

from chain.names import local_queue_name
from tests.unit.hooks.clock import EARLIER, NOW

Obj = dict[str, Any]
WORKER = "worker.gpustack.ai/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
CPU = "gpustack--generic-linux-amd64"
NAMESPACE = "team-a"
CONTROLLER: Obj = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "CompositeController",
    "metadata": {"name": "gpustack-instance"},
}


def instance_type(name: str = T4, group: str = "nvidia-tesla-t4", deleting: bool = False) -> Obj:
    meta: Obj = {
        "name": name,
        "labels": {"schedule.gpustack.ai/queue-entrance": local_queue_name(name)},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T08:00:00Z"
    spec: Obj = {"acceleratable": bool(group), "os": "linux", "arch": "amd64"}
    if group:
        spec["acceleratorGroup"] = group
    return {"apiVersion": WORKER, "kind": "InstanceType", "metadata": meta, "spec": spec}


def cluster_queue(name: str = T4, stop: str = "") -> Obj:
    spec: Obj = {"queueingStrategy": "BestEffortFIFO"}
    if stop:
        spec["stopPolicy"] = stop
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def instance(
    name: str = "notebook",
    type_name: str = T4,
    resources: Obj | None = None,
    stop: bool = False,
    ssh: Obj | None = None,
    status: Obj | None = None,
    generation: int = 0,
) -> Obj:
    spec: Obj = {
        "instanceType": type_name,
        "image": "registry.example/lab:1",
        "command": ["jupyter", "lab"],
        "env": [{"name": "MODE", "value": "lab"}],
        "resources": resources if resources is not None else {"accelerator": "1"},
    }
    if stop:
        spec["stop"] = True
    if ssh is not None:
        spec["ssh"] = ssh
    found: Obj = {
        "apiVersion": WORKER,
        "kind": "Instance",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": "5c0ffee0-0000-4000-8000-000000000001",
        },
        "spec": spec,
    }
    if generation:
        found["metadata"]["generation"] = generation
    if status is not None:
        found["status"] = status
    return found


def sync_request(parent: Obj, related: list[Obj], children: list[Obj] | None = None) -> Obj:
    grouped: dict[str, dict[str, Obj]] = {}
    for obj in related:
        key = f"{obj['kind']}.{obj['apiVersion']}"
        grouped.setdefault(key, {})[obj["metadata"]["name"]] = obj
    pods = {f"{NAMESPACE}/{p['metadata']['name']}": p for p in children or []}
    return {
        "controller": CONTROLLER,
        "parent": parent,
        "children": {"Pod.v1": pods},
        "related": grouped,
        "finalizing": False,
    }


def pod(name: str, limits: dict[str, str], queue: str = T4, extra: list[Obj] | None = None) -> Obj:
    main: Obj = {
        "name": "main",
        "image": "registry.example/lab:1",
        "command": ["jupyter", "lab"],
        "env": [{"name": "MODE", "value": "lab"}],
        "resources": {"limits": dict(limits), "requests": dict(limits)},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "kueue.x-k8s.io/queue-name": local_queue_name(queue),
                "worker.gpustack.ai/instance": name,
            },
        },
        "spec": {"containers": [main, *(extra or [])], "restartPolicy": "Always"},
    }


def condition(
    type_: str, holds: bool, reason: str, message: str, since: str = NOW, generation: int = 0
) -> Obj:
    return {
        "type": type_,
        "status": "True" if holds else "False",
        "observedGeneration": generation,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    }


def held_back(reason: str, message: str) -> list[Obj]:
    """Admitted, Scheduled and Ready, all False for one reason (no Pod to speak of)."""
    return [condition(t, False, reason, message) for t in ("Admitted", "Scheduled", "Ready")]


CREATING = held_back("PodPending", "its Pod is being created")


def case(description: str, request: Obj, response: Obj, path: str = "/sync") -> Obj:
    return {"description": description, "path": path, "request": request, "response": response}


POOL = [instance_type(), cluster_queue()]
GPU = "nvidia.com/gpu"
RUNNING_POD = copy.deepcopy(pod("notebook", {GPU: "1"}))
RUNNING_POD["spec"]["nodeName"] = "node-a"
RUNNING_POD["status"] = {"phase": "Running"}
RUNNING_POD["metadata"]["annotations"] = {
    "device.gpustack.ai/accelerator.allocated": (
        '{"main": {"devices": {"groups": [{"id": "tesla-t4", "manufacturer": "nvidia", '
        '"accelerators": [{"id": "GPU-a1", "index": 0, "mode": 1, "allocated": 1600000}]}]}, '
        '"deviceIDs": ["tesla-t4:GPU-a1:0000"]}}'
    )
}

SSHD: Obj = {
    "name": "sshd",
    # The chain's own image (the hook's default), whatever image `main` runs.
    "image": "ghcr.io/gpustack-chain/gpustack-chain:0.1.0",
    "command": ["/opt/gpustack/sshd/start"],
    "env": [{"name": "GPUSTACK_SSH_PORT", "value": "2222"}],
    "ports": [{"name": "ssh", "containerPort": 2222}],
    "volumeMounts": [{"name": "ssh-keys", "mountPath": "/etc/gpustack/ssh", "readOnly": True}],
    "securityContext": {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "capabilities": {"add": ["SYS_ADMIN", "SYS_PTRACE"]},
    },
    "resources": {
        "limits": {"device.gpustack.ai/nvidia.visibility": "1"},
        "requests": {"device.gpustack.ai/nvidia.visibility": "1"},
    },
}
SSH_POD = pod("notebook", {GPU: "1"}, extra=[SSHD])
SSH_POD["spec"]["shareProcessNamespace"] = True
SSH_POD["spec"]["volumes"] = [{"name": "ssh-keys", "secret": {"secretName": "my-keys"}}]

RUNNING_STATUS: Obj = {
    "accelerator": "1",
    "phase": "Running",
    "pod": "notebook",
    "node": "node-a",
    "accelerators": ["GPU-a1"],
    "conditions": [
        condition("Admitted", True, "Admitted", "no admission gate of Kueue holds its Pod"),
        condition("Scheduled", True, "Scheduled", "its Pod is bound to node-a"),
        condition("Ready", False, "ContainersNotReady", "its Pod's containers are not ready yet"),
    ],
}


def pool_with(*conditions: Obj) -> list[Obj]:
    """The T4 pool, its InstanceType showing `conditions` (what its status hook wrote)."""
    return [{**instance_type(), "status": {"conditions": list(conditions)}}, cluster_queue()]


GATED_POD = pod("notebook", {GPU: "1"})
GATED_POD["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
NO_CARDS = "the pool has no cards counted: no node of it reported any, or every node of it left"
FULL = "every card is taken; new Instances wait (Accelerator(EX/SH/SL/PT) 0/0 0/0 0/0 0/0)"
WAITING = "its Pod waits in its pool's queue until the quota fits it"
READY_POD = copy.deepcopy(RUNNING_POD)
READY_POD["status"]["conditions"] = [
    {"type": "PodScheduled", "status": "True"},
    {"type": "Ready", "status": "True"},
]


def gated_answer(conditions: list[Obj]) -> Obj:
    """The answer while Kueue holds the Pod: the Pod as made, its phase Pending, `conditions`."""
    status = {"accelerator": "1", "phase": "Pending", "pod": "notebook", "conditions": conditions}
    return {"status": status, "children": [pod("notebook", {GPU: "1"})]}


ADMITTED_EARLIER = condition(
    "Admitted", True, "Admitted", "no admission gate of Kueue holds its Pod", EARLIER
)

CPU_POOL_CARDS = (
    f'spec.resources: the InstanceType "{CPU}" serves no accelerator; ask for CPU '
    "and RAM only, or pick an accelerated InstanceType"
)

CASES: dict[str, Obj] = {
    "whole-cards": case(
        "two whole cards: one Pod labelled for the pool's LocalQueue, asking nvidia.com/gpu: 2",
        sync_request(instance(resources={"accelerator": "2", "cpu": "8", "ram": "32Gi"}), POOL),
        {
            "status": {
                "accelerator": "2",
                "phase": "Pending",
                "message": "its Pod is being created",
                "conditions": CREATING,
            },
            "children": [pod("notebook", {GPU: "2", "cpu": "8", "memory": "32Gi"})],
        },
    ),
    "slice": case(
        "one logical slice: .sliced 1 with the memory and cores percentages the webhook folds",
        sync_request(
            instance(
                resources={
                    "accelerator": "1",
                    "acceleratorSlicedMemoryPercentage": 40,
                    "acceleratorSlicedCoresPercentage": 50,
                }
            ),
            POOL,
        ),
        {
            "status": {
                "accelerator": "1x40%",
                "phase": "Pending",
                "message": "its Pod is being created",
                "conditions": CREATING,
            },
            "children": [
                pod(
                    "notebook",
                    {
                        GPU + ".sliced": "1",
                        GPU + ".sliced.memory-percentage": "40",
                        GPU + ".sliced.cores-percentage": "50",
                    },
                )
            ],
        },
    ),
    "partition": case(
        "one partition: .partitioned 1 and the profile's key (kind mig)",
        sync_request(
            instance(resources={"accelerator": "1", "acceleratorPartitionedProfile": "3g.20gb"}),
            POOL,
        ),
        {
            "status": {
                "accelerator": "1x3g.20gb",
                "phase": "Pending",
                "message": "its Pod is being created",
                "conditions": CREATING,
            },
            "children": [
                pod("notebook", {GPU + ".partitioned": "1", GPU + ".partitioned.mig-3g.20gb": "1"})
            ],
        },
    ),
    "ssh": case(
        "SSH: an sshd sidecar shown main's one card (visibility resource), charged nothing",
        sync_request(instance(ssh={"enabled": True, "authorizedKeysSecret": "my-keys"}), POOL),
        {
            "status": {
                "accelerator": "1",
                "phase": "Pending",
                "message": "its Pod is being created",
                "conditions": CREATING,
            },
            "children": [SSH_POD],
        },
    ),
    "running": case(
        "its Pod runs: status shows the phase, the node and the card the allocation record names",
        sync_request(instance(), POOL, [RUNNING_POD]),
        {
            "status": RUNNING_STATUS,
            "children": [pod("notebook", {GPU: "1"})],
        },
    ),
    "stopped": case(
        "spec.stop: no Pod (Metacontroller deletes the running one), phase Stopped",
        sync_request(instance(stop=True), POOL, [RUNNING_POD]),
        {
            "status": {
                "accelerator": "1",
                "phase": "Stopped",
                "message": "stopped (spec.stop)",
                "conditions": held_back("Stopped", "stopped (spec.stop)"),
            },
            "children": [],
        },
    ),
    "pool-draining": case(
        "running-instance stop: the pool's ClusterQueue is HoldAndDrain, so no Pod is (re)made",
        sync_request(
            instance(), [instance_type(), cluster_queue(stop="HoldAndDrain")], [RUNNING_POD]
        ),
        {
            "status": {
                "accelerator": "1",
                "phase": "Stopped",
                "message": f'the pool "{T4}" is draining (its ClusterQueue is HoldAndDrain)',
                "conditions": held_back(
                    "Stopped", f'the pool "{T4}" is draining (its ClusterQueue is HoldAndDrain)'
                ),
            },
            "children": [],
        },
    ),
    "pool-held": case(
        "a plain Hold is not a stop: the Pod stays",
        sync_request(instance(), [instance_type(), cluster_queue(stop="Hold")], [RUNNING_POD]),
        {
            "status": RUNNING_STATUS,
            "children": [pod("notebook", {GPU: "1"})],
        },
    ),
    "type-gone": case(
        "running-instance stop: the InstanceType is gone",
        sync_request(instance(), []),
        {
            "status": {
                "accelerator": "1",
                "phase": "Stopped",
                "message": "its InstanceType is gone",
                "conditions": held_back("Stopped", "its InstanceType is gone"),
            },
            "children": [],
        },
    ),
    "type-deleting": case(
        "running-instance stop: the InstanceType is being deleted",
        sync_request(instance(), [instance_type(deleting=True), cluster_queue()]),
        {
            "status": {
                "accelerator": "1",
                "phase": "Stopped",
                "message": f'its InstanceType "{T4}" is being deleted',
                "conditions": held_back("Stopped", f'its InstanceType "{T4}" is being deleted'),
            },
            "children": [],
        },
    ),
    "cpu-only": case(
        "a CPU-only pool: CPU, RAM and local storage only",
        sync_request(
            instance(
                type_name=CPU,
                resources={"cpu": "2", "ram": "4Gi", "localStorage": "20Gi"},
            ),
            [instance_type(CPU, group=""), cluster_queue(CPU)],
        ),
        {
            "status": {
                "accelerator": "-",
                "phase": "Pending",
                "message": "its Pod is being created",
                "conditions": CREATING,
            },
            "children": [
                pod(
                    "notebook",
                    {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi"},
                    queue=CPU,
                )
            ],
        },
    ),
    "cards-of-a-cpu-pool": case(
        "cards asked of a CPU-only pool: no Pod, Failed, saying what to change",
        sync_request(instance(type_name=CPU), [instance_type(CPU, group=""), cluster_queue(CPU)]),
        {
            "status": {
                "accelerator": "1",
                "phase": "Failed",
                "message": CPU_POOL_CARDS,
                "conditions": held_back("Unservable", CPU_POOL_CARDS),
            },
            "children": [],
        },
    ),
    "waiting-no-capacity": case(
        "Kueue holds its Pod (the admission gate) and its pool has no cards: NoCapacity, the "
        "pool's word quoted; a condition already False keeps its time, each has the generation",
        sync_request(
            instance(
                generation=3,
                status={
                    "conditions": [
                        condition("Admitted", False, "NoCapacity", "older words", EARLIER, 2),
                        condition("Scheduled", True, "Scheduled", "its Pod is bound to x", EARLIER),
                    ]
                },
            ),
            pool_with(
                condition("Active", True, "QueueActive", "Can admit new workloads"),
                condition("Ready", False, "NoCapacity", NO_CARDS),
            ),
            [GATED_POD],
        ),
        gated_answer(
            [
                condition(
                    "Admitted",
                    False,
                    "NoCapacity",
                    f"no card or core of its pool can host it: {NO_CARDS}",
                    EARLIER,
                    3,
                ),
                condition(
                    "Scheduled",
                    False,
                    "NoCapacity",
                    f"no card or core of its pool can host it: {NO_CARDS}",
                    generation=3,
                ),
                condition(
                    "Ready",
                    False,
                    "NoCapacity",
                    f"no card or core of its pool can host it: {NO_CARDS}",
                    generation=3,
                ),
            ]
        ),
    ),
    "waiting-for-quota": case(
        "Kueue holds its Pod while its pool is full: WaitingForQuota, with the pool's Available",
        sync_request(
            instance(),
            pool_with(
                condition("Active", True, "QueueActive", "Can admit new workloads"),
                condition("Available", False, "Full", FULL),
                condition("Ready", True, "Ready", "the pool is active and has counted capacity"),
            ),
            [GATED_POD],
        ),
        gated_answer(
            [
                condition(t, False, "WaitingForQuota", f"{WAITING}: {FULL}")
                for t in ("Admitted", "Scheduled", "Ready")
            ]
        ),
    ),
    "pool-inactive": case(
        "Kueue holds its Pod and its pool's queue is not active: PoolInactive, Kueue's word quoted",
        sync_request(
            instance(),
            pool_with(condition("Active", False, "Stopped", "The ClusterQueue is stopped")),
            [GATED_POD],
        ),
        gated_answer(
            held_back(
                "PoolInactive",
                "its pool's queue admits nothing now: The ClusterQueue is stopped",
            )
        ),
    ),
    "ready": case(
        "its Pod runs and is ready: Ready flips to True now, the conditions that stay keep time",
        sync_request(
            instance(
                status={
                    "conditions": [
                        ADMITTED_EARLIER,
                        condition("Ready", False, "ContainersNotReady", "not yet", EARLIER),
                    ]
                },
            ),
            POOL,
            [READY_POD],
        ),
        {
            "status": {
                **RUNNING_STATUS,
                "conditions": [
                    ADMITTED_EARLIER,
                    condition("Scheduled", True, "Scheduled", "its Pod is bound to node-a"),
                    condition("Ready", True, "Running", "its Pod runs and is ready"),
                ],
            },
            "children": [pod("notebook", {GPU: "1"})],
        },
    ),
    "customize": case(
        "customize relates the InstanceType the Instance names and its pool's ClusterQueue",
        {"controller": CONTROLLER, "parent": instance()},
        {
            "relatedResources": [
                {"apiVersion": WORKER, "resource": "instancetypes", "names": [T4]},
                {"apiVersion": KUEUE, "resource": "clusterqueues", "names": [T4]},
            ]
        },
        path="/customize",
    ),
    "error-no-image": {
        "description": "an Instance without an image is a 400 naming the field",
        "path": "/sync",
        "request": sync_request(
            {**instance(), "spec": {k: v for k, v in instance()["spec"].items() if k != "image"}},
            POOL,
        ),
        "status": 400,
        "errorField": "$.parent.spec.image",
    },
}
