"""Fixture cases of the catalog decorator (`/catalog/sync`, `/catalog/customize`).

Each expected catalog is written out below as the List the webhook must read: the Settings
first, then the InstanceTypes by name, each cut to apiVersion, kind, name, the entrance label,
`spec.acceleratorGroup` and `status.detail`'s manufacturer, memory and partition profiles
(name and memoryMib). The file text is that List as compact JSON with sorted keys.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from builders import hook_reference
from builders.instancetypes import type_spec
from tests.unit.hooks.instancetype.world import (
    WORKER,
    Obj,
    instance_type,
    settings,
    uid,
)

Case = dict[str, Any]

ENTRANCE = "schedule.gpustack.ai/queue-entrance"
A100 = "gpustack--nvidia-a100-sxm4-80gb-linux-amd64"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
IT_GROUP = f"InstanceType.{WORKER}"
KV_GROUP = f"KVCachePool.{WORKER}"
CM_GROUP = "ConfigMap.v1"


def _hook(path: str) -> Obj:
    return hook_reference("gpustack-hook-instancetype", path)


CONTROLLER = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "DecoratorController",
    "metadata": {
        "name": "gpustack-admission-catalog",
        "uid": uid("gpustack-admission-catalog"),
        "resourceVersion": "912",
        "generation": 1,
        "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
    },
    "spec": {
        "resources": [{"apiVersion": "gpustack.ai/v1alpha1", "resource": "settings"}],
        "attachments": [
            {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}
        ],
        "resyncPeriodSeconds": 300,
        "hooks": {"sync": _hook("/catalog/sync"), "customize": _hook("/catalog/customize")},
    },
}

# --- InstanceTypes as served: labels stamped by the defaulting webhook, the status hook's status

VIEWS = {
    "accelerator": {"onceMaxRequest": "2", "remaining": "3", "capacity": "4"},
    "acceleratorShared": {"onceMaxRequest": "2", "remaining": "30", "capacity": "40"},
    "acceleratorSliced": {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"},
    "cpu": {"onceMaxRequest": "16", "remaining": "40", "capacity": "64"},
    "acceleratorSummary": "2/3 2/30 0/0 0/0",
    "cpuSummary": "16/40",
    "phase": "Active",
    "phaseMessage": "Can admit new workloads",
}
A100_PROFILES = [
    {"name": "1g.10gb", "count": 14, "memoryMib": 9728},
    {"name": "3g.40gb", "count": 4, "memoryMib": 40192},
]


def _served(name: str, entrance: str, spec: Obj, detail: Obj) -> Obj:
    obj = instance_type(name, spec, status={**VIEWS, "entrance": entrance, "detail": detail})
    obj["metadata"]["labels"] |= {
        ENTRANCE: entrance,
        "acceleratable.feature.gpustack.ai/" + str(spec.get("acceleratorGroup", "")): "true",
    }
    return obj


A100_TYPE = _served(
    A100,
    "gpustack-fnv64-6355d18d895b5e10",
    type_spec("nvidia-a100-sxm4-80gb", display="A100"),
    {
        "manufacturer": "nvidia",
        "product": "NVIDIA-A100-SXM4-80GB",
        "family": "Ampere",
        "memory": "80Gi",
        "cores": "6912",
        "computeCapability": "8.0",
        "runtimeVersion": "12.8",
        "runtimeVersions": ["12.8"],
        "slicedDetail": {
            "logical": {"count": 0, "coresPercentageOvercommit": 0},
            "physical": {"count": 2, "profiles": A100_PROFILES},
        },
    },
)
T4_TYPE = _served(
    T4,
    "gpustack-fnv64-6b371caa2da0b799",
    type_spec("nvidia-tesla-t4", display="Tesla-T4"),
    {
        "manufacturer": "nvidia",
        "product": "Tesla-T4",
        "family": "Turing",
        "memory": "15Gi",
        "cores": "2560",
        "slicedDetail": {
            "logical": {"count": 512, "coresPercentageOvercommit": 2},
            "physical": {"count": 0, "profiles": []},
        },
    },
)
GENERIC_TYPE = instance_type(
    GENERIC,
    type_spec(display="CPU-only"),
    status={**VIEWS, "entrance": "gpustack-fnv64-3b93966fd73eb9ec", "detail": {}},
)
GENERIC_TYPE["metadata"]["labels"][ENTRANCE] = "gpustack-fnv64-3b93966fd73eb9ec"

# --- what the webhook reads --------------------------------------------------------------------

SETTINGS_ITEM = {
    "apiVersion": "gpustack.ai/v1alpha1",
    "kind": "Settings",
    "metadata": {"name": "default"},
    "spec": {"workload-fit-affinity": False},
}
A100_ITEM = {
    "apiVersion": WORKER,
    "kind": "InstanceType",
    "metadata": {"name": A100, "labels": {ENTRANCE: "gpustack-fnv64-6355d18d895b5e10"}},
    "spec": {"acceleratorGroup": "nvidia-a100-sxm4-80gb"},
    "status": {
        "detail": {
            "manufacturer": "nvidia",
            "memory": "80Gi",
            "slicedDetail": {
                "physical": {
                    "profiles": [
                        {"name": "1g.10gb", "memoryMib": 9728},
                        {"name": "3g.40gb", "memoryMib": 40192},
                    ]
                }
            },
        }
    },
}
T4_ITEM = {
    "apiVersion": WORKER,
    "kind": "InstanceType",
    "metadata": {"name": T4, "labels": {ENTRANCE: "gpustack-fnv64-6b371caa2da0b799"}},
    "spec": {"acceleratorGroup": "nvidia-tesla-t4"},
    "status": {
        "detail": {
            "manufacturer": "nvidia",
            "memory": "15Gi",
            "slicedDetail": {"physical": {"profiles": []}},
        }
    },
}
GENERIC_ITEM = {
    "apiVersion": WORKER,
    "kind": "InstanceType",
    "metadata": {"name": GENERIC, "labels": {ENTRANCE: "gpustack-fnv64-3b93966fd73eb9ec"}},
    "spec": {},
    "status": {"detail": {}},
}


def _configmap(*items: Obj) -> Obj:
    document = {"apiVersion": "v1", "kind": "List", "items": list(items)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpustack-admission-catalog",
            "namespace": "gpustack-system",
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
        },
        "data": {"catalog.yaml": json.dumps(document, sort_keys=True, separators=(",", ":"))},
    }


def _instances(rows: Obj) -> Obj:
    """The instance catalog ConfigMap: each type's row (group, unit CPU, unit RAM, local
    storage, card capacity, CPU capacity, logical slices, partition profiles, reported)."""
    text = json.dumps({"types": rows}, sort_keys=True, separators=(",", ":"))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpustack-instance-catalog",
            "namespace": "gpustack-system",
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
        },
        "data": {"instances.json": text},
    }


def _kvcache(rows: Obj) -> Obj:
    """The KV cache catalog ConfigMap: each pool's endpoint and member groups' transports."""
    text = json.dumps({"pools": rows}, sort_keys=True, separators=(",", ":"))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpustack-kvcache-catalog",
            "namespace": "gpustack-system",
            "labels": {"app.kubernetes.io/part-of": "gpustack-chain"},
        },
        "data": {"pools.json": text},
    }


def _observed(configmap: Obj) -> Obj:
    """The ConfigMap as Metacontroller reads it back: server metadata, owner, its annotations."""
    observed = copy.deepcopy(configmap)
    observed["metadata"] |= {
        "uid": uid("catalog"),
        "resourceVersion": "40410",
        "creationTimestamp": "2026-11-30T05:01:00Z",
        "annotations": {
            "metacontroller.k8s.io/decorator-controller": "gpustack-admission-catalog",
            "metacontroller.k8s.io/last-applied-configuration": json.dumps(configmap),
        },
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
    return observed


def _map(objects: list[Obj]) -> Obj:
    return {
        (f"{o['metadata']['namespace']}/" if "namespace" in o["metadata"] else "")
        + o["metadata"]["name"]: copy.deepcopy(o)
        for o in objects
    }


def request(
    parent: Obj,
    types: list[Obj],
    attached: list[Obj] | None = None,
    kv_pools: list[Obj] | None = None,
) -> Obj:
    """As Metacontroller sends it: one related map per kind the rule relates, empty or not."""
    return {
        "controller": CONTROLLER,
        "object": copy.deepcopy(parent),
        "attachments": {CM_GROUP: _map(attached or [])},
        "related": {IT_GROUP: _map(types), KV_GROUP: _map(kv_pools or [])},
        "finalizing": False,
    }


def _sync(description: str, body: Obj, expected: Obj) -> Case:
    return {
        "description": description,
        "path": "/catalog/sync",
        "request": body,
        "response": expected,
    }


def _error(description: str, path: str, body: Any, field: str) -> Case:
    return {
        "description": description,
        "path": path,
        "request": body,
        "status": 400,
        "errorField": field,
    }


def _with_logical_count(obj: Obj, count: Any) -> Obj:
    """`obj` with its pool's logical slice count replaced by `count`."""
    changed = copy.deepcopy(obj)
    changed["status"]["detail"]["slicedDetail"]["logical"]["count"] = count
    return changed


