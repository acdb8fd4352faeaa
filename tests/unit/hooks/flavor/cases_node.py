"""Fixture cases of the Node decorator (`/node/sync`, `/node/customize`).

Inputs are realistic request bodies (`builders.cluster`); every expectation is a literal taken
from docs/design/ (the vectors in docs/design/vectors.md), never computed by the code under test.
"""

from __future__ import annotations

from typing import Any

from builders.cluster import (
    CARD_MODELS,
    CPU_MODELS,
    NODE_CONTROLLER,
    CpuModel,
    node_request,
    served_node,
    settings_object,
)

Case = dict[str, Any]

PROFILE = "fnv64-87bf574bea2a4f23"
RACK = "cloud.provider.com/topology-rack"
RACK_LEVELS = [RACK, "kubernetes.io/hostname"]
RACK_PROFILE = "fnv64-58d7a1ce21b8b67c"
"""FNV-1a 64 of the rack key, NUL, the hostname key (worked out apart from the code)."""
G = "general.feature.gpustack.ai/"
A = "acceleratable.feature.gpustack.ai/"
NF = "NodeFlavors.gpustack.ai/v1alpha1"
SETTINGS_KEY = "$.related['Settings.gpustack.ai/v1alpha1']['default']"

EPYC_7763 = CPU_MODELS[0]
AMD_25_1 = CPU_MODELS[6]  # NFD could not resolve the model name: key from family-id
T4 = CARD_MODELS[0]

CPU_DETAIL = {
    "threadsPerPhysicalCore": "2",
    "stepping": "1",
    "clockSpeed": "2450000000",
    "maxClockSpeed": "3500000000",
    "cacheLine": "64",
    "cacheL1i": "32768",
    "cacheL1d": "32768",
    "cacheL2": "524288",
    "cacheL3": "268435456",
}


