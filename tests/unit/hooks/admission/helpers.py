"""AdmissionReview bodies, a pool catalog and a client for the admission app."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from flask.testing import FlaskClient

from chain.manufacturers import manufacturers
from chain.names import local_queue_name
from hooks.admission.app import create_app
from hooks.admission.pool_catalog import Catalog, parse_catalog

TABLE = manufacturers({})
T4 = "gpustack--nvidia-t4-linux-amd64"
QUEUE = local_queue_name(T4)
GPU = "nvidia.com/gpu"


def instance_type(
    name: str = T4,
    group: str = "nvidia-t4",
    memory: str | None = "40Gi",
    profiles: dict[str, int] | None = None,
) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if memory is not None:
        detail = {"manufacturer": "nvidia", "memory": memory}
        physical = [{"name": k, "count": 1, "memoryMib": v} for k, v in (profiles or {}).items()]
        detail["slicedDetail"] = {"physical": {"count": len(physical), "profiles": physical}}
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {
            "name": name,
            "labels": {"schedule.gpustack.ai/queue-entrance": local_queue_name(name)},
        },
        "spec": {"acceleratable": True, "acceleratorGroup": group},
        "status": {"detail": detail},
    }


def catalog(*items: dict[str, Any]) -> Catalog:
    return parse_catalog({"apiVersion": "v1", "kind": "List", "items": list(items)})


CATALOG = catalog(instance_type())


def client(source: Catalog = CATALOG) -> FlaskClient:
    return create_app(lambda: source, TABLE).test_client()


def review(
    obj: Any,
    operation: str = "CREATE",
    old: Any = None,
    resource: str = "pods",
    namespace: str = "team-a",
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "resource": {"group": "", "version": "v1", "resource": resource},
            "namespace": namespace,
            "operation": operation,
            "object": obj,
            "oldObject": old,
        },
    }


def post(web: FlaskClient, path: str, body: Any) -> tuple[int, Any]:
    reply = web.post(path, data=json.dumps(body), content_type="application/json")
    return reply.status_code, reply.get_json(silent=True)


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the response's JSONPatch applied (only the `add` operations we emit)."""
    out = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(response.get("patch", "W10="))):
        assert op["op"] == "add", op
        parts = op["path"].strip("/").split("/")
        target: Any = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[parts[-1]] = op["value"]
    return out