SINGLETON = settings(workload_fit_affinity=False)
OTHER = copy.deepcopy(SINGLETON)
OTHER["metadata"]["name"] = "staging"
CATALOG = _configmap(SETTINGS_ITEM, GENERIC_ITEM, A100_ITEM, T4_ITEM)
INSTANCE_CATALOG = _instances(
    {
        A100: [
            "nvidia-a100-sxm4-80gb",
            "8",
            "32Gi",
            "100Gi",
            4,
            "64",
            0,
            ["1g.10gb", "3g.40gb"],
            True,
        ],
        GENERIC: ["", "1", "2Gi", "100Gi", 4, "64", 0, [], False],
        T4: ["nvidia-tesla-t4", "8", "32Gi", "100Gi", 4, "64", 512, [], True],
    }
)
ONLY_SETTINGS = {**copy.deepcopy(SINGLETON), "spec": {}}
DRAM_POOL: Obj = {
    "apiVersion": WORKER,
    "kind": "KVCachePool",
    "metadata": {"name": "dram", "uid": "kv-dram-uid", "resourceVersion": "7"},
    "spec": {
        "endpoint": "10.0.0.5:50051",
        "groups": [
            {"name": "host-a", "transport": "rdma"},
            {"name": "host-b", "transport": "rdma"},
        ],
    },
}

