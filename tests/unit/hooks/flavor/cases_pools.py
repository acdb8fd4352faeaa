"""Fixture cases of the pools decorator (`/flavors/sync`, `/flavors/customize`).

The summaries are written out by hand (as the Node decorator would have attached them, with the
server metadata added by `served`), and every expected name, label and size is a literal.
"""

from __future__ import annotations

import copy
from typing import Any

from builders.cluster import POOLS_CONTROLLER, pools_request, served, settings_object

Case = dict[str, Any]

PROFILE = "fnv64-87bf574bea2a4f23"
TOPOLOGY = "gpustack-fnv64-87bf574bea2a4f23"
G = "general.feature.gpustack.ai/"
A = "acceleratable.feature.gpustack.ai/"
N = "note.gpustack.ai/"
NF = "$.related['NodeFlavors.gpustack.ai/v1alpha1']"
ABSENT = "<absent>"

EPYC_7763_CPU = {
    "manufacturer": "amd",
    "product": "AMD EPYC 7763 64-Core Processor",
    "family": "25",
    "physicalCores": "64",
    "logicalCores": "128",
    "cacheL3": "268435456",
}
EPYC_7R13_CPU = {"manufacturer": "amd", "product": "AMD EPYC 7R13 Processor", "family": "25"}
XEON_8259CL_CPU = {
    "manufacturer": "intel",
    "product": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    "family": "6",
}
AMD_25_1_CPU = {"manufacturer": "amd", "family": "25"}


def _flavor(name: str, gkey: str, count: int, akey: str = "", **device: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "generalKey": gkey}
    if akey:
        entry["acceleratorKey"] = akey
    return {**entry, "os": "linux", "arch": "amd64", "count": count, **device}


def summary(node: str, cpu: dict[str, str], *flavors: Any, accelerated: bool = False) -> Any:
    obj = {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "NodeFlavors",
        "metadata": {"name": node, "labels": {"resource.gpustack.ai/type": "nodeflavors"}},
        "spec": {"node": node, "acceleratable": accelerated, "cpu": cpu, "flavors": list(flavors)},
    }
    owner = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    return served(obj, owner)


T4 = {"product": "Tesla-T4", "family": "Turing", "memory": "15Gi", "cores": "2560"}
A10G = {"product": "NVIDIA-A10G", "family": "Ampere", "memory": "22Gi", "cores": "9216"}

EPYC_8C = _flavor("gpustack--amd-epyc-7763-linux-amd64-8c", "amd-epyc-7763", 8)
EPYC_T4_2D = _flavor(
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    "amd-epyc-7763",
    2,
    "nvidia-tesla-t4",
    **T4,
)
XEON_96C = _flavor(
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64-96c", "intel-xeon-platinum-8259cl", 96
)
XEON_T4_1D = _flavor(
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
    "intel-xeon-platinum-8259cl",
    1,
    "nvidia-tesla-t4",
    **T4,
)
R13_96C = _flavor("gpustack--amd-epyc-7r13-linux-amd64-96c", "amd-epyc-7r13", 96)
R13_A10G_1D = _flavor(
    "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d",
    "amd-epyc-7r13",
    1,
    "nvidia-a10g",
    **A10G,
)
GENERIC_16C = _flavor("gpustack--amd-25-1-linux-amd64-16c", "amd-25-1", 16)

# The vectors' cluster: T4 cards 2 + 2 + 1 = 5 (the queue's 8,000,000 credits), one A10G.
CLUSTER = [
    summary("gpu-t4-1", EPYC_7763_CPU, EPYC_8C, EPYC_T4_2D, accelerated=True),
    summary("gpu-t4-2", EPYC_7763_CPU, EPYC_8C, EPYC_T4_2D, accelerated=True),
    summary("gpu-t4-3", XEON_8259CL_CPU, XEON_96C, XEON_T4_1D, accelerated=True),
    summary("gpu-a10g", EPYC_7R13_CPU, R13_96C, R13_A10G_1D, accelerated=True),
    summary("cpu-1", AMD_25_1_CPU, GENERIC_16C),
]
ALL_FLAVORS = [
    "gpustack--amd-25-1-linux-amd64-16c",
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    "gpustack--amd-epyc-7763-linux-amd64-8c",
    "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d",
    "gpustack--amd-epyc-7r13-linux-amd64-96c",
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64-96c",
]
POOLS_AWARE_OFF = [
    "gpustack--generic-linux-amd64",
    "gpustack--nvidia-a10g-linux-amd64",
    "gpustack--nvidia-tesla-t4-linux-amd64",
]

