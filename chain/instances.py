"""Instances: the workload API on top of the pools. An Instance names an InstanceType (a pool)
and what it wants of it; it runs as one Pod (none while stopped) that the Pod webhook, Kueue and
the per-card check take from there.

- `InstanceSpec.parse`: the typed view of `spec` (ValueError naming the field);
- `desired_pod`: the Pod an Instance runs as: in its namespace, named after it, labelled for the
  pool's LocalQueue (the InstanceType's `schedule.gpustack.ai/queue-entrance`), `main` asking for
  the cards in the shape the request rules expect (whole cards, one logical slice, or one
  partition), CPU, RAM and local storage as requests and limits; with SSH, an `sshd` sidecar
  asking `device.gpustack.ai/<mfr>.visibility` = `main`'s card count, so it sees `main`'s cards
  and is charged nothing (the seed's two-container Pod);
- `stop_reason`: why an Instance must not run now (running-instance stop): its InstanceType gone
  or being deleted, or its ClusterQueue in `HoldAndDrain`; a plain `Hold` is not a stop;
- `observed_status`: the Instance's status from its Pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chain import fields
from chain.families import (
    PARTITIONED,
    SLICED,
    SLICED_CORES_PERCENTAGE,
    SLICED_MEMORY_PERCENTAGE,
    visibility_resource,
)
from chain.keys import split_accelerator_key
from chain.labels import KUEUE_QUEUE_NAME, QUEUE_ENTRANCE
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.manufacturers import ManufacturerTable
from chain.queues import STOP_HOLD_AND_DRAIN

INSTANCE = "Instance"
INSTANCE_RESOURCE = "instances"
INSTANCE_LABEL = "worker.gpustack.ai/instance"
MAIN = "main"
SSHD = "sshd"
SSH_PORT = 2222
SSH_KEYS_DIR = "/etc/gpustack/ssh"

Obj = dict[str, Any]


@dataclass(frozen=True)
class InstanceResources:
    accelerator: int = 0
    """Whole cards, or 1 for a slice or a partition."""
    sliced_memory_percentage: int = 0
    sliced_cores_percentage: int = 0
    partitioned_profile: str = ""
    cpu: str = ""
    ram: str = ""
    local_storage: str = ""

    @property
    def family(self) -> str:
        if self.partitioned_profile:
            return "partitioned"
        if self.sliced_memory_percentage:
            return "sliced"
        return "exclusive" if self.accelerator else "none"

    def summary(self) -> str:
        """The ACCELERATOR column: `2`, `1x40%`, `1x3g.40gb`, or `-` for CPU only."""
        if self.family == "partitioned":
            return f"1x{self.partitioned_profile}"
        if self.family == "sliced":
            return f"1x{self.sliced_memory_percentage}%"
        return str(self.accelerator) if self.accelerator else "-"


@dataclass(frozen=True)
class SshAccess:
    enabled: bool = False
    authorized_keys_secret: str = ""


@dataclass(frozen=True)
class InstanceSpec:
    instance_type: str
    image: str
    resources: InstanceResources
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[Obj, ...] = ()
    ssh: SshAccess = SshAccess()
    stop: bool = False

    @classmethod
    def parse(cls, spec: object, path: str = "spec") -> InstanceSpec:
        body = fields.as_object(spec, path)
        raw = fields.child(body, "resources", path)
        where = f"{path}.resources"
        count = fields.string(raw, "accelerator", where) or "0"
        if not count.isdigit():
            raise ValueError(f"{where}.accelerator: {count!r} must be a whole number of cards")
        resources = InstanceResources(
            accelerator=int(count),
            sliced_memory_percentage=fields.integer(
                raw, "acceleratorSlicedMemoryPercentage", where
            ),
            sliced_cores_percentage=fields.integer(raw, "acceleratorSlicedCoresPercentage", where),
            partitioned_profile=fields.string(raw, "acceleratorPartitionedProfile", where),
            cpu=fields.string(raw, "cpu", where),
            ram=fields.string(raw, "ram", where),
            local_storage=fields.string(raw, "localStorage", where),
        )
        ssh = fields.child(body, "ssh", path)
        env = body.get("env") or []
        if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
            raise ValueError(f"{path}.env: expected a list of environment variables")
        return cls(
            instance_type=fields.string(body, "instanceType", path, required=True),
            image=fields.string(body, "image", path, required=True),
            resources=resources,
            command=_strings(body, "command", path),
            args=_strings(body, "args", path),
            env=tuple(env),
            ssh=SshAccess(
                fields.boolean(ssh, "enabled", f"{path}.ssh"),
                fields.string(ssh, "authorizedKeysSecret", f"{path}.ssh"),
            ),
            stop=fields.boolean(body, "stop", path),
        )


def _strings(body: Mapping[str, object], key: str, path: str) -> tuple[str, ...]:
    found = body.get(key) or []
    if not isinstance(found, list) or not all(isinstance(item, str) for item in found):
        raise ValueError(f"{path}.{key}: expected a list of strings")
    return tuple(found)


@dataclass(frozen=True)
class PoolType:
    """What an Instance reads of its InstanceType."""

    name: str
    queue_entrance: str
    manufacturer: str = ""
    """Empty for a CPU-only pool."""
    deleting: bool = False

    @classmethod
    def of(cls, instance_type: Mapping[str, Any]) -> PoolType:
        meta = instance_type.get("metadata") or {}
        spec = instance_type.get("spec") or {}
        group = str(spec.get("acceleratorGroup") or "") if spec.get("acceleratable") else ""
        return cls(
            name=str(meta.get("name", "")),
            queue_entrance=str((meta.get("labels") or {}).get(QUEUE_ENTRANCE, "")),
            manufacturer=split_accelerator_key(group)[0] if group else "",
            deleting=bool(meta.get("deletionTimestamp")),
        )


def stop_reason(pool: PoolType | None, cluster_queue: Mapping[str, Any] | None) -> str:
    """Why the Instance must stop rather than (re)create its Pod; "" when it may run."""
    if pool is None:
        return "its InstanceType is gone"
    if pool.deleting:
        return f'its InstanceType "{pool.name}" is being deleted'
    policy = str(((cluster_queue or {}).get("spec") or {}).get("stopPolicy") or "")
    if policy == STOP_HOLD_AND_DRAIN:
        return f'the pool "{pool.name}" is draining (its ClusterQueue is {STOP_HOLD_AND_DRAIN})'
    return ""


def _card_limits(resources: InstanceResources, base: str, kind: str) -> dict[str, str]:
    family = resources.family
    if family == "partitioned":
        return {
            base + PARTITIONED: "1",
            f"{base}{PARTITIONED}.{kind}-{resources.partitioned_profile}": "1",
        }
    if family == "sliced":
        found = {
            base + SLICED: "1",
            base + SLICED_MEMORY_PERCENTAGE: str(resources.sliced_memory_percentage),
        }
        if resources.sliced_cores_percentage:
            found[base + SLICED_CORES_PERCENTAGE] = str(resources.sliced_cores_percentage)
        return found
    if family == "exclusive":
        return {base: str(resources.accelerator)}
    return {}


def cards_of(resources: InstanceResources) -> int:
    """How many cards `main` holds (what the SSH sidecar is shown)."""
    return 1 if resources.family in ("sliced", "partitioned") else resources.accelerator


def desired_pod(
    name: str, namespace: str, spec: InstanceSpec, pool: PoolType, table: ManufacturerTable
) -> Obj:
    """The Pod an Instance runs as (see the module doc); ValueError when the pool cannot serve
    the shape asked (cards of a CPU-only pool, a manufacturer this cluster does not know)."""
    resources = spec.resources
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if resources.family != "none":
        maker = table.get(pool.manufacturer) if pool.manufacturer else None
        if maker is None:
            raise ValueError(
                f'spec.resources: the InstanceType "{pool.name}" serves no accelerator; '
                "ask for CPU and RAM only, or pick an accelerated InstanceType"
            )
        limits.update(_card_limits(resources, maker.resource_name, maker.partition_kind))
    for key, value in (
        ("cpu", resources.cpu),
        ("memory", resources.ram),
        ("ephemeral-storage", resources.local_storage),
    ):
        if value:
            limits[key] = value
    requests = dict(limits)
    main: Obj = {
        "name": MAIN,
        "image": spec.image,
        "resources": {"limits": limits, "requests": requests},
    }
    if spec.command:
        main["command"] = list(spec.command)
    if spec.args:
        main["args"] = list(spec.args)
    if spec.env:
        main["env"] = [dict(entry) for entry in spec.env]
    pod_spec: Obj = {"containers": [main], "restartPolicy": "Always"}
    if spec.ssh.enabled:
        _add_ssh(pod_spec, spec, pool)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {KUEUE_QUEUE_NAME: pool.queue_entrance, INSTANCE_LABEL: name},
        },
        "spec": pod_spec,
    }


def _add_ssh(pod_spec: Obj, spec: InstanceSpec, pool: PoolType) -> None:
    """The `sshd` sidecar: it enters `main`'s namespaces (one process namespace for the Pod), is
    shown `main`'s cards through the visibility resource and charged nothing."""
    if not spec.ssh.authorized_keys_secret:
        raise ValueError("spec.ssh.authorizedKeysSecret: required when ssh.enabled is true")
    sidecar: Obj = {
        "name": SSHD,
        "image": spec.image,
        "command": ["/usr/sbin/sshd", "-D", "-e", "-p", str(SSH_PORT)],
        "ports": [{"name": "ssh", "containerPort": SSH_PORT}],
        "volumeMounts": [{"name": "ssh-keys", "mountPath": SSH_KEYS_DIR, "readOnly": True}],
    }
    cards = cards_of(spec.resources)
    if cards and pool.manufacturer:
        shown = {visibility_resource(pool.manufacturer): str(cards)}
        sidecar["resources"] = {"limits": shown, "requests": dict(shown)}
    pod_spec["containers"].append(sidecar)
    pod_spec["shareProcessNamespace"] = True
    pod_spec["volumes"] = [
        {"name": "ssh-keys", "secret": {"secretName": spec.ssh.authorized_keys_secret}}
    ]


