"""HAMi-core (`libvgpu.so`): the slicing enforcer of NVIDIA and Iluvatar (corex exposes a
CUDA-compatible `libcuda.so.1`, so the same build serves both).

The library is preloaded through a mounted `/etc/ld.so.preload` and enforces the SM share and a
per-card memory cap read from `CUDA_DEVICE_*` variables; containers sharing a card coordinate
through the host's `/tmp/vgpulock` and a per-container cache directory under the operator's pods
directory. The caller brings the visibility part (its own variable) and where the library lies on
the host (NVIDIA: one build per CUDA major; Iluvatar: one flat directory).
"""

from __future__ import annotations

from collections.abc import Collection

from nodeagent.plugin.grants import (
    LD_SO_PRELOAD,
    Cards,
    IsolationFile,
    SliceRequest,
    memory_limit_mib,
    preload_kit,
    unless_declared,
)
from nodeagent.plugin.response import ContainerResponse, Mount

VGPU_LOCK_DIR = "/tmp/vgpulock"
VGPU_CACHE_DIR = "/tmp/vgpu"
SHARED_CACHE_FILE = VGPU_CACHE_DIR + "/cudevshr.cache"
LIBVGPU = "/usr/local/vgpu/libvgpu.so"
QUIET = (("LIBCUDA_LOG_LEVEL", "0"),)
"""HAMi-core logs every intercepted call by default; a workload may still raise the level."""


def hami_core_kit(staged: str, build: str) -> tuple[IsolationFile, IsolationFile]:
    """HAMi-core as staged in `staged` (the manufacturer's directory on the host): its
    `ld.so.preload` and the `libvgpu.so` build at `build` below it."""
    preload, library = preload_kit(staged, (build,))
    return preload, library


def hami_core_response(
    shown: ContainerResponse,
    cards: Cards,
    request: SliceRequest,
    staged: str,
    build: str,
    defaults: Collection[tuple[str, str]] = (),
) -> ContainerResponse:
    """`shown` plus HAMi-core's environment, mounts and directories, with the kit `staged` and
    `build` name (`hami_core_kit`)."""
    preload, library = hami_core_kit(staged, build)
    envs = dict(shown.envs)
    envs["CUDA_DEVICE_SM_LIMIT"] = str(request.limits.cores())
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = SHARED_CACHE_FILE
    for position, granted in enumerate(cards):
        mib = memory_limit_mib(granted.group.memory, request.limits)
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{position}"] = f"{mib}m"
    unless_declared(envs, (*defaults, *QUIET), request.declared)
    work = request.work_dir
    mounts = (
        *shown.mounts,
        Mount(VGPU_LOCK_DIR, VGPU_LOCK_DIR),
        Mount(LD_SO_PRELOAD, preload.path, read_only=True),
        Mount(LIBVGPU, library.path, read_only=True),
        Mount(VGPU_CACHE_DIR, work + VGPU_CACHE_DIR),
        Mount("/dev/shm", "/dev/shm"),
    )
    return ContainerResponse(
        envs=envs,
        mounts=mounts,
        devices=shown.devices,
        annotations=shown.annotations,
        directories=(VGPU_LOCK_DIR, work, work + VGPU_CACHE_DIR),
    )