T4_2D_FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {
        "name": "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
        "labels": {
            A + "nvidia-tesla-t4": "true",
            A + "nvidia-tesla-t4.count": "2",
            A + "nvidia-tesla-t4.capacity": "4",
            G + "amd-epyc-7763": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "feature.gpustack.ai/acceleratable": "true",
            "resource.gpustack.ai/type": "nodes",
            "topology.gpustack.ai/profile": PROFILE,
        },
        "annotations": {
            N + "acceleratable": "true",
            N + "generalGroup": "amd-epyc-7763",
            N + "acceleratorGroup": "nvidia-tesla-t4",
            N + "manufacturer": "nvidia",
            N + "product": "Tesla-T4",
            N + "family": "Turing",
            N + "memory": "15Gi",
            N + "cores": "2560",
        },
    },
    "spec": {
        "nodeLabels": {
            "gpustack.ai/managed": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            A + "nvidia-tesla-t4": "true",
            A + "nvidia-tesla-t4.count": "2",
            G + "amd-epyc-7763": "true",
            "topology.gpustack.ai/profile": PROFILE,
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": TOPOLOGY,
    },
}
EPYC_8C_CPU_DETAIL = '{"cache":{"l3":"268435456"},"logicalCores":"128","physicalCores":"64"}'
EPYC_8C_FLAVOR = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ResourceFlavor",
    "metadata": {
        "name": "gpustack--amd-epyc-7763-linux-amd64-8c",
        "labels": {
            G + "amd-epyc-7763": "true",
            G + "amd-epyc-7763.count": "8",
            G + "amd-epyc-7763.capacity": "16",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "feature.gpustack.ai/acceleratable": "false",
            "resource.gpustack.ai/type": "nodes",
            "topology.gpustack.ai/profile": PROFILE,
        },
        "annotations": {
            N + "acceleratable": "false",
            N + "generalGroup": "amd-epyc-7763",
            N + "manufacturer": "amd",
            N + "product": "AMD EPYC 7763 64-Core Processor",
            N + "family": "25",
            N + "cpuDetail": EPYC_8C_CPU_DETAIL,
        },
    },
    "spec": {
        "nodeLabels": {
            "gpustack.ai/managed": "true",
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            G + "amd-epyc-7763": "true",
            G + "amd-epyc-7763.count": "8",
            "topology.gpustack.ai/profile": PROFILE,
        },
        "tolerations": [{"operator": "Exists"}],
        "topologyName": TOPOLOGY,
    },
}
TOPOLOGY_OBJECT = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": {"name": TOPOLOGY, "labels": {"resource.gpustack.ai/type": "topology"}},
    "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
}


def _type(name: str, spec: dict[str, Any]) -> Any:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": {"schedule.gpustack.ai/derived-from-node": "true"}},
        "spec": {"os": "linux", "arch": "amd64", "localStorage": "100Gi", **spec},
    }


def _units(cpu: str, ram: str) -> dict[str, str]:
    return {"cpu": cpu, "ram": ram}


