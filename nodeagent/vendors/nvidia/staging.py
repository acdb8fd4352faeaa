"""How NVIDIA's agent stages HAMi-core, the library its sliced grants preload
(`nodeagent.staging`: the init container; `nodeagent/vendors/nvidia/grants.py`: the grants)."""

from __future__ import annotations

from nodeagent.staging import Staging, hami_core_builds
from nodeagent.vendors.common.hami_core import LIBVGPU
from nodeagent.vendors.nvidia.detect import NVIDIA
from nodeagent.vendors.nvidia.grants import build_dir

CUDA_MAJORS = (11, 12, 13)
"""The CUDA majors a sliced NVIDIA grant may pick a build for (`cuda-<major>`,
nodeagent/vendors/nvidia/grants.py). HAMi publishes one build for all of them."""

STAGING = Staging(
    manufacturer=NVIDIA,
    # HAMi's image (projecthami/hami) keeps HAMi-core here: `libvgpu.so`, and in newer
    # releases `libvgpu.so.<version>`; the pattern matches both.
    source="/k8s-vgpu/lib/nvidia/libvgpu.so*",
    targets=hami_core_builds(NVIDIA, [build_dir(major) for major in CUDA_MAJORS]),
    preload=LIBVGPU,
    source_hint="projecthami/hami (HAMi's device plugin image): /k8s-vgpu/lib/nvidia/",
)
