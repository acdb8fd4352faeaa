"""InstanceTypes as the API server serves them to a hook: the spec the pools hook derives, and
the served object around it (webhook-stamped labels, the finalizers of the decorators that
watch it, the status its status hook last wrote). Each hook's fixture world names what differs
for it (whose finalizers it sees, which status)."""

from __future__ import annotations

import copy
from typing import Any

from builders import uid

Obj = dict[str, Any]
WORKER = "worker.gpustack.ai/v1alpha1"
ENTRANCE = "gpustack-fnv64-0000000000000000"


def type_spec(
    akey: str = "", general: str = "generic", display: str = "", cpu: str = "", ram: str = ""
) -> Obj:
    """A derived InstanceType's spec; the unit defaults to a card pool's (8 cores, 32Gi) or a
    CPU pool's (1 core, 2Gi)."""
    spec: Obj = {"generalGroup": general}
    if akey:
        spec["acceleratorGroup"] = akey
    spec.update(acceleratable=bool(akey), os="linux", arch="amd64")
    if display:
        spec["displayName"] = display
    default_cpu, default_ram = ("8", "32Gi") if akey else ("1", "2Gi")
    spec.update(
        unitResources={"cpu": cpu or default_cpu, "ram": ram or default_ram},
        localStorage="100Gi",
    )
    return spec


def served_instance_type(
    name: str,
    spec: Obj,
    finalizers: list[str],
    status: Obj,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
    generation: int = 1,
) -> Obj:
    """The InstanceType `name` as served."""
    meta: Obj = {
        "name": name,
        "uid": uid(name),
        "resourceVersion": "30017",
        "generation": generation,
        "creationTimestamp": "2026-11-30T05:00:00Z",
        "labels": {"schedule.gpustack.ai/derived-from-node": "true"},
        "finalizers": list(finalizers),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T09:00:00Z"
        meta["deletionGracePeriodSeconds"] = 0
    return {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": meta,
        "spec": copy.deepcopy(spec),
        "status": copy.deepcopy(status),
    }