GENERIC_TYPE = _type(
    "gpustack--generic-linux-amd64",
    {
        "generalGroup": "generic",
        "acceleratable": False,
        "displayName": "CPU-only",
        "unitResources": _units("1", "2Gi"),
    },
)
T4_TYPE = _type(
    "gpustack--nvidia-tesla-t4-linux-amd64",
    {
        "generalGroup": "generic",
        "acceleratorGroup": "nvidia-tesla-t4",
        "acceleratable": True,
        "displayName": "Tesla-T4",
        "unitResources": _units("8", "32Gi"),
    },
)
A10G_TYPE = _type(
    "gpustack--nvidia-a10g-linux-amd64",
    {
        "generalGroup": "generic",
        "acceleratorGroup": "nvidia-a10g",
        "acceleratable": True,
        "displayName": "NVIDIA-A10G",
        "unitResources": _units("8", "64Gi"),
    },
)


def _capacity(name: str, key: str, value: str) -> dict[str, Any]:
    return {f"ResourceFlavor/{name}": {"metadata": {"labels": {f"{key}.capacity": value}}}}


def _sync(description: str, request: Any, **expect: Any) -> Case:
    return {"description": description, "path": "/flavors/sync", "request": request, **expect}


def _error(description: str, request: Any, field: str) -> Case:
    return {
        "description": description,
        "path": "/flavors/sync",
        "request": request,
        "status": 400,
        "errorField": field,
    }


def _settings(**spec: Any) -> Any:
    return settings_object({key.replace("_", "-"): value for key, value in spec.items()})


def _edited_a10g_type() -> Any:
    """The A10G type after an admin renamed and resized it, as the server returns it."""
    edited = copy.deepcopy(A10G_TYPE)
    edited["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] = (
        "gpustack-fnv64-c4680bb149644f1c"
    )
    edited["spec"]["displayName"] = "A10G (team ml)"
    edited["spec"]["unitResources"] = _units("6", "48Gi")
    edited["status"] = {"phase": "Active", "entrance": "gpustack-fnv64-c4680bb149644f1c"}
    return edited


def _expected_edited_a10g() -> Any:
    edited = _edited_a10g_type()
    del edited["status"]
    return edited


H100_TYPE = _type(
    "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
    {
        "generalGroup": "generic",
        "acceleratorGroup": "nvidia-h100-80gb-hbm3",
        "acceleratable": True,
        "displayName": "NVIDIA-H100-80GB-HBM3",
        "unitResources": _units("12", "192Gi"),
    },
)


def _preset_cluster() -> list[Any]:
    def card(node: str, akey: str, **device: str) -> Any:
        name = f"gpustack--amd-25-1--{akey}-linux-amd64-8d"
        return summary(
            node, AMD_25_1_CPU, _flavor(name, "amd-25-1", 8, akey, **device), accelerated=True
        )

    return [
        card("p-h100-hbm3", "nvidia-h100-80gb-hbm3", product="NVIDIA-H100-80GB-HBM3"),
        card("p-h100", "nvidia-h100", product="H100"),
        card("p-t4", "nvidia-tesla-t4", product="Tesla-T4"),
        card("p-a100", "nvidia-a100-sxm4-40gb", product="NVIDIA-A100-SXM4-40GB"),
        card("p-unknown", "nvidia-quantum-x", product="NVIDIA-Quantum-X"),
        card("p-brand", "nvidia-nvidia", product="NVIDIA"),
        card("p-bang", "nvidia-bang", product="!!!"),
        card("p-noproduct", "nvidia-mystery"),
        card("p-mi300x", "amd-instinct-mi300x-oam", product="AMD-Instinct-MI300X-OAM"),
    ]


def _preset_type(akey: str, display: str, cpu: str, ram: str) -> Any:
    spec: dict[str, Any] = {
        "generalGroup": "generic",
        "acceleratorGroup": akey,
        "acceleratable": True,
        "unitResources": _units(cpu, ram),
    }
    spec["displayName"] = display or ABSENT
    return {f"InstanceType/gpustack--{akey}-linux-amd64": {"spec": spec}}


def _bad_summary(**change: Any) -> Any:
    bad = copy.deepcopy(CLUSTER[4])
    bad["spec"]["flavors"][0].update(change)
    return pools_request(settings_object(), [*CLUSTER[:4], bad])


