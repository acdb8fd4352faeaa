"""The planner's admission step: what the webhooks and the per-card check make of the snapshot's
Pods and Workloads, given the pools the planner computed.

- Every Instance goes through the Instance webhooks (its defaults, then the rules), with the
  instance catalog built from the planned InstanceTypes.
- Every Pod goes through the Pod webhook (fold, defaults, request rules), with a pool catalog
  built from the planned InstanceTypes (stamped as the InstanceType webhook would stamp them):
  the snapshot's Pods, and the Pods the planned Instances would run as.
- Every Workload goes through the Workload webhook (the fit pin) and, when it carries Kueue's
  admission (a snapshot taken from a live cluster), through the per-card verdict, with the planned
  flavors and the snapshot's Devices, Nodes, Workloads and Pods as the related objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chain.apis import CHAIN_API, INSTANCE_TYPE, RESOURCE_FLAVOR, SETTINGS, WORKLOAD
from chain.devices import DEVICES_KIND
from chain.instances import INSTANCE, instance_catalog, parse_instance_catalog
from chain.manufacturers import ManufacturerTable
from hooks.admission.instances import validate_instances
from hooks.admission.judge import judge_request
from hooks.admission.pods import mutate_pods
from hooks.admission.pool_catalog import Catalog, parse_catalog
from hooks.admission.workloads import mutate_workloads
from hooks.admissionreview import unreadable
from hooks.catalog_file import catalog_settings
from hooks.instancetype.webhook import desired_labels
from hooks.plan import of_kind
from hooks.request import BadRequest, Obj

RELATED_KINDS = (RESOURCE_FLAVOR, DEVICES_KIND, "Node", WORKLOAD, "Pod")


def catalog(planned: list[Obj]) -> Catalog:
    """The pool catalog the webhooks would read, from the planned InstanceTypes and Settings."""
    settings = [o for o in of_kind(planned, SETTINGS) if o.get("apiVersion") == CHAIN_API]
    aware = catalog_settings({"items": settings}).instance_type_aware_cpu_manufacturer
    items: list[Obj] = []
    for obj in of_kind(planned, INSTANCE_TYPE):
        meta = dict(obj["metadata"])
        meta["labels"] = desired_labels(
            meta["name"], obj.get("spec") or {}, meta.get("labels") or {}, aware
        )
        items.append({**obj, "metadata": meta})
    return parse_catalog({"items": items + settings})


def _review(obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"plan-{meta.get('namespace', '')}-{meta['name']}",
            "operation": "CREATE",
            "namespace": meta.get("namespace", ""),
            "object": obj,
        },
    }


def _related(objects: list[Obj]) -> dict[str, dict[str, Obj]]:
    related: dict[str, dict[str, Obj]] = {}
    for obj in objects:
        if obj.get("kind") in RELATED_KINDS:
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            related.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[key] = obj
    return related


def _response(decide: Callable[[Obj], Obj], review: Obj) -> dict[str, Any]:
    """The response a served webhook gives `review`: one it cannot read is refused naming the
    field (as `hooks.transport.make_app` does), so a snapshot holding such an object
    shows its refusal instead of stopping the plan."""
    try:
        response: dict[str, Any] = decide(review)["response"]
    except BadRequest as err:
        response = unreadable(review["request"]["uid"], err.field, err.message)["response"]
    return response


def admission(snapshot: list[Obj], planned: list[Obj], table: ManufacturerTable) -> list[Obj]:
    """One result per Instance, Pod and Workload of the snapshot (and per Pod its Instances
    would run as), in snapshot order."""
    pools = catalog(planned)
    types = parse_instance_catalog(instance_catalog(of_kind(planned, INSTANCE_TYPE)))
    results: list[Obj] = []
    response: dict[str, Any]
    refused: set[tuple[str | None, str]] = set()
    for instance in of_kind(snapshot, INSTANCE):
        response = _response(lambda r: validate_instances(r, types, table), _review(instance))
        results.append(_result(instance, response, "defaulted"))
        if not response.get("allowed"):  # such an Instance is never stored: it runs no Pod
            refused.add((instance["metadata"].get("namespace"), instance["metadata"]["name"]))
    seen = {
        (p["metadata"].get("namespace"), p["metadata"]["name"]) for p in of_kind(snapshot, "Pod")
    }
    instance_pods = [
        pod
        for pod in of_kind(planned, "Pod")
        if (pod["metadata"].get("namespace"), pod["metadata"]["name"]) not in seen | refused
    ]
    for pod in [*of_kind(snapshot, "Pod"), *instance_pods]:
        response = _response(lambda r: mutate_pods(r, pools, table), _review(pod))
        results.append(_result(pod, response, "folded"))
    related = _related([*of_kind(planned, RESOURCE_FLAVOR), *snapshot])
    for workload in of_kind(snapshot, WORKLOAD):
        response = _response(lambda r: mutate_workloads(r, pools, table), _review(workload))
        result = _result(workload, response, "pinned")
        if (workload.get("status") or {}).get("admission"):
            result["verdict"] = judge_request({"workload": workload, "related": related}, table)
        results.append(result)
    return results


def _result(obj: Obj, response: dict[str, Any], patched: str) -> Obj:
    meta = obj["metadata"]
    return {
        "kind": obj["kind"],
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "allowed": bool(response.get("allowed")),
        "message": (response.get("status") or {}).get("message", ""),
        patched: bool(response.get("patch")),
    }


def admission_table(results: list[Obj]) -> str:
    """The admission results as a table (empty when the snapshot has no Pods or Workloads)."""
    if not results:
        return ""
    lines = ["", "Admission (webhooks and the per-card check)"]
    for r in results:
        where = f"{r['namespace']}/{r['name']}" if r["namespace"] else r["name"]
        if not r["allowed"]:
            outcome = f"denied: {r['message']}"
        elif "verdict" in r:
            outcome = f"{r['verdict']['state']}: {r['verdict']['message']}"
        else:
            changed = r.get("folded") or r.get("pinned")
            outcome = "admitted, " + ("mutated" if changed else "unchanged")
        lines.append(f"  {r['kind']:9} {where:40} {outcome}")
    return "\n".join(lines) + "\n"
