"""Synthetic but realistic cluster objects: Nodes as a kubelet + NFD + node agent leave them,
NodeFlavors summaries as the API server serves them, and Metacontroller request bodies.

Used by the pools-hook benchmark and by the unit-test fixture builder, so both see objects the
size and shape of real ones (server metadata, managedFields, NFD labels, images), not toy dicts.
"""

from __future__ import annotations

import copy
import hashlib
import random
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

FEATURE_NODE = "feature.node.kubernetes.io/"
ACC = "acceleratable.feature.gpustack.ai/"


@dataclass(frozen=True)
class CpuModel:
    vendor: str
    family: str
    model_id: str
    name: str
    """The `feature.gpustack.ai/cpu-name` annotation (empty: NFD could not resolve it)."""
    cores: int


@dataclass(frozen=True)
class CardModel:
    manufacturer: str
    group: str
    product: str
    """As the device manager publishes it: spaces already turned into `-`."""
    memory: str
    cores: int
    family: str = ""
    pci_vendor: str = "10de"

    @property
    def key(self) -> str:
        return f"{self.manufacturer}-{self.group}"


CPU_MODELS = (
    CpuModel("AMD", "25", "1", "AMD EPYC 7763 64-Core Processor", 128),
    CpuModel("AMD", "25", "1", "AMD EPYC 7R13 Processor", 96),
    CpuModel("AMD", "25", "17", "AMD EPYC 9654 96-Core Processor", 192),
    CpuModel("Intel", "6", "85", "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", 96),
    CpuModel("Intel", "6", "106", "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz", 64),
    CpuModel("Intel", "6", "143", "Intel(R) Xeon(R) Platinum 8480+", 224),
    CpuModel("AMD", "25", "1", "", 16),
    CpuModel("Intel", "6", "85", "Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", 48),
)
CARD_MODELS = (
    CardModel("nvidia", "tesla-t4", "Tesla-T4", "15Gi", 2560, "Turing"),
    CardModel("nvidia", "a10g", "NVIDIA-A10G", "22Gi", 9216, "Ampere"),
    CardModel("nvidia", "a100-sxm4-80gb", "NVIDIA-A100-SXM4-80GB", "80Gi", 6912, "Ampere"),
    CardModel("nvidia", "h100-80gb-hbm3", "NVIDIA-H100-80GB-HBM3", "80Gi", 16896, "Hopper"),
    CardModel("amd", "instinct-mi300x-oam", "AMD-Instinct-MI300X-OAM", "192Gi", 19456, "", "1002"),
    CardModel("ascend", "910b2", "Ascend910B2", "64Gi", 0, "", "19e5"),
)