def _nameless_summary() -> Any:
    request = pools_request(settings_object(), CLUSTER)
    del request["related"]["NodeFlavors.gpustack.ai/v1alpha1"]["cpu-1"]["metadata"]["name"]
    return request


def _finalizing(attached: list[Any]) -> Any:
    request = pools_request(settings_object(), CLUSTER[4:], attached)
    request["finalizing"] = True
    return request


def _released(obj: Any) -> Any:
    """An object a chain decorator made, released from an earlier singleton (no owner)."""
    released = copy.deepcopy(obj)
    released["metadata"].update(
        uid="released-" + obj["metadata"]["name"][-12:],
        resourceVersion="777",
        annotations={"metacontroller.k8s.io/decorator-controller": "gpustack-flavor-pools"},
    )
    return released


BLOCK_LEVELS = [
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
]
BLOCK_PROFILE = "fnv64-24f66c04b7840361"
"""FNV-1a 64 of the three keys joined by NUL (worked out apart from the code)."""
BLOCK_TOPOLOGY = "gpustack-fnv64-24f66c04b7840361"


def _in_profile(obj: Any, levels: list[str]) -> Any:
    profiled = copy.deepcopy(obj)
    profiled["spec"]["levels"] = levels
    return profiled


def _block_cluster() -> list[Any]:
    """gpu-t4-1 carries the block and rack labels (its summary names the levels); gpu-t4-2,
    the same flavor identity, lacks one and stayed hostname-only."""
    return [_in_profile(CLUSTER[0], BLOCK_LEVELS), *CLUSTER[1:]]


def _in_block_profile(flavor: Any, name: str, capacity: tuple[str, str]) -> Any:
    """`flavor` as the block profile's flavor of that identity: its name, its size over the
    block profile's nodes only, and the profile in its labels, pin and topologyName."""
    profiled = copy.deepcopy(flavor)
    profiled["metadata"]["name"] = name
    profiled["metadata"]["labels"][capacity[0]] = capacity[1]
    for labels in (profiled["metadata"]["labels"], profiled["spec"]["nodeLabels"]):
        labels["topology.gpustack.ai/profile"] = BLOCK_PROFILE
    profiled["spec"]["topologyName"] = BLOCK_TOPOLOGY
    return profiled


