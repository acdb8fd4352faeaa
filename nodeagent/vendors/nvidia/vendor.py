"""NVIDIA's registration: how the engine reaches this package (`registry.py`)."""

from __future__ import annotations

from nodeagent.detect.base import library_detector
from nodeagent.plugin.mig import NvidiaNaming
from nodeagent.vendors.interface import Vendor
from nodeagent.vendors.nvidia.detect import NVIDIA, NvidiaDetector
from nodeagent.vendors.nvidia.grants import Nvidia
from nodeagent.vendors.nvidia.links import direct_links
from nodeagent.vendors.nvidia.simulate import SIMULATOR

VENDOR = Vendor(
    name=NVIDIA,
    detector=library_detector(NVIDIA, NvidiaDetector, nvml=lambda setup: setup.nvml),
    responder=Nvidia(),
    partition_naming=NvidiaNaming(),
    simulator=SIMULATOR,
    direct_links=direct_links,
)