def _cpu(model: CpuModel, product: str) -> dict[str, str]:
    facts = {"manufacturer": model.vendor.lower(), "family": model.family, **CPU_DETAIL}
    if product:
        facts["product"] = product
    facts["physicalCores"] = str(model.cores // 2)
    facts["logicalCores"] = str(model.cores)
    return facts


def _summary(node: str, acceleratable: bool, cpu: dict[str, str], flavors: list[Any]) -> Any:
    return {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "NodeFlavors",
        "metadata": {"name": node, "labels": {"resource.gpustack.ai/type": "nodeflavors"}},
        "spec": {"node": node, "acceleratable": acceleratable, "cpu": cpu, "flavors": flavors},
    }


CPU_ONLY_LABELS = {
    "gpustack.ai/managed": "true",
    G + "amd": "true",
    G + "amd-25-1": "true",
    G + "amd-25-1.count": "16",
    "topology.gpustack.ai/profile": PROFILE,
    "feature.gpustack.ai/acceleratable": "false",
}
CPU_ONLY_SUMMARY = _summary(
    "cpu-16",
    False,
    _cpu(AMD_25_1, ""),
    [
        {
            "name": "gpustack--amd-25-1-linux-amd64-16c",
            "generalKey": "amd-25-1",
            "os": "linux",
            "arch": "amd64",
            "count": 16,
        }
    ],
)
T4_CPU_FLAVOR = {
    "name": "gpustack--amd-epyc-7763-linux-amd64-8c",
    "generalKey": "amd-epyc-7763",
    "os": "linux",
    "arch": "amd64",
    "count": 8,
}
T4_DEVICE_FLAVOR = {
    "name": "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    "generalKey": "amd-epyc-7763",
    "acceleratorKey": "nvidia-tesla-t4",
    "os": "linux",
    "arch": "amd64",
    "count": 2,
    "product": "Tesla-T4",
    "family": "Turing",
    "memory": "15Gi",
    "cores": "2560",
}
T4_LABELS = {
    "gpustack.ai/managed": "true",
    G + "amd": "true",
    G + "amd-epyc-7763": "true",
    G + "amd-epyc-7763.count": "8",
    "topology.gpustack.ai/profile": PROFILE,
}
T4_CPU = _cpu(EPYC_7763, "AMD EPYC 7763 64-Core Processor")


def _t4_node(labels: dict[str, str] | None = None) -> Any:
    return served_node("gpu-t4", EPYC_7763, T4, 2, labels=labels, cores=8)


def _cpu_node(
    labels: dict[str, str] | None = None, cores: int | None = 16, heartbeat: int = 0
) -> Any:
    return served_node("cpu-16", AMD_25_1, labels=labels, cores=cores, heartbeat=heartbeat)


def _sync(description: str, request: Any, **expect: Any) -> Case:
    return {"description": description, "path": "/node/sync", "request": request, **expect}


def _error(description: str, request: Any, field: str | None, path: str = "/node/sync") -> Case:
    case: Case = {"description": description, "path": path, "status": 400}
    if isinstance(request, str):
        case["rawRequest"] = request
    else:
        case["request"] = request
    if field is not None:
        case["errorField"] = field
    return case


def _without_cpu_capacity() -> Any:
    node = _cpu_node(labels={G + "amd-25-1.count": "16"})
    del node["status"]["capacity"]["cpu"]
    return node


def _bad_capacity() -> Any:
    node = _cpu_node()
    node["status"]["capacity"]["cpu"] = "lots"
    return node


def _nameless() -> Any:
    request = node_request(_cpu_node())
    del request["object"]["metadata"]["name"]
    return request


def _zero_cards() -> Any:
    node = _t4_node()
    node["metadata"]["labels"][A + "nvidia-tesla-t4.count"] = "0"
    return node


def _finalizing() -> Any:
    request = node_request(_cpu_node(labels=CPU_ONLY_LABELS))
    request["finalizing"] = True
    return request


T4_ANSWER = {
    "labels": T4_LABELS,
    "attachments": [_summary("gpu-t4", True, T4_CPU, [T4_CPU_FLAVOR, T4_DEVICE_FLAVOR])],
}
"""The T4 node's answer in the hostname-only profile."""


def _rack_summary() -> Any:
    summary = _summary("gpu-t4", True, T4_CPU, [T4_CPU_FLAVOR, T4_DEVICE_FLAVOR])
    spec = summary["spec"]
    summary["spec"] = {**{k: spec[k] for k in ("node", "acceleratable", "cpu")}}
    summary["spec"]["levels"] = RACK_LEVELS
    summary["spec"]["flavors"] = spec["flavors"]
    return summary


CASES: dict[str, Case] = {
    "node-customize": {
        "description": "the Node decorator relates only the Settings singleton",
        "path": "/node/customize",
        "request": {"controller": NODE_CONTROLLER, "parent": _cpu_node()},
        "response": {
            "relatedResources": [
                {"apiVersion": "gpustack.ai/v1alpha1", "resource": "settings", "names": ["default"]}
            ]
        },
    },
    "node-cpu-only-16c": _sync(
        "vectors 'CPU capacity labels': 16 cores, AMD family 25 id 1, first sync, no Settings",
        node_request(_cpu_node()),
        response={"labels": CPU_ONLY_LABELS, "attachments": [CPU_ONLY_SUMMARY]},
    ),
    "node-cpu-only-16c-resync": _sync(
        "the same node after a heartbeat with our labels on it: the same answer",
        node_request(_cpu_node(labels=CPU_ONLY_LABELS, heartbeat=977), settings_object()),
        response={"labels": CPU_ONLY_LABELS, "attachments": [CPU_ONLY_SUMMARY]},
    ),
    "node-cpu-only-8c": _sync(
        "vectors 'Flavors': CPU-only node amd-25-1 with 8 cores",
        node_request(_cpu_node(cores=8)),
        attachments={
            "NodeFlavors/cpu-16": {
                "spec": {
                    "flavors": [
                        {
                            "name": "gpustack--amd-25-1-linux-amd64-8c",
                            "generalKey": "amd-25-1",
                            "os": "linux",
                            "arch": "amd64",
                            "count": 8,
                        }
                    ]
                }
            }
        },
    ),
    "node-epyc-2xt4": _sync(
        "vectors 'Flavors': amd-epyc-7763 with 2 x nvidia-tesla-t4 -> CPU and device flavor",
        node_request(_t4_node()),
        response=T4_ANSWER,
    ),
    "node-epyc-2xt4-mixed-off": _sync(
        "instance-type-mixed-on-node=false: an accelerated node feeds no CPU flavor",
        node_request(_t4_node(), settings_object({"instance-type-mixed-on-node": False})),
        response={
            "labels": T4_LABELS,
            "attachments": [_summary("gpu-t4", True, T4_CPU, [T4_DEVICE_FLAVOR])],
        },
    ),
    "node-cpu-only-mixed-off": _sync(
        "mixed=false (spelled as a string): a CPU-only node still feeds its CPU flavor",
        node_request(_cpu_node(), settings_object({"instance-type-mixed-on-node": "false"})),
        response={"labels": CPU_ONLY_LABELS, "attachments": [CPU_ONLY_SUMMARY]},
    ),
    "node-manual-unlabelled": _sync(
        "vectors: manual mode and no label -> no managed key, no summary",
        node_request(_cpu_node(), settings_object({"node-management-manual": True})),
        response={
            "labels": {k: v for k, v in CPU_ONLY_LABELS.items() if k != "gpustack.ai/managed"},
            "attachments": [],
        },
    ),
    "node-manual-admin-managed": _sync(
        "manual mode, the admin labelled the node managed: it is summarised",
        node_request(
            _cpu_node(labels={"gpustack.ai/managed": "true"}),
            settings_object({"node-management-manual": True}),
        ),
        response={"labels": CPU_ONLY_LABELS, "attachments": [CPU_ONLY_SUMMARY]},
    ),
    "node-managed-false": _sync(
        "vectors: node label gpustack.ai/managed=false stays false; the node feeds no pool",
        node_request(_cpu_node(labels={"gpustack.ai/managed": "false"})),
        response={
            "labels": {**CPU_ONLY_LABELS, "gpustack.ai/managed": "false"},
            "attachments": [],
        },
    ),
    "node-stale-cpu-key": _sync(
        "NFD resolved the CPU name after the first sync: the old key's labels are nulled",
        node_request(
            _t4_node(
                {
                    G + "amd-25-1": "true",
                    G + "amd-25-1.count": "8",
                    G + "amd": "true",
                    "gpustack.ai/managed": "true",
                }
            )
        ),
        labels={**T4_LABELS, G + "amd-25-1": None, G + "amd-25-1.count": None},
        attachmentNames={"NodeFlavors": ["gpu-t4"]},
    ),
    "node-no-cpu-capacity": _sync(
        "no CPU capacity reported: no count label (the stale one is nulled) and no CPU flavor",
        node_request(_without_cpu_capacity()),
        response={
            "labels": {k: v for k, v in CPU_ONLY_LABELS.items() if k != G + "amd-25-1.count"}
            | {G + "amd-25-1.count": None},
            "attachments": [],
        },
    ),
    "node-zero-cards": _sync(
        "a card model whose .count is 0 feeds no device flavor",
        node_request(_zero_cards()),
        response={
            "labels": T4_LABELS,
            "attachments": [_summary("gpu-t4", True, T4_CPU, [T4_CPU_FLAVOR])],
        },
    ),
    "node-finalizing": _sync(
        "finalize: the summary goes, the labels stay",
        _finalizing(),
        response={"labels": {}, "attachments": [], "finalized": True},
    ),
    "node-rack-profile": _sync(
        "topology-levels names a rack level and the node carries the rack label: the node is in"
        " the rack profile (its label) and its summary names the levels",
        node_request(_t4_node({RACK: "rack-1"}), settings_object({"topology-levels": RACK_LEVELS})),
        response={
            "labels": {**T4_LABELS, "topology.gpustack.ai/profile": RACK_PROFILE},
            "attachments": [_rack_summary()],
        },
    ),
    "node-rack-profile-level-missing": _sync(
        "topology-levels names a rack level the node has no label for: Kueue would leave it out"
        " of a rack flavor, so it stays in the hostname-only profile, as if nothing were set",
        node_request(_t4_node(), settings_object({"topology-levels": RACK_LEVELS})),
        response=T4_ANSWER,
    ),
    "node-rack-profile-empty-value": _sync(
        "a rack label with an empty value is present, as Kueue counts it: the rack profile",
        node_request(_t4_node({RACK: ""}), settings_object({"topology-levels": RACK_LEVELS})),
        labels={**T4_LABELS, "topology.gpustack.ai/profile": RACK_PROFILE},
        attachmentNames={"NodeFlavors": ["gpu-t4"]},
    ),
    "node-error-topology-levels-no-hostname": _error(
        "topology-levels must end with the hostname level (the per-card check judges nodes)",
        node_request(_cpu_node(), settings_object({"topology-levels": [RACK]})),
        SETTINGS_KEY + ".spec.topology-levels",
    ),
    "node-error-topology-levels-bad-key": _error(
        "a level that is not a label key is refused, naming its index",
        node_request(
            _cpu_node(),
            settings_object({"topology-levels": ["rack id", "kubernetes.io/hostname"]}),
        ),
        SETTINGS_KEY + ".spec.topology-levels[0]",
    ),
    "node-error-not-json": _error("a body that is not JSON", "this is not json", None),
    "node-error-truncated": _error(
        "a truncated body", '{"controller": {"kind": "DecoratorController"}, "object": {"api', None
    ),
    "node-error-no-object": _error(
        "a request without `object`",
        {"controller": NODE_CONTROLLER, "attachments": {}, "related": {}},
        "$",
    ),
    "node-error-no-name": _error(
        "an object without metadata.name", _nameless(), "$.object.metadata"
    ),
    "node-error-attachments-list": _error(
        "attachments must be a map",
        {**node_request(_cpu_node()), "attachments": []},
        "$.attachments",
    ),
    "node-error-bad-setting": _error(
        "a settings value that is not a boolean",
        node_request(_cpu_node(), settings_object({"node-management-manual": "maybe"})),
        SETTINGS_KEY + ".spec.node-management-manual",
    ),
    "node-error-unknown-setting": _error(
        "a misspelt setting",
        node_request(_cpu_node(), settings_object({"workload-fit-afinity": False})),
        SETTINGS_KEY + ".spec.workload-fit-afinity",
    ),
    "node-error-bad-capacity": _error(
        "status.capacity.cpu is not a quantity",
        node_request(_bad_capacity()),
        "$.object.status.capacity.cpu",
    ),
    "node-error-not-a-node": _error(
        "the target is not a Node",
        node_request({**_cpu_node(), "kind": "Pod"}),
        "$.object.kind",
    ),
    "node-customize-error-no-parent": _error(
        "customize without `parent`", {"controller": NODE_CONTROLLER}, "$", "/node/customize"
    ),
}
