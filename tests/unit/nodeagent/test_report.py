"""The NodeFeature and Devices builders."""

from __future__ import annotations

from typing import Any

from chain.devices import Accelerator, Devices, DevicesGroup
from nodeagent.report import (
    align_device_groups,
    devices_object,
    node_feature,
    node_feature_labels,
)
from tests.unit.nodeagent.helpers import detect

A = "acceleratable.feature.gpustack.ai/"


def t4_group(cards: int) -> DevicesGroup:
    return DevicesGroup(
        id="tesla-t4",
        manufacturer="nvidia",
        name="Tesla T4",
        memory=15360,
        cores=2560,
        driver_version="580.126.09",
        runtime_version="13.0",
        compute_capability="7.5",
        family="Turing",
        accelerators=tuple(Accelerator(f"GPU-{n}", n) for n in range(cards)),
    )


def test_node_feature_vector() -> None:
    # docs/design/vectors.md, "Device labels", both groups, published through the NodeFeature.
    h100 = DevicesGroup("h100", "nvidia", "H100", 81920, accelerators=(Accelerator("GPU-9", 4),))
    feature = node_feature("node-a", "gpustack-system", [t4_group(4), h100], "uid-a")
    assert feature["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert feature["kind"] == "NodeFeature"
    assert feature["metadata"] == {
        "name": "node-a-gpustack-device-manager",
        "namespace": "gpustack-system",
        "labels": {
            "nfd.node.kubernetes.io/node-name": "node-a",
            "app.kubernetes.io/part-of": "gpustack-operator-device-manager",
        },
        # Owned by the Node (upstream), so a departed node's NodeFeature is collected with it.
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": "node-a",
                "uid": "uid-a",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = feature["spec"]
    assert isinstance(spec, dict)
    labels = spec["labels"]
    assert labels == {
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia": "true",
        A + "nvidia.driver-version": "580.126.09",
        A + "nvidia.runtime-version": "13.0",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.product": "Tesla-T4",
        A + "nvidia-tesla-t4.memory": "15Gi",
        A + "nvidia-tesla-t4.cores": "2560",
        A + "nvidia-tesla-t4.family": "Turing",
        A + "nvidia-tesla-t4.comcap": "7.5",
        A + "nvidia-tesla-t4.count": "4",
        A + "nvidia-h100": "true",
        A + "nvidia-h100.product": "H100",
        A + "nvidia-h100.memory": "80Gi",
        A + "nvidia-h100.cores": "0",
        A + "nvidia-h100.count": "1",
    }


def test_groups_without_cards_publish_nothing() -> None:
    assert node_feature_labels([t4_group(0)]) == {}
    feature = node_feature("n", "ns", [], "uid-n")
    assert feature["spec"] == {"labels": {}}


FOREIGN: dict[str, Any] = {
    "id": "instinct-mi300x-oam",
    "manufacturer": "amd",
    "name": "AMD Instinct MI300X OAM",
    "memory": 196608,
    "accelerators": [{"id": "amd-1", "index": 1, "fabric": {"x": 1}}, {"id": "amd-0", "index": 0}],
}


def test_devices_object() -> None:
    groups = detect("t4x4")
    existing = {
        "spec": {
            "groups": [
                FOREIGN,
                {"id": "a10g", "manufacturer": "nvidia", "name": "NVIDIA A10G", "memory": 1},
            ],
            "interfaces": [{"name": "eth0"}],
        }
    }
    node_labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "x": "y"}
    obj = devices_object("node-a", "uid-1", node_labels, groups, ["nvidia"], existing)
    assert obj["metadata"] == {
        "name": "node-a",
        "labels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            A + "amd-instinct-mi300x-oam": "true",
            A + "nvidia-tesla-t4": "true",
        },
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": "node-a",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    spec = obj["spec"]
    assert isinstance(spec, dict)
    assert spec["interfaces"] == [{"name": "eth0"}]
    amd, nvidia = spec["groups"]
    # Another manufacturer's group is kept (unknown fields included), cards in index order.
    assert amd["accelerators"] == [FOREIGN["accelerators"][1], FOREIGN["accelerators"][0]]
    # This agent's stale group (a10g) is gone, replaced by what it detected.
    assert nvidia["id"] == "tesla-t4" and len(nvidia["accelerators"]) == 4
    # The result parses as a Devices object and holds the detected groups.
    parsed = Devices.parse({**obj, "spec": {"groups": spec["groups"]}})
    assert parsed.spec.groups[1] == groups[0]


def test_canonical_group_order() -> None:
    late = DevicesGroup("b", "nvidia", "B", 1, accelerators=(Accelerator("x", 0),))
    early = DevicesGroup("a", "nvidia", "A", 1, accelerators=(Accelerator("y", 2),))
    empty = DevicesGroup("c", "nvidia", "C", 1)
    aligned = align_device_groups([FOREIGN], [early, empty, late], ["nvidia"])
    assert [(g["manufacturer"], g["id"]) for g in aligned] == [
        ("amd", "instinct-mi300x-oam"),
        ("nvidia", "b"),
        ("nvidia", "a"),
        ("nvidia", "c"),
    ]
    # The same input always renders the same list (so unchanged means no write).
    assert aligned == align_device_groups([FOREIGN], [late, empty, early], ["nvidia"])


def test_first_devices_object() -> None:
    obj = devices_object("n", "u", {}, [], ["nvidia"])
    assert obj["spec"] == {"groups": []}
    metadata = obj["metadata"]
    assert isinstance(metadata, dict) and metadata["labels"] == {}
