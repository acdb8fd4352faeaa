"""Every admission webhook of the chain, each with a review it admits and the field a bad value
is put into: shared by the bad-value tests (`test_webhook_unreadable.py`) and the fuzz suite."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from flask import Flask

from hooks.admission.app import create_app
from hooks.instancetype.app import app as instancetype_app
from tests.unit.hooks.admission.helpers import CATALOG, GPU, QUEUE, TABLE, review
from tests.unit.hooks.admission.test_instances import TYPES, instance
from tests.unit.hooks.admission.test_kvcache import POOLS
from tests.unit.hooks.admission.test_kvcache import pod as kvcache_pod
from tests.unit.hooks.admission.test_workloads import workload
from tests.unit.hooks.instancetype.test_webhook import T4_SPEC

ADMISSION = create_app(lambda: CATALOG, TABLE, types=lambda: TYPES, kvcache=lambda: POOLS)
SL = GPU + ".sliced"
Path = tuple[str | int, ...]


def _pod(limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
    }


def _job(limits: dict[str, str]) -> dict[str, Any]:
    pod = _pod(limits)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "labels": dict(pod["metadata"]["labels"])},
        "spec": {"template": {"metadata": {}, "spec": pod["spec"]}},
    }


def _instance_type(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "gpustack--nvidia-tesla-t4-linux-amd64"},
        "spec": spec,
    }


@dataclass(frozen=True)
class Webhook:
    """One webhook route: `obj` is admitted as it is; each of `bad` put at `path` (keys into the
    object) is refused naming `field`."""

    app: Flask
    route: str
    resource: str
    obj: dict[str, Any]
    path: Path
    field: str
    bad: tuple[Any, ...]
    """Values refused at `path`."""

    def body(self, value: Any = None, operation: str = "CREATE") -> dict[str, Any]:
        """The review of the object, with `value` at `path` when one is given."""
        obj = copy.deepcopy(self.obj)
        if value is not None:
            target: Any = obj
            for key in self.path[:-1]:
                target = target[key]
            target[self.path[-1]] = value
        return review(obj, operation, resource=self.resource)


_POD_LIMIT: Path = ("spec", "containers", 0, "resources", "limits", GPU)
_WORKLOAD_SLICE: Path = (
    *("spec", "podSets", 0, "template", "spec", "containers", 0),
    *("resources", "requests", SL),
)

# Quantities no webhook can read: beyond 10^±30 (the API server keeps `10e9999999`), longer than
# any the chain counts, not a quantity, and a JSON list or object where a quantity belongs.
UNREADABLE = ("10e9999999", "1e308", "5E+100000", "1" * 80, "abc", ["1"], {"a": 1})
# Readable, but no card count: negative, fractional, beyond INT32_MAX.
OUT_OF_RANGE = ("-1", "0.5", "9223372036854775808")


def _instance_webhook(route: str) -> Webhook:
    """The defaulting and the validating Instance webhook read the card count alike."""
    return Webhook(
        ADMISSION,
        route,
        "instances",
        instance(accelerator="2"),
        ("spec", "resources", "accelerator"),
        "spec.resources.accelerator",
        UNREADABLE + OUT_OF_RANGE + (7, "²", "9" * 5000),
    )


WEBHOOKS: dict[str, Webhook] = {
    "pods": Webhook(
        ADMISSION,
        "/mutate-pods",
        "pods",
        _pod({GPU: "1"}),
        _POD_LIMIT,
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        UNREADABLE + OUT_OF_RANGE,
    ),
    "jobs": Webhook(
        ADMISSION,
        "/mutate-jobs",
        "jobs",
        _job({GPU: "1"}),
        ("spec", "template", "spec", *_POD_LIMIT[1:]),
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        UNREADABLE + OUT_OF_RANGE,
    ),
    "workloads": Webhook(
        ADMISSION,
        "/mutate-workloads",
        "workloads",
        workload({SL: "1", SL + ".units": "320000"}),
        _WORKLOAD_SLICE,
        "spec.podSets[0].template.spec.containers[0].resources.requests[nvidia.com/gpu.sliced]",
        UNREADABLE,
    ),
    "instances-defaulted": _instance_webhook("/mutate-instances"),
    "instances-validated": _instance_webhook("/validate-instances"),
    "kvcache": Webhook(
        ADMISSION,
        "/mutate-kvcache",
        "pods",
        kvcache_pod(["vllm"], ["serve", "m"]),
        ("spec", "containers"),
        "spec.containers",
        ("10e9999999", {"a": 1}, 7, ["engine"]),
    ),
    "instancetypes-defaulted": Webhook(
        instancetype_app,
        "/mutate",
        "instancetypes",
        _instance_type(T4_SPEC),
        ("spec", "acceleratorGroup"),
        "spec.acceleratorGroup",
        (["x"], {"a": 1}, 7),
    ),
    "instancetypes-validated": Webhook(
        instancetype_app,
        "/validate",
        "instancetypes",
        _instance_type(T4_SPEC),
        ("spec", "unitResources", "cpu"),
        "spec.unitResources.cpu",
        (*UNREADABLE[:5], *OUT_OF_RANGE, "9" * 5000),
    ),
}
