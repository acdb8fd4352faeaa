"""Instances: the workload API on top of the pools. An Instance names an InstanceType (a pool)
and what it wants of it; it runs as one Pod (none while stopped) that the Pod webhook, Kueue and
the per-card check take from there.

- `InstanceSpec.parse`: the typed view of `spec` (ValueError naming the field);
- `desired_pod`: the Pod an Instance runs as: in its namespace, named after it, labelled for the
  pool's LocalQueue (the InstanceType's `schedule.gpustack.ai/queue-entrance`), `main` asking for
  the cards in the shape the request rules expect (whole cards, one logical slice, or one
  partition), CPU, RAM and local storage as requests and limits; with SSH, an `sshd` sidecar
  asking `device.gpustack.ai/<mfr>.visibility` = `main`'s card count, so it sees `main`'s cards
  and is charged nothing (the seed's two-container Pod). The sidecar runs the chain's own image
  (already on every node: the node agent runs it), whose `/opt/gpustack/sshd/start` serves
  sshd on port 2222 with the Secret's authorized keys; a session enters `main`'s namespaces as
  `main`'s user, with `main`'s environment (`images/sshd/`);
- `stop_reason`: why an Instance must not run now (running-instance stop): its InstanceType gone
  or being deleted, or its ClusterQueue in `HoldAndDrain`; a plain `Hold` is not a stop;
- `observed_status`: the Instance's status from its Pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
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
from chain.quantity import parse_quantity
from chain.queues import STOP_HOLD_AND_DRAIN
from chain.requests import Problem

INSTANCE = "Instance"
INSTANCE_RESOURCE = "instances"
INSTANCE_LABEL = "worker.gpustack.ai/instance"
MAIN = "main"
SSHD = "sshd"
SSH_PORT = 2222
SSH_KEYS_DIR = "/etc/gpustack/ssh"
SSH_START = "/opt/gpustack/sshd/start"
# Entering another container's namespaces: setns into its mount namespace needs SYS_ADMIN, and
# reading its process's namespaces and environment (another user's) needs SYS_PTRACE.
SSH_CAPABILITIES = ("SYS_ADMIN", "SYS_PTRACE")

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
    name: str,
    namespace: str,
    spec: InstanceSpec,
    pool: PoolType,
    table: ManufacturerTable,
    sidecar_image: str = "",
) -> Obj:
    """The Pod an Instance runs as (see the module doc); ValueError when the pool cannot serve
    the shape asked (cards of a CPU-only pool, a manufacturer this cluster does not know) or SSH
    is asked of a hook given no sidecar image."""
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
        _add_ssh(pod_spec, spec, pool, sidecar_image)
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


def _add_ssh(pod_spec: Obj, spec: InstanceSpec, pool: PoolType, image: str) -> None:
    """The `sshd` sidecar: it enters `main`'s namespaces (one process namespace for the Pod), is
    shown `main`'s cards through the visibility resource and charged nothing."""
    if not spec.ssh.authorized_keys_secret:
        raise ValueError("spec.ssh.authorizedKeysSecret: required when ssh.enabled is true")
    if not image:
        raise ValueError(
            "spec.ssh: this cluster's Instance hook has no SSH sidecar image "
            "(GPUSTACK_SSH_SIDECAR_IMAGE); ask its operator, or turn ssh off"
        )
    sidecar: Obj = {
        "name": SSHD,
        "image": image,
        "command": [SSH_START],
        "env": [{"name": "GPUSTACK_SSH_PORT", "value": str(SSH_PORT)}],
        "ports": [{"name": "ssh", "containerPort": SSH_PORT}],
        "volumeMounts": [{"name": "ssh-keys", "mountPath": SSH_KEYS_DIR, "readOnly": True}],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "capabilities": {"add": list(SSH_CAPABILITIES)},
        },
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


# --- the Instance webhook's rules ----------------------------------------------------------------


INSTANCE_CATALOG_CONFIGMAP = "gpustack-instance-catalog"
INSTANCE_CATALOG_KEY = "instances.json"


