"""The verdict hook (`POST /judge`): the pure per-card verdict, served like a sync hook.

Request: `{"workload": W, "related": {"<Kind>.<apiVersion>": {"<name or ns/name>": obj}},
"check": "<AdmissionCheck name>"}` (check optional). Related objects read:
- `ResourceFlavor.kueue.x-k8s.io/v1beta2`: the Workload's flavors and those of Workloads whose
  cards are promised on the same nodes;
- `Devices.worker.gpustack.ai/v1alpha1`: the candidate nodes, status as the driver rebuilt it;
- `Node.v1`: hostnames (a node missing here is gone and serves no node-pinned demand);
- `Workload.kueue.x-k8s.io/v1beta2`: other Workloads that may hold promised cards;
- `Pod.v1`: Pods on those nodes, to count the promised Pods the ledger already holds (a Pod
  listed in its node's `Devices.status.unrecorded` carries the listed record).
Answer: `{"state": "Ready" | "Retry", "message": "..."}`. Writing it is the driver's job.
"""

from __future__ import annotations

from typing import Any

from chain.apis import CORE_V1, KUEUE_API, NODE, RESOURCE_FLAVOR, WORKER_API, WORKLOAD
from chain.charged_pods import charged_pods
from chain.devices import DEVICES_KIND, Devices
from chain.labels import HOSTNAME
from chain.ledger_rebuild import with_unrecorded
from chain.manufacturers import ManufacturerTable
from chain.queues import NODE_DEVICES_CHECK
from chain.verdicts import Snapshot, judge
from chain.workload_state import workload_shares
from hooks.request import (
    DECORATOR_REQUEST_SCHEMA,
    BadRequest,
    Obj,
    ObjectMap,
    object_path,
    validate,
)

POD = "Pod"

JUDGE_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["workload"],
    "properties": {
        "workload": {"$ref": "#/$defs/kubeObject"},
        "related": DECORATOR_REQUEST_SCHEMA["properties"]["related"],
        "check": {"type": "string", "minLength": 1},
    },
    "$defs": DECORATOR_REQUEST_SCHEMA["$defs"],
}


def _bad(err: ValueError, prefix: str) -> BadRequest:
    field, _, message = str(err).partition(": ")
    return BadRequest(f"{prefix}.{field}" if field not in ("", "$") else prefix, message)


def snapshot(related: ObjectMap, table: ManufacturerTable) -> Snapshot:
    """The verdict's inputs from the related objects; BadRequest naming a malformed one."""
    flavors = {obj["metadata"]["name"]: obj for obj in related.of(RESOURCE_FLAVOR, KUEUE_API)}
    devices = []
    for obj in related.of(DEVICES_KIND, WORKER_API):
        try:
            devices.append(Devices.parse(obj))
        except ValueError as err:
            raise _bad(err, object_path("related", obj)) from None
    hostnames = {
        obj["metadata"]["name"]: str((obj["metadata"].get("labels") or {}).get(HOSTNAME, ""))
        for obj in related.of(NODE, CORE_V1)
    }
    # A Pod whose record its node agent could not land is charged by that node's ledger and
    # listed beside it: read the listed record, as the verdict driver does, so its cards count
    # once and the Pod is no promise forever.
    pods = with_unrecorded(
        related.of(POD, CORE_V1), [entry for found in devices for entry in found.unrecorded]
    )
    try:
        charged = charged_pods(pods, hostnames, table)
    except ValueError as err:
        raise BadRequest(f"$.related['{POD}.{CORE_V1}']", str(err)) from None
    workloads = related.of(WORKLOAD, KUEUE_API)
    for obj in workloads:
        # Read here so a malformed one is named as the related object it is; the verdict
        # reads it again, which costs little next to the Devices.
        try:
            workload_shares(obj, table)
        except ValueError as err:
            raise _bad(err, object_path("related", obj)) from None
    return Snapshot(flavors, devices, hostnames, workloads, charged)


def judge_request(body: Any, table: ManufacturerTable) -> Obj:
    valid = validate(body, JUDGE_REQUEST_SCHEMA)
    inputs = snapshot(ObjectMap.parse(valid.get("related")), table)
    try:
        verdict = judge(valid["workload"], inputs, table, valid.get("check", NODE_DEVICES_CHECK))
    except ValueError as err:
        # Other Workloads are read too; their paths look alike, so name the request part.
        raise _bad(err, "$.workload") from None
    return {"state": str(verdict.state), "message": verdict.message}