T4_2D_BLOCK_FLAVOR = _in_block_profile(
    T4_2D_FLAVOR,
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d-fnv64-24f66c04b7840361",
    (A + "nvidia-tesla-t4.capacity", "2"),
)
BLOCK_TOPOLOGY_OBJECT = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": {"name": BLOCK_TOPOLOGY, "labels": {"resource.gpustack.ai/type": "topology"}},
    "spec": {
        "levels": [
            {"nodeLabel": "cloud.provider.com/topology-block"},
            {"nodeLabel": "cloud.provider.com/topology-rack"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    },
}


CASES: dict[str, Case] = {
    "pools-customize": {
        "description": "the pools decorator relates every NodeFlavors summary",
        "path": "/flavors/customize",
        "request": {"controller": POOLS_CONTROLLER, "parent": settings_object()},
        "response": {
            "relatedResources": [
                {"apiVersion": "gpustack.ai/v1alpha1", "resource": "nodeflavors"},
                {"apiVersion": "worker.gpustack.ai/v1alpha1", "resource": "instancetypes"},
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "resource": "resourceflavors",
                    "labelSelector": {"matchLabels": {"resource.gpustack.ai/type": "nodes"}},
                },
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "resource": "topologies",
                    "labelSelector": {"matchLabels": {"resource.gpustack.ai/type": "topology"}},
                },
            ]
        },
    },
    "pools-aware-off": _sync(
        "vectors 'Queues' (awareness off): generic, nvidia-a10g and nvidia-tesla-t4 pools",
        pools_request(settings_object(), CLUSTER),
        attachmentNames={
            "ResourceFlavor": ALL_FLAVORS,
            "Topology": [TOPOLOGY],
            "InstanceType": POOLS_AWARE_OFF,
        },
        exact={
            "ResourceFlavor/gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d": T4_2D_FLAVOR,
            "ResourceFlavor/gpustack--amd-epyc-7763-linux-amd64-8c": EPYC_8C_FLAVOR,
            f"Topology/{TOPOLOGY}": TOPOLOGY_OBJECT,
            "InstanceType/gpustack--generic-linux-amd64": GENERIC_TYPE,
            "InstanceType/gpustack--nvidia-tesla-t4-linux-amd64": T4_TYPE,
            "InstanceType/gpustack--nvidia-a10g-linux-amd64": A10G_TYPE,
        },
        attachments={
            **_capacity(
                "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
                A + "nvidia-tesla-t4",
                "1",
            ),
            **_capacity(
                "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d", A + "nvidia-a10g", "1"
            ),
            **_capacity("gpustack--amd-25-1-linux-amd64-16c", G + "amd-25-1", "16"),
        },
    ),
    "pools-aware-on": _sync(
        "awareness on: pools split by CPU key; device flavors carry cpuDetail",
        pools_request(_settings(instance_type_aware_cpu_manufacturer=True), CLUSTER),
        attachmentNames={
            "ResourceFlavor": ALL_FLAVORS,
            "Topology": [TOPOLOGY],
            "InstanceType": [
                "gpustack--amd-25-1-linux-amd64",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
                "gpustack--amd-epyc-7763-linux-amd64",
                "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64",
                "gpustack--amd-epyc-7r13-linux-amd64",
                "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64",
                "gpustack--intel-xeon-platinum-8259cl-linux-amd64",
            ],
        },
        attachments={
            "ResourceFlavor/gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d": {
                "metadata": {
                    "annotations": {
                        N + "cpuDetail": (
                            '{"cache":{"l3":"268435456"},"family":"25","logicalCores":"128",'
                            '"manufacturer":"amd","physicalCores":"64",'
                            '"product":"AMD EPYC 7763 64-Core Processor"}'
                        )
                    }
                }
            },
            "InstanceType/gpustack--amd-epyc-7763-linux-amd64": {
                "spec": {
                    "generalGroup": "amd-epyc-7763",
                    "acceleratable": False,
                    "displayName": "AMD EPYC 7763 64-Core Processor",
                    "unitResources": _units("1", "2Gi"),
                    "localStorage": "100Gi",
                }
            },
            "InstanceType/gpustack--amd-25-1-linux-amd64": {
                "spec": {"generalGroup": "amd-25-1", "displayName": ABSENT}
            },
            "InstanceType/gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64": {
                "spec": {
                    "generalGroup": "intel-xeon-platinum-8259cl",
                    "acceleratorGroup": "nvidia-tesla-t4",
                    "acceleratable": True,
                    "displayName": "Tesla-T4",
                    "unitResources": _units("8", "32Gi"),
                }
            },
        },
    ),
    "pools-aware-off-no-cpu-detail-on-devices": _sync(
        "awareness off: device flavors carry no cpuDetail note, CPU flavors always do",
        pools_request(settings_object(), CLUSTER[:1]),
        attachments={
            "ResourceFlavor/gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d": {
                "metadata": {"annotations": {N + "cpuDetail": ABSENT}}
            },
            "ResourceFlavor/gpustack--amd-epyc-7763-linux-amd64-8c": {
                "metadata": {"annotations": {N + "cpuDetail": EPYC_8C_CPU_DETAIL}}
            },
        },
    ),
    "pools-mixed-off": _sync(
        "mixed=false: accelerated nodes' stale CPU flavors are not counted; CPU flavors pin false",
        pools_request(
            _settings(instance_type_mixed_on_node=False),
            [*CLUSTER, summary("cpu-2", EPYC_7763_CPU, EPYC_8C)],
        ),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-25-1-linux-amd64-16c",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                "gpustack--amd-epyc-7763-linux-amd64-8c",
                "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d",
                "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
            ],
            "Topology": [TOPOLOGY],
            "InstanceType": POOLS_AWARE_OFF,
        },
        attachments={
            "ResourceFlavor/gpustack--amd-epyc-7763-linux-amd64-8c": {
                "metadata": {"labels": {G + "amd-epyc-7763.capacity": "8"}},
                "spec": {
                    "nodeLabels": {
                        "gpustack.ai/managed": "true",
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        G + "amd-epyc-7763": "true",
                        G + "amd-epyc-7763.count": "8",
                        "feature.gpustack.ai/acceleratable": "false",
                        "topology.gpustack.ai/profile": PROFILE,
                    }
                },
            },
            "ResourceFlavor/gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d": {
                "spec": {"nodeLabels": {"feature.gpustack.ai/acceleratable": ABSENT}}
            },
        },
    ),
    "pools-node-removed": _sync(
        "two nodes left: the 2d flavor shrinks to 2 cards, the Xeon flavors disappear",
        pools_request(
            settings_object(),
            [CLUSTER[0], CLUSTER[3], CLUSTER[4]],
            [T4_2D_FLAVOR, EPYC_8C_FLAVOR, TOPOLOGY_OBJECT, GENERIC_TYPE, T4_TYPE, A10G_TYPE],
        ),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-25-1-linux-amd64-16c",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                "gpustack--amd-epyc-7763-linux-amd64-8c",
                "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d",
                "gpustack--amd-epyc-7r13-linux-amd64-96c",
            ],
            "Topology": [TOPOLOGY],
            "InstanceType": POOLS_AWARE_OFF,
        },
        attachments={
            **_capacity(
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                A + "nvidia-tesla-t4",
                "2",
            ),
            **_capacity("gpustack--amd-epyc-7763-linux-amd64-8c", G + "amd-epyc-7763", "8"),
        },
    ),
    "pools-deleted-type-returns": _sync(
        "the T4 type was deleted by hand while its pool lives: it comes back; others as observed",
        pools_request(settings_object(), CLUSTER, [GENERIC_TYPE, _edited_a10g_type()]),
        attachmentNames={
            "ResourceFlavor": ALL_FLAVORS,
            "Topology": [TOPOLOGY],
            "InstanceType": POOLS_AWARE_OFF,
        },
        exact={
            "InstanceType/gpustack--nvidia-tesla-t4-linux-amd64": T4_TYPE,
            "InstanceType/gpustack--generic-linux-amd64": GENERIC_TYPE,
            "InstanceType/gpustack--nvidia-a10g-linux-amd64": _expected_edited_a10g(),
        },
    ),
    "pools-pool-gone-type-stays": _sync(
        "the H100 pool is gone; its derived type is still returned, unchanged",
        pools_request(settings_object(), CLUSTER[4:], [GENERIC_TYPE, H100_TYPE]),
        attachmentNames={
            "ResourceFlavor": ["gpustack--amd-25-1-linux-amd64-16c"],
            "Topology": [TOPOLOGY],
            "InstanceType": [
                "gpustack--generic-linux-amd64",
                "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
            ],
        },
        exact={"InstanceType/gpustack--nvidia-h100-80gb-hbm3-linux-amd64": H100_TYPE},
    ),
    "pools-awareness-flipped": _sync(
        "awareness turned on: new pools get types, the collapsed pools' types stay as observed",
        pools_request(
            _settings(instance_type_aware_cpu_manufacturer=True),
            [CLUSTER[0], CLUSTER[4]],
            [GENERIC_TYPE, T4_TYPE],
        ),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-25-1-linux-amd64-16c",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                "gpustack--amd-epyc-7763-linux-amd64-8c",
            ],
            "Topology": [TOPOLOGY],
            "InstanceType": [
                "gpustack--amd-25-1-linux-amd64",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
                "gpustack--amd-epyc-7763-linux-amd64",
                "gpustack--generic-linux-amd64",
                "gpustack--nvidia-tesla-t4-linux-amd64",
            ],
        },
    ),
    "pools-derived-off": _sync(
        "instance-type-derived-from-node=false: no type authored, an existing one kept",
        pools_request(
            _settings(instance_type_derived_from_node="false"), CLUSTER[:2], [GENERIC_TYPE]
        ),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                "gpustack--amd-epyc-7763-linux-amd64-8c",
            ],
            "Topology": [TOPOLOGY],
            "InstanceType": ["gpustack--generic-linux-amd64"],
        },
    ),
    "pools-empty-cluster": _sync(
        "no summaries and nothing attached: nothing to own (no Topology either)",
        pools_request(settings_object(), []),
        response={"attachments": []},
    ),
    "pools-presets": _sync(
        "vectors 'Unit presets' through derived InstanceTypes",
        pools_request(settings_object(), _preset_cluster()),
        attachments={
            **_preset_type("nvidia-h100-80gb-hbm3", "NVIDIA-H100-80GB-HBM3", "12", "192Gi"),
            **_preset_type("nvidia-h100", "H100", "12", "192Gi"),
            **_preset_type("nvidia-tesla-t4", "Tesla-T4", "8", "32Gi"),
            **_preset_type("nvidia-a100-sxm4-40gb", "NVIDIA-A100-SXM4-40GB", "8", "64Gi"),
            **_preset_type("nvidia-quantum-x", "NVIDIA-Quantum-X", "4", "16Gi"),
            **_preset_type("nvidia-nvidia", "NVIDIA", "4", "16Gi"),
            **_preset_type("nvidia-bang", "!!!", "4", "16Gi"),
            **_preset_type("nvidia-mystery", "", "4", "16Gi"),
            **_preset_type("amd-instinct-mi300x-oam", "AMD-Instinct-MI300X-OAM", "12", "192Gi"),
        },
    ),
    "pools-not-the-singleton": _sync(
        "a Settings object other than `default` owns nothing",
        pools_request(settings_object(name="other"), CLUSTER),
        response={"attachments": []},
    ),
    "pools-finalizing": _sync(
        "the singleton is being deleted: what is attached stays as it is, nothing new is "
        "made, and it is not finalized until the lifecycle keeper has released everything",
        _finalizing([GENERIC_TYPE]),
        finalized=False,
        resyncAfterSeconds=2,
        attachmentNames={"InstanceType": ["gpustack--generic-linux-amd64"]},
    ),
    "pools-finalizing-released": _sync(
        "the singleton is being deleted and nothing is attached any more: finalized, and the "
        "answer creates nothing",
        _finalizing([]),
        response={"attachments": [], "finalized": True},
    ),
    "pools-name-taken": _sync(
        "names taken by objects that are not attachments are not created: an InstanceType an "
        "admin made (or one released with an earlier singleton), a flavor and the Topology "
        "released and not yet adopted back",
        pools_request(
            settings_object(),
            CLUSTER,
            [GENERIC_TYPE],
            [
                _released(T4_TYPE),
                _released(
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "ResourceFlavor",
                        "metadata": {"name": "gpustack--amd-epyc-7763-linux-amd64-8c"},
                    }
                ),
                _released(TOPOLOGY_OBJECT),
            ],
        ),
        attachmentNames={
            "ResourceFlavor": [
                n for n in ALL_FLAVORS if n != "gpustack--amd-epyc-7763-linux-amd64-8c"
            ],
            "InstanceType": [
                n for n in POOLS_AWARE_OFF if n != "gpustack--nvidia-tesla-t4-linux-amd64"
            ],
        },
    ),
    "pools-block-profile": _sync(
        "a node in a block/rack/hostname profile feeds flavors of their own name, naming the"
        " profile's Topology; its hostname-only twin keeps the unsuffixed flavor; one Topology"
        " per profile; the pools (InstanceTypes) are the same",
        pools_request(_settings(topology_levels=BLOCK_LEVELS), _block_cluster()),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-25-1-linux-amd64-16c",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d-fnv64-24f66c04b7840361",
                "gpustack--amd-epyc-7763-linux-amd64-8c",
                "gpustack--amd-epyc-7763-linux-amd64-8c-fnv64-24f66c04b7840361",
                "gpustack--amd-epyc-7r13--nvidia-a10g-linux-amd64-1d",
                "gpustack--amd-epyc-7r13-linux-amd64-96c",
                "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
                "gpustack--intel-xeon-platinum-8259cl-linux-amd64-96c",
            ],
            "Topology": [BLOCK_TOPOLOGY, TOPOLOGY],
            "InstanceType": POOLS_AWARE_OFF,
        },
        exact={
            "ResourceFlavor/gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d"
            "-fnv64-24f66c04b7840361": T4_2D_BLOCK_FLAVOR,
            f"Topology/{BLOCK_TOPOLOGY}": BLOCK_TOPOLOGY_OBJECT,
            f"Topology/{TOPOLOGY}": TOPOLOGY_OBJECT,
        },
        attachments={
            **_capacity(
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
                A + "nvidia-tesla-t4",
                "2",
            ),
        },
    ),
    "pools-all-in-block-profile": _sync(
        "every node in the block profile: no hostname-level Topology is left (no flavor names it)",
        pools_request(
            _settings(topology_levels=BLOCK_LEVELS),
            [_in_profile(CLUSTER[0], BLOCK_LEVELS), _in_profile(CLUSTER[1], BLOCK_LEVELS)],
        ),
        attachmentNames={
            "ResourceFlavor": [
                "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d-fnv64-24f66c04b7840361",
                "gpustack--amd-epyc-7763-linux-amd64-8c-fnv64-24f66c04b7840361",
            ],
            "Topology": [BLOCK_TOPOLOGY],
            "InstanceType": [
                "gpustack--generic-linux-amd64",
                "gpustack--nvidia-tesla-t4-linux-amd64",
            ],
        },
    ),
    "pools-error-bad-levels": _error(
        "a summary whose levels do not end with the hostname",
        pools_request(
            settings_object(),
            [*CLUSTER[:4], _in_profile(CLUSTER[4], ["cloud.provider.com/topology-rack"])],
        ),
        NF + "['cpu-1'].spec.levels",
    ),
    "pools-error-bad-count": _error(
        "a summary whose count is not an integer",
        _bad_summary(count="16"),
        NF + "['cpu-1'].spec.flavors[0].count",
    ),
    "pools-error-name-mismatch": _error(
        "a summary whose flavor name disagrees with its fields",
        _bad_summary(name="gpustack--amd-25-1-linux-amd64-32c"),
        NF + "['cpu-1'].spec.flavors[0].name",
    ),
    "pools-error-bad-setting": _error(
        "a settings value that is not a boolean",
        pools_request(_settings(instance_type_aware_cpu_manufacturer="yes"), CLUSTER),
        "$.object.spec.instance-type-aware-cpu-manufacturer",
    ),
    "pools-error-related-list": _error(
        "a related group that is a list, not a map",
        {
            **pools_request(settings_object(), []),
            "related": {"NodeFlavors.gpustack.ai/v1alpha1": list(CLUSTER)},
        },
        NF,
    ),
    "pools-error-nameless-summary": _error(
        "a related object without metadata.name",
        _nameless_summary(),
        NF + "['cpu-1'].metadata.name",
    ),
    "pools-error-attachments-list": _error(
        "attachments must be a map",
        {**pools_request(settings_object(), CLUSTER), "attachments": []},
        "$.attachments",
    ),
    "pools-error-no-object": _error(
        "a request without `object`",
        {"controller": POOLS_CONTROLLER, "attachments": {}, "related": {}},
        "$",
    ),
    "pools-error-wrong-parent": _error(
        "the target is not the Settings kind",
        {**pools_request(settings_object(), CLUSTER), "object": CLUSTER[0]},
        "$.object.kind",
    ),
}