def granted_cards(pod: Mapping[str, Any]) -> list[str]:
    """The card ids the allocation record of the Pod's `main` names (none while unrecorded or
    unreadable)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(ALLOCATED_ANNOTATION)
    if not raw:
        return []
    try:
        record = parse_allocated(str(raw)).get(MAIN)
    except ValueError:
        return []
    return sorted({claim.row.id for claim in record.claims()}) if record is not None else []


def observed_status(
    spec: InstanceSpec, pod: Mapping[str, Any] | None, stopped: str, problem: str = ""
) -> Obj:
    """The Instance's status: its Pod's phase, node and granted cards; `Stopped` (with the reason)
    while stopped; `Failed` with the problem when no Pod can be made for it."""
    status: Obj = {"accelerator": spec.resources.summary()}
    if problem:
        return {**status, "phase": "Failed", "message": problem}
    if stopped:
        return {**status, "phase": "Stopped", "message": stopped}
    if pod is None:
        return {**status, "phase": "Pending", "message": "its Pod is being created"}
    meta = pod.get("metadata") or {}
    phase = str((pod.get("status") or {}).get("phase") or "Pending")
    status.update(phase=phase, pod=str(meta.get("name", "")))
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if node:
        status["node"] = node
    cards = granted_cards(pod)
    if cards:
        status["accelerators"] = cards
    return status