@dataclass(frozen=True)
class InstanceFacts:
    """What the Instance webhook reads of an InstanceType. The webhook holds no credentials: it
    reads these from the ConfigMap `gpustack-instance-catalog` (one compact row per type,
    `instance_catalog`), which the catalog decorator writes beside the pool catalog."""

    name: str
    group: str
    """The accelerator group (`nvidia-tesla-t4`); empty for a CPU-only type."""
    unit_cpu: str
    unit_ram: str
    local_storage: str
    card_capacity: int
    """Whole cards in the pool (`status.accelerator.capacity`); 0 until counted."""
    cpu_capacity: str
    """Cores of the pool (`status.cpu.capacity`)."""
    logical_slices: int
    profiles: tuple[str, ...]
    ready: bool = True
    """The pool has reported its cards (`status.detail.manufacturer`) and counted some: until
    then what they offer (slices, profiles, how many) is unknown, and is not held against a
    request (the Pod webhook, Kueue and the per-card check still stand in its way)."""

    @property
    def acceleratable(self) -> bool:
        return bool(self.group)

    @property
    def manufacturer(self) -> str:
        return split_accelerator_key(self.group)[0] if self.group else ""

    @classmethod
    def from_instance_type(cls, obj: Mapping[str, Any]) -> InstanceFacts:
        """Read an InstanceType; ValueError naming the malformed field (`spec.unitResources: ...`).

        The CRD types every field read here, so a value of another type never comes from the API
        server: it is refused by name rather than guessed at, and a count that is not yet a number
        (`status.accelerator.capacity` is a string) still reads as "not counted yet"."""
        meta = fields.child(obj, "metadata", "")
        spec = fields.child(obj, "spec", "")
        status = fields.child(obj, "status", "")
        units = fields.child(spec, "unitResources", "spec")
        detail = fields.child(status, "detail", "status")
        sliced = fields.child(detail, "slicedDetail", "status.detail")
        sliced_path = "status.detail.slicedDetail"
        physical_path = f"{sliced_path}.physical"
        physical = fields.child(sliced, "physical", sliced_path)
        acceleratable = fields.boolean(spec, "acceleratable", "spec")
        group = fields.string(spec, "acceleratorGroup", "spec") if acceleratable else ""
        capacity = fields.string(
            fields.child(status, "accelerator", "status"), "capacity", "status.accelerator"
        )
        cards = int(capacity) if capacity.isdigit() else 0
        return cls(
            name=fields.string(meta, "name", "metadata"),
            group=group,
            unit_cpu=fields.string(units, "cpu", "spec.unitResources"),
            unit_ram=fields.string(units, "ram", "spec.unitResources"),
            local_storage=fields.string(spec, "localStorage", "spec"),
            card_capacity=cards,
            cpu_capacity=fields.string(
                fields.child(status, "cpu", "status"), "capacity", "status.cpu"
            ),
            logical_slices=fields.integer(
                fields.child(sliced, "logical", sliced_path), "count", f"{sliced_path}.logical"
            ),
            profiles=tuple(
                fields.string(item, "name", where)
                for item, where in fields.items(physical, "profiles", physical_path)
            ),
            ready=bool(fields.string(detail, "manufacturer", "status.detail")) and cards > 0,
        )

    def row(self) -> list[Any]:
        """The compact wire form (a row of the instance catalog, keyed by the type's name)."""
        return [
            self.group,
            self.unit_cpu,
            self.unit_ram,
            self.local_storage,
            self.card_capacity,
            self.cpu_capacity,
            self.logical_slices,
            list(self.profiles),
            self.ready,
        ]

    @classmethod
    def from_row(cls, name: str, row: object) -> InstanceFacts:
        if not isinstance(row, list) or len(row) != 9 or not isinstance(row[7], list):
            raise ValueError(f"types.{name}: expected a row of 9 fields")
        group, cpu, ram, storage, cards, cores, logical, profiles, ready = row
        return cls(
            name,
            str(group),
            str(cpu),
            str(ram),
            str(storage),
            int(cards),
            str(cores),
            int(logical),
            tuple(str(p) for p in profiles),
            bool(ready),
        )


def instance_catalog(types: Iterable[Mapping[str, Any]]) -> Obj:
    """The instance catalog's document: every InstanceType's facts as a row, by name
    (ValueError naming the field of a malformed type)."""
    return facts_catalog(map(InstanceFacts.from_instance_type, types))


def facts_catalog(facts: Iterable[InstanceFacts]) -> Obj:
    """The instance catalog's document of facts already read: a hook reads each InstanceType
    itself, so a malformed one is refused with its own path in the request."""
    rows = {one.name: one.row() for one in facts}
    return {"types": dict(sorted(rows.items()))}


def parse_instance_catalog(document: object) -> dict[str, InstanceFacts]:
    """The facts by InstanceType name; a malformed row is left out (ValueError for a document
    that is not a catalog at all)."""
    types = document.get("types") if isinstance(document, Mapping) else None
    if not isinstance(types, Mapping):
        raise ValueError("the instance catalog must be an object with a map of types")
    found: dict[str, InstanceFacts] = {}
    for name, row in types.items():
        try:
            found[str(name)] = InstanceFacts.from_row(str(name), row)
        except (ValueError, TypeError):
            continue
    return found


def _amount(raw: str, where: str) -> Fraction:
    try:
        return parse_quantity(raw)
    except ValueError:
        raise ValueError(f"{where}: {raw!r} is not a quantity (e.g. 16Gi, 500m)") from None


def _times(raw: str, count: int) -> str:
    """`32Gi` x 2 as `64Gi` (the unit kept when it is one)."""
    number = raw.rstrip("KMGTPEkmi")
    unit = raw[len(number) :]
    return f"{int(number) * count}{unit}" if number.isdigit() else raw


