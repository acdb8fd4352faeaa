"""NVIDIA's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from typing import cast

from nodeagent.detect.base import library_detector
from nodeagent.plugin.mig import MigNvml, NvmlNaming
from nodeagent.vendors.common.nvml import load_nvml
from nodeagent.vendors.interface import Vendor
from nodeagent.vendors.nvidia.agent import AGENT
from nodeagent.vendors.nvidia.detect import NVIDIA, NvidiaDetector
from nodeagent.vendors.nvidia.grants import Nvidia
from nodeagent.vendors.nvidia.links import direct_links
from nodeagent.vendors.nvidia.preflight import HOST_READER
from nodeagent.vendors.nvidia.simulate import SIMULATOR
from nodeagent.vendors.nvidia.staging import STAGING


def _partition_library() -> MigNvml | None:
    """pynvml itself (None without nvidia-ml-py): its MIG calls are `MigNvml`'s."""
    return cast(MigNvml | None, load_nvml())


VENDOR = Vendor(
    name=NVIDIA,
    detector=library_detector(NVIDIA, NvidiaDetector, nvml=lambda setup: setup.nvml),
    responder=Nvidia(),
    partition_naming=NvmlNaming(),
    simulator=SIMULATOR,
    direct_links=direct_links,
    partition_library=_partition_library,
    markers_in_base_dir=True,
    staging=STAGING,
    agent=AGENT,
    host_reader=HOST_READER,
)
