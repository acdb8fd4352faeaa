"""What a container is given for a grant, before it becomes a `ContainerAllocateResponse`.

Vendor responders build a `ContainerResponse` (pure); the server creates `directories` on the
host (mode 0777, so any container user can write its HAMi-core cache), then sends `to_message`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nodeagent.plugin import protos


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerResponse:
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()
    directories: tuple[str, ...] = ()
    """Host directories to create before answering (not part of the wire message)."""

    def to_message(self) -> Any:
        """The `v1beta1.ContainerAllocateResponse`."""
        api = protos.deviceplugin()
        return api.ContainerAllocateResponse(
            envs=dict(self.envs),
            mounts=[
                api.Mount(
                    container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
                )
                for m in self.mounts
            ],
            devices=[
                api.DeviceSpec(
                    container_path=d.container_path,
                    host_path=d.host_path,
                    permissions=d.permissions,
                )
                for d in self.devices
            ],
            annotations=dict(self.annotations),
            cdi_devices=[api.CDIDevice(name=name) for name in self.cdi_devices],
        )