def instance_problems(
    spec: InstanceSpec, facts: InstanceFacts, table: ManufacturerTable
) -> list[Problem]:
    """Why an Instance cannot be served by its InstanceType as asked (empty: it can)."""
    found: list[Problem] = []
    res = spec.resources
    where = "spec.resources"
    if res.partitioned_profile and res.sliced_memory_percentage:
        found.append(
            Problem(
                "instance-shape",
                f"{where}: a hardware partition and a logical slice percentage are mutually "
                "exclusive; keep acceleratorPartitionedProfile or "
                "acceleratorSlicedMemoryPercentage",
            )
        )
    if res.family in ("sliced", "partitioned") and res.accelerator != 1:
        found.append(
            Problem(
                "instance-shape",
                f'{where}.accelerator: "{res.accelerator}": a slice or a partition is exactly one '
                'card; set accelerator "1"',
            )
        )
    if res.family != "none" and not facts.acceleratable:
        found.append(
            Problem(
                "instance-cpu-pool",
                f'{where}: the InstanceType "{facts.name}" serves no accelerator; ask for CPU and '
                "RAM only, or pick an accelerated InstanceType",
            )
        )
        return found
    maker = table.get(facts.manufacturer) if facts.manufacturer else None
    if res.partitioned_profile:
        if maker is None or not maker.partition_kind:
            found.append(
                Problem(
                    "instance-profile",
                    f"{where}.acceleratorPartitionedProfile: the cards of InstanceType "
                    f'"{facts.name}" cannot be partitioned; ask for whole cards or a slice',
                )
            )
        elif facts.ready and res.partitioned_profile not in facts.profiles:
            offered = ", ".join(facts.profiles) or "none"
            found.append(
                Problem(
                    "instance-profile",
                    f'{where}.acceleratorPartitionedProfile: "{res.partitioned_profile}" is not '
                    f'offered by InstanceType "{facts.name}" (offered: {offered})',
                )
            )
    if res.sliced_memory_percentage and facts.ready and facts.logical_slices <= 0:
        found.append(
            Problem(
                "instance-slice",
                f"{where}.acceleratorSlicedMemoryPercentage: the pool of InstanceType "
                f'"{facts.name}" offers no logical slices; ask for whole cards'
                + (" or a partition" if facts.profiles else ""),
            )
        )
    if res.family == "exclusive" and facts.card_capacity and res.accelerator > facts.card_capacity:
        found.append(
            Problem(
                "instance-capacity",
                f'{where}.accelerator: "{res.accelerator}" exceeds the {facts.card_capacity} '
                f'cards of the pool of InstanceType "{facts.name}"',
            )
        )
    units = max(res.accelerator, 1) if facts.acceleratable else 1
    if res.ram and facts.unit_ram:
        ceiling = _amount(facts.unit_ram, "the InstanceType's unitResources.ram") * units
        if _amount(res.ram, f"{where}.ram") > ceiling:
            found.append(
                Problem(
                    "instance-ram",
                    f'{where}.ram: "{res.ram}" exceeds {_times(facts.unit_ram, units)} (the unit '
                    f'RAM {facts.unit_ram} of InstanceType "{facts.name}" x {units})',
                )
            )
    if res.local_storage and facts.local_storage:
        ceiling = _amount(facts.local_storage, "the InstanceType's localStorage")
        if _amount(res.local_storage, f"{where}.localStorage") > ceiling:
            found.append(
                Problem(
                    "instance-storage",
                    f'{where}.localStorage: "{res.local_storage}" exceeds the '
                    f'{facts.local_storage} of InstanceType "{facts.name}"',
                )
            )
    if not facts.acceleratable and res.cpu and facts.cpu_capacity:
        asked = _amount(res.cpu, f"{where}.cpu")
        if asked > _amount(facts.cpu_capacity, "status.cpu.capacity"):
            found.append(
                Problem(
                    "instance-cpu",
                    f'{where}.cpu: "{res.cpu}" exceeds the {facts.cpu_capacity} cores of the '
                    f'pool of InstanceType "{facts.name}" (its capacity, not what is free now)',
                )
            )
    return found


def instance_defaults(spec: InstanceSpec, facts: InstanceFacts) -> dict[str, str]:
    """The resources an Instance leaves out, from its InstanceType's unit spec: CPU and RAM are
    the unit's times the cards (one unit for a slice, a partition or a CPU-only pool), local
    storage the type's."""
    res = spec.resources
    units = max(res.accelerator, 1) if facts.acceleratable else 1
    found: dict[str, str] = {}
    if not res.cpu and facts.unit_cpu:
        found["cpu"] = _times(facts.unit_cpu, units)
    if not res.ram and facts.unit_ram:
        found["ram"] = _times(facts.unit_ram, units)
    if not res.local_storage and facts.local_storage:
        found["localStorage"] = facts.local_storage
    return found