def _uid(seed: str) -> str:
    digest = hashlib.sha256(seed.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _nfd_labels(cpu: CpuModel, card: CardModel | None) -> dict[str, str]:
    labels = {
        FEATURE_NODE + "cpu-model.vendor_id": cpu.vendor,
        FEATURE_NODE + "cpu-model.family": cpu.family,
        FEATURE_NODE + "cpu-model.id": cpu.model_id,
        FEATURE_NODE + "cpu-hardware_multithreading": "true",
        FEATURE_NODE + "cpu-pstate.status": "active",
        FEATURE_NODE + "kernel-config.NO_HZ": "true",
        FEATURE_NODE + "kernel-version.full": "6.8.0-45-generic",
        FEATURE_NODE + "kernel-version.major": "6",
        FEATURE_NODE + "kernel-version.minor": "8",
        FEATURE_NODE + "kernel-version.revision": "0",
        FEATURE_NODE + "memory-numa": "true",
        FEATURE_NODE + "pci-1af4.present": "true",
        FEATURE_NODE + "storage-nonrotationaldisk": "true",
        FEATURE_NODE + "system-os_release.ID": "ubuntu",
        FEATURE_NODE + "system-os_release.VERSION_ID": "24.04",
        FEATURE_NODE + "system-os_release.VERSION_ID.major": "24",
        FEATURE_NODE + "system-os_release.VERSION_ID.minor": "04",
    }
    for flag in ("ADX", "AESNI", "AVX", "AVX2", "AVX512F", "FMA3", "SHA", "VAES", "VPCLMULQDQ"):
        labels[f"{FEATURE_NODE}cpu-cpuid.{flag}"] = "true"
    if card is not None:
        labels[f"{FEATURE_NODE}pci-{card.pci_vendor}.present"] = "true"
    return labels


def card_labels(card: CardModel, cards: int) -> dict[str, str]:
    """What the device manager's NodeFeature puts on a node with `cards` cards of one model."""
    key = ACC + card.key
    labels = {
        "feature.gpustack.ai/acceleratable": "true",
        ACC + card.manufacturer: "true",
        ACC + card.manufacturer + ".driver-version": "580.126.09",
        ACC + card.manufacturer + ".runtime-version": "13.0",
        key: "true",
        key + ".product": card.product,
        key + ".memory": card.memory,
        key + ".cores": str(card.cores),
        key + ".count": str(cards),
    }
    if card.family:
        labels[key + ".family"] = card.family
    return labels


def cpu_annotations(cpu: CpuModel) -> dict[str, str]:
    """The `gpustack-cpu-info` NFD rule's annotations (an unresolved name stays a template)."""
    prefix = "feature.gpustack.ai/cpu-"
    return {
        prefix + "name": cpu.name or "@cpu.model.name",
        prefix + "family": cpu.family,
        prefix + "physical-cores": str(cpu.cores // 2),
        prefix + "threads-per-core": "2",
        prefix + "logical-cores": str(cpu.cores),
        prefix + "stepping": "1",
        prefix + "hz": "2450000000",
        prefix + "boost-freq": "3500000000",
        prefix + "cache-line": "64",
        prefix + "cache-l1i": "32768",
        prefix + "cache-l1d": "32768",
        prefix + "cache-l2": "524288",
        prefix + "cache-l3": "268435456",
    }


def served_node(
    name: str,
    cpu: CpuModel,
    card: CardModel | None = None,
    cards: int = 0,
    labels: dict[str, str] | None = None,
    cores: int | None = None,
    heartbeat: int = 0,
) -> Obj:
    """A Node as the API server serves it; `heartbeat` moves only what a heartbeat moves."""
    all_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "bare-metal",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": "eu-west-1a",
        **_nfd_labels(cpu, card),
    }
    if card is not None and cards > 0:
        all_labels.update(card_labels(card, cards))
    all_labels.update(labels or {})
    nfd_keys = ",".join(sorted(k.split("/", 1)[1] for k in all_labels if "feature" in k))
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "nfd.node.kubernetes.io/feature-labels": nfd_keys,
        "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-{_uid(name)[:17]}"}}',
        **cpu_annotations(cpu),
    }
    total = cpu.cores if cores is None else cores
    capacity = {
        "cpu": str(total),
        "ephemeral-storage": "1888177356Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "1056375476Ki",
        "pods": "110",
    }
    if card is not None and cards > 0:
        capacity[f"{card.manufacturer}.com/gpu"] = str(cards)
    stamp = f"2026-11-30T05:{heartbeat // 60 % 60:02d}:{heartbeat % 60:02d}Z"
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": "2026-11-01T00:00:00Z",
            "reason": f"KubeletHas{reason}",
            "message": f"kubelet has {reason.lower()}",
        }
        for kind, reason in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": "2026-11-01T00:00:00Z",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    images = [
        {
            "names": [
                f"registry.example.com/team/image-{index}@sha256:{_uid(name + str(index))}",
                f"registry.example.com/team/image-{index}:v1.{index}.0",
            ],
            "sizeBytes": 100_000_000 + index * 7_654_321,
        }
        for index in range(24)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(name),
            "resourceVersion": str(1_000_000 + heartbeat),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": all_labels,
            "annotations": annotations,
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {".": {}}, "f:images": {}}},
                }
                for manager in (
                    "kubelet",
                    "nfd-master",
                    "metacontroller",
                    "kube-controller-manager",
                )
            ],
        },
        "spec": {
            "podCIDR": "10.244.3.0/24",
            "podCIDRs": ["10.244.3.0/24"],
            "providerID": f"aws:///eu-west-1a/i-{_uid(name)[:17]}",
        },
        "status": {
            "capacity": capacity,
            "allocatable": {**capacity, "cpu": f"{total * 1000 - 100 - heartbeat % 7}m"},
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.3.17"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _uid(name + "machine").replace("-", ""),
                "systemUUID": _uid(name + "system"),
                "bootID": _uid(name + "boot"),
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "v1.36.3",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


def served(obj: Obj, owner: Obj | None = None, controller: str = "gpustack-node") -> Obj:
    """`obj` as the API server returns it once Metacontroller applied it as an attachment."""
    meta = obj["metadata"]
    name = meta["name"]
    served_meta: Obj = {
        "name": name,
        "uid": _uid(obj["kind"] + name),
        "resourceVersion": "2000001",
        "generation": 1,
        "creationTimestamp": "2026-11-30T05:00:00Z",
        "labels": dict(meta.get("labels") or {}),
        "annotations": {
            **(meta.get("annotations") or {}),
            "metacontroller.k8s.io/decorator-controller": controller,
        },
        "managedFields": [
            {
                "manager": "metacontroller",
                "operation": "Update",
                "apiVersion": obj["apiVersion"],
                "time": "2026-11-30T05:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {}},
            }
        ],
    }
    if owner is not None:
        served_meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": _uid(owner["metadata"]["name"]),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    result = {**obj, "metadata": served_meta}
    return result


def settings_object(spec: dict[str, Any] | None = None, name: str = "default") -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {
            "name": name,
            "uid": _uid("settings" + name),
            "resourceVersion": "1500",
            "generation": 3,
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "finalizers": ["metacontroller.io/decoratorcontroller-gpustack-pools"],
        },
        "spec": spec or {},
    }


