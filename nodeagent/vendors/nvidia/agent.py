"""What NVIDIA's agent container needs of its node (`Vendor.agent`, `nodeagent.manifests`)."""

from __future__ import annotations

from nodeagent.vendors.common.hami_core import VGPU_LOCK_DIR
from nodeagent.vendors.interface import AgentPod

MIG_CAPABILITY = "SYS_ADMIN"
"""The driver grants its mig-config capability to CAP_SYS_ADMIN: cutting and destroying MIG
instances at Allocate needs it."""

AGENT = AgentPod(
    # The cards' device nodes and NVML come in through the container toolkit, not /dev.
    privileged=False,
    capabilities=(MIG_CAPABILITY,),
    # HAMi-core's lock directory, which the sliced grants mount into every sliced container
    # (the agent creates it on the host before answering).
    mounts=(("vgpu-lock", VGPU_LOCK_DIR, False, "DirectoryOrCreate"),),
    env=(
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        # `utility` brings NVML (detection, MIG); `compute` brings libcuda.so.1, which
        # HAMi-core's libvgpu.so links against (with libnvidia-ml.so.1): without it the
        # isolation check's dlopen fails and the node publishes no NVIDIA slices.
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        # The toolkit hands in the mig-config / mig-monitor capability device nodes.
        {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
        {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"},
    ),
    note="""\
# - NVIDIA: the cards' device nodes and the driver libraries (NVML) come in through the NVIDIA
#   container toolkit (NVIDIA_VISIBLE_DEVICES=all; `utility` for NVML, `compute` for libcuda.so.1,
#   which HAMi-core's libvgpu.so needs to load in the agent's slicing check; a cluster whose default
#   runtime is not NVIDIA's sets `runtimeClassName: nvidia`, docs/nodeagent.md). The one
#   capability kept is SYS_ADMIN, for cutting and destroying MIG instances at Allocate: the
#   driver grants its mig-config capability to CAP_SYS_ADMIN, and NVIDIA_MIG_CONFIG_DEVICES=all
#   asks the toolkit for the capability's device node. A cluster that never partitions may drop it.
""",
)
