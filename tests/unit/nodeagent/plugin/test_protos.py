"""The generated kubelet APIs carry the documented messages, field numbers and services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent.plugin import protos
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount

DEVICE_PLUGIN = {
    "DevicePluginOptions": {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    "Empty": {},
    "ListAndWatchResponse": {"devices": 1},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "Device": {"ID": 1, "health": 2, "topology": 3},
    "PreStartContainerRequest": {"devices_ids": 1},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": 1},
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    },
    "PreferredAllocationResponse": {"container_responses": 1},
    "ContainerPreferredAllocationResponse": {"deviceIDs": 1},
    "AllocateRequest": {"container_requests": 1},
    "ContainerAllocateRequest": {"devices_ids": 1},
    "CDIDevice": {"name": 1},
    "AllocateResponse": {"container_responses": 1},
    "ContainerAllocateResponse": {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    },
    "Mount": {"container_path": 1, "host_path": 2, "read_only": 3},
    "DeviceSpec": {"container_path": 1, "host_path": 2, "permissions": 3},
}

POD_RESOURCES = {
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": 1},
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
    "GetPodResourcesRequest": {"pod_name": 1, "pod_namespace": 2},
    "GetPodResourcesResponse": {"pod_resources": 1},
    "PodResources": {"name": 1, "namespace": 2, "containers": 3},
    "ContainerResources": {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    },
    "ContainerMemory": {"memory_type": 1, "size": 2, "topology": 3},
    "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
    "ClaimResource": {
        "cdi_devices": 1,
        "driver_name": 2,
        "pool_name": 3,
        "device_name": 4,
        "share_id": 5,
    },
    "CDIDevice": {"name": 1},
}


def fields(module: Any, message: str) -> dict[str, int]:
    descriptor = module.DESCRIPTOR.message_types_by_name[message]
    return {field.name: field.number for field in descriptor.fields}


@pytest.mark.parametrize(("message", "expected"), sorted(DEVICE_PLUGIN.items()))
def test_device_plugin_messages(message: str, expected: dict[str, int]) -> None:
    assert fields(protos.deviceplugin(), message) == expected


@pytest.mark.parametrize(("message", "expected"), sorted(POD_RESOURCES.items()))
def test_pod_resources_messages(message: str, expected: dict[str, int]) -> None:
    assert fields(protos.podresources(), message) == expected


def test_no_other_messages() -> None:
    assert set(protos.deviceplugin().DESCRIPTOR.message_types_by_name) == set(DEVICE_PLUGIN)
    assert set(protos.podresources().DESCRIPTOR.message_types_by_name) == set(POD_RESOURCES)


def test_packages_and_services() -> None:
    plugin = protos.deviceplugin().DESCRIPTOR
    assert plugin.package == "v1beta1"
    services = {
        name: {
            m.name: (m.input_type.name, m.output_type.name, m.server_streaming)
            for m in service.methods
        }
        for name, service in plugin.services_by_name.items()
    }
    assert services == {
        "Registration": {"Register": ("RegisterRequest", "Empty", False)},
        "DevicePlugin": {
            "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
            "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
            "GetPreferredAllocation": (
                "PreferredAllocationRequest",
                "PreferredAllocationResponse",
                False,
            ),
            "Allocate": ("AllocateRequest", "AllocateResponse", False),
            "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
        },
    }
    lister = protos.podresources().DESCRIPTOR
    assert lister.package == "v1"
    methods = lister.services_by_name["PodResourcesLister"].methods
    assert [m.name for m in methods] == ["List", "GetAllocatableResources", "Get"]


def test_map_fields_and_grpc_modules() -> None:
    response = protos.deviceplugin().ContainerAllocateResponse(envs={"A": "1"})
    assert dict(response.envs) == {"A": "1"}
    assert hasattr(protos.deviceplugin_grpc(), "add_DevicePluginServicer_to_server")
    assert hasattr(protos.deviceplugin_grpc(), "RegistrationStub")
    assert hasattr(protos.podresources_grpc(), "PodResourcesListerStub")


def test_messages_round_trip_on_the_wire() -> None:
    api = protos.deviceplugin()
    request = api.AllocateRequest(
        container_requests=[api.ContainerAllocateRequest(devices_ids=["g:GPU-1:0000"])]
    )
    decoded = api.AllocateRequest.FromString(request.SerializeToString())
    assert list(decoded.container_requests[0].devices_ids) == ["g:GPU-1:0000"]


def test_generate_into_a_fresh_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    assert not protos.is_current(target)
    protos.generate(target)
    assert protos.is_current(target)
    produced = sorted(path.name for path in target.glob("*.py"))
    assert produced == [
        "deviceplugin_v1beta1_pb2.py",
        "deviceplugin_v1beta1_pb2_grpc.py",
        "podresources_v1_pb2.py",
        "podresources_v1_pb2_grpc.py",
    ]


def test_response_to_message() -> None:
    response = ContainerResponse(
        envs={"NVIDIA_VISIBLE_DEVICES": "GPU-1"},
        mounts=(Mount("/dev/shm", "/dev/shm"), Mount("/a", "/b", read_only=True)),
        devices=(DeviceNode("/dev/x", "/dev/x"),),
        annotations={"k": "v"},
        cdi_devices=("nvidia.com/gpu=GPU-1",),
        directories=("/tmp/vgpulock",),
    )
    message = response.to_message()
    assert dict(message.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}
    assert [(m.container_path, m.read_only) for m in message.mounts] == [
        ("/dev/shm", False),
        ("/a", True),
    ]
    assert message.devices[0].permissions == "rw"
    assert dict(message.annotations) == {"k": "v"}
    assert [d.name for d in message.cdi_devices] == ["nvidia.com/gpu=GPU-1"]