CASES: dict[str, Case] = {
    "catalog-three-pools": _sync(
        "Three pools, related in no particular order: the Settings, then the types by name, each "
        "cut to what the Pod fold reads (no views, no other labels, no other spec); the "
        "ConfigMap is answered again unchanged while it is attached; beside it the instance "
        "catalog, one row per type, and the KV cache catalog, one row per KVCachePool.",
        request(SINGLETON, [T4_TYPE, A100_TYPE, GENERIC_TYPE], [_observed(CATALOG)], [DRAM_POOL]),
        {
            "attachments": [
                CATALOG,
                INSTANCE_CATALOG,
                _kvcache({"dram": ["10.0.0.5:50051", ["rdma", "rdma"]]}),
            ]
        },
    ),
    "catalog-no-instance-types": _sync(
        "No InstanceType yet: the catalog holds the Settings alone (the webhook then admits "
        "whole cards and percentage slices, and refuses memory sizes as not known yet).",
        request(ONLY_SETTINGS, []),
        {
            "attachments": [
                _configmap({**SETTINGS_ITEM, "spec": {}}),
                _instances({}),
                _kvcache({}),
            ]
        },
    ),
    "catalog-other-settings": _sync(
        "A Settings object other than the singleton owns no catalog.",
        request(OTHER, [T4_TYPE]),
        {"attachments": []},
    ),
    "catalog-customize": {
        "description": "Every InstanceType is related; nothing of the parent is read.",
        "path": "/catalog/customize",
        "request": {"controller": CONTROLLER, "parent": copy.deepcopy(SINGLETON)},
        "response": {
            "relatedResources": [
                {"apiVersion": WORKER, "resource": "instancetypes"},
                {"apiVersion": WORKER, "resource": "kvcachepools"},
            ]
        },
    },
    "catalog-error-parent-kind": _error(
        "The parent must be the Settings singleton.",
        "/catalog/sync",
        request(T4_TYPE, []),
        "$.object.kind",
    ),
    "catalog-error-setting": _error(
        "A Settings spec the chain cannot read is refused, naming the setting; the last catalog "
        "stays.",
        "/catalog/sync",
        request(settings(workload_fit_affinity="yes"), [T4_TYPE]),
        "$.object.spec.workload-fit-affinity",
    ),
    "catalog-error-related-not-object": _error(
        "A related entry that is not an object.",
        "/catalog/sync",
        {**request(SINGLETON, []), "related": {IT_GROUP: {T4: "not an object"}}},
        f"$.related['{IT_GROUP}']['{T4}']",
    ),
    "catalog-error-related-without-name": _error(
        "A related InstanceType without metadata.name.",
        "/catalog/sync",
        {
            **request(SINGLETON, []),
            "related": {
                IT_GROUP: {T4: {"apiVersion": WORKER, "kind": "InstanceType", "metadata": {}}}
            },
        },
        f"$.related['{IT_GROUP}']['{T4}'].metadata.name",
    ),
    # The fuzz suite's finding: a related InstanceType whose `spec` or `status` is not an object
    # (or whose count is not an integer) was a 500 from the instance catalog's reader.
    "catalog-error-related-spec-not-object": _error(
        "A related InstanceType whose spec is not an object is refused, naming it; the last "
        "catalogs stay.",
        "/catalog/sync",
        request(SINGLETON, [A100_TYPE, {**T4_TYPE, "spec": 7}]),
        f"$.related['{IT_GROUP}']['{T4}'].spec",
    ),
    "catalog-error-related-status-not-object": _error(
        "A related InstanceType whose status is not an object is refused, naming it.",
        "/catalog/sync",
        request(SINGLETON, [{**T4_TYPE, "status": True}]),
        f"$.related['{IT_GROUP}']['{T4}'].status",
    ),
    "catalog-error-related-slice-count": _error(
        "A related InstanceType whose logical slice count is not an integer is refused, naming it.",
        "/catalog/sync",
        request(SINGLETON, [_with_logical_count(T4_TYPE, "many")]),
        f"$.related['{IT_GROUP}']['{T4}'].status.detail.slicedDetail.logical.count",
    ),
    "catalog-error-no-object": _error(
        "A sync request without the parent object.",
        "/catalog/sync",
        {"controller": CONTROLLER, "attachments": {}, "related": {}},
        "$",
    ),
    "catalog-error-customize-no-parent": _error(
        "A customize request without the parent.",
        "/catalog/customize",
        {"controller": CONTROLLER},
        "$",
    ),
}