def decorator_controller(name: str, resource: str, attachments: list[Obj]) -> Obj:
    return {
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": name, "uid": _uid(name), "resourceVersion": "900", "generation": 1},
        "spec": {
            "resources": [
                {"apiVersion": resource.split(":")[0], "resource": resource.split(":")[1]}
            ],
            "attachments": attachments,
            "hooks": {
                "sync": {"webhook": {"url": f"http://gpustack-flavor.gpustack-system/{name}"}},
                "customize": {"webhook": {"url": f"http://gpustack-flavor.gpustack-system/{name}"}},
            },
        },
    }


NODE_CONTROLLER = decorator_controller(
    "gpustack-node",
    "v1:nodes",
    [
        {
            "apiVersion": "gpustack.ai/v1alpha1",
            "resource": "nodeflavors",
            "updateStrategy": {"method": "InPlace"},
        }
    ],
)
POOLS_CONTROLLER = decorator_controller(
    "gpustack-pools",
    "gpustack.ai/v1alpha1:settings",
    [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "resource": "resourceflavors",
            "updateStrategy": {"method": "InPlace"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "resource": "topologies",
            "updateStrategy": {"method": "InPlace"},
        },
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "resource": "instancetypes",
            "updateStrategy": {"method": "OnDelete"},
        },
    ],
)


def group_map(objects: list[Obj]) -> dict[str, dict[str, Obj]]:
    """Copies of `objects`, keyed the way Metacontroller keys cluster-scoped objects (v1 and v2
    alike)."""
    groups: dict[str, dict[str, Obj]] = {}
    for obj in copy.deepcopy(objects):
        groups.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[obj["metadata"]["name"]] = obj
    return groups


def node_request(node: Obj, settings: Obj | None = None, attached: list[Obj] | None = None) -> Obj:
    return {
        "controller": NODE_CONTROLLER,
        "object": copy.deepcopy(node),
        "attachments": {"NodeFlavors.gpustack.ai/v1alpha1": {}, **group_map(attached or [])},
        "related": {
            "Settings.gpustack.ai/v1alpha1": {},
            **group_map([settings] if settings else []),
        },
        "finalizing": False,
    }


def pools_request(
    settings: Obj,
    summaries: list[Obj],
    attached: list[Obj] | None = None,
    others: list[Obj] | None = None,
) -> Obj:
    """The pools decorator's request. It relates every InstanceType and the chain's flavors and
    Topology too, so its attachments show up among the related objects as well; `others` are
    related objects that are not its attachments (an admin's InstanceType, say)."""
    owner = settings
    mine = [served(obj, owner, "gpustack-pools") for obj in attached or []]
    kinds = (
        "ResourceFlavor.kueue.x-k8s.io/v1beta2",
        "Topology.kueue.x-k8s.io/v1beta2",
        "InstanceType.worker.gpustack.ai/v1alpha1",
    )
    return {
        "controller": POOLS_CONTROLLER,
        "object": copy.deepcopy(settings),
        "attachments": {**{key: {} for key in kinds}, **group_map(mine)},
        "related": {
            "NodeFlavors.gpustack.ai/v1alpha1": {},
            **{key: {} for key in kinds},
            **group_map([*summaries, *mine, *(others or [])]),
        },
        "finalizing": False,
    }


def random_cluster(size: int, seed: int = 7) -> list[Obj]:
    """`size` Nodes over the 8 CPU and 6 card models; about a third carry cards (1, 2, 4 or 8)."""
    rng = random.Random(seed)
    nodes = []
    for index in range(size):
        cpu = CPU_MODELS[rng.randrange(len(CPU_MODELS))]
        card = CARD_MODELS[rng.randrange(len(CARD_MODELS))] if rng.random() < 0.35 else None
        cards = rng.choice((1, 2, 4, 8)) if card else 0
        nodes.append(served_node(f"node-{index:05d}", cpu, card, cards, heartbeat=index))
    return nodes
