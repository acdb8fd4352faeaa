"""NVIDIA container responses (node-agent §4, "NVIDIA responses").

- Whole, shared and visibility grants: the cards' UUIDs, in index order, through the injection
  channel (`NVIDIA_VISIBLE_DEVICES`, or the CDI annotation naming `nvidia.com/gpu=<uuid>`).
- Partitioned grants: the MIG device UUID made for the container, always as
  `NVIDIA_VISIBLE_DEVICES` (never CDI), never the parent card.
- Sliced grants: the same visibility plus HAMi-core. Its `libvgpu.so` is preloaded through a
  mounted `/etc/ld.so.preload` and enforces the SM share and a per-device memory cap read from
  `CUDA_DEVICE_*` variables; containers sharing a card coordinate through the host's
  `/tmp/vgpulock` and a per-container cache directory under the operator's pods directory. The
  library is built per CUDA major, so a grant must not span two majors.

Everything here is pure: the server creates `directories` and sends the response.

Judgment call: a group without a readable `runtimeVersion` counts as CUDA 12 (the default
library), so it never conflicts with a 12.x group.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from chain.accelerators import Accelerator
from chain.devices import DevicesGroup, DevicesSpec
from chain.families import SLICED_CORES_PERCENTAGE, SLICED_MEMORY_MIB, SLICED_MEMORY_PERCENTAGE
from chain.ledger_rebuild import AllocationRecord
from chain.quantity import parse_quantity
from nodeagent.plugin.injection import Channel, inject
from nodeagent.plugin.response import ContainerResponse, Mount

MANUFACTURER = "nvidia"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
CDI_KIND = "nvidia.com/gpu"
OPERATOR_LIB_DIR = "/var/lib/gpustack/operator/lib"
OPERATOR_PODS_DIR = "/var/lib/gpustack/operator/pods"
VGPU_LOCK_DIR = "/tmp/vgpulock"
VGPU_CACHE_DIR = "/tmp/vgpu"
SHARED_CACHE_FILE = VGPU_CACHE_DIR + "/cudevshr.cache"
LIBVGPU = "/usr/local/vgpu/libvgpu.so"
LD_SO_PRELOAD = "/etc/ld.so.preload"
DEFAULT_CUDA_MAJOR = 12
DEFAULT_SM_LIMIT = 100

_DEFAULTS_IF_UNDECLARED = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("LIBCUDA_LOG_LEVEL", "0"))
"""Set only when the container does not declare them: users may raise HAMi-core's log level."""


@dataclass(frozen=True)
class GrantedCard:
    group: DevicesGroup
    card: Accelerator


def granted_cards(record: AllocationRecord, spec: DevicesSpec) -> tuple[GrantedCard, ...]:
    """The NVIDIA cards of a record, in index order (the order CUDA numbers them)."""
    by_id = {
        card.id: GrantedCard(group, card)
        for group, card in spec.cards()
        if group.manufacturer == MANUFACTURER
    }
    cards = []
    for claim in record.claims():
        if claim.manufacturer != MANUFACTURER:
            continue
        found = by_id.get(claim.row.id)
        if found is None:
            raise ValueError(f"card {claim.row.id} is no longer on this node")
        cards.append(found)
    if not cards:
        raise ValueError("the grant holds no NVIDIA card")
    return tuple(sorted(cards, key=lambda granted: granted.card.index))


def visibility_response(cards: tuple[GrantedCard, ...], channel: Channel) -> ContainerResponse:
    """Exclusive, shared and visibility grants: show the cards, nothing else."""
    if not cards:
        raise ValueError("the grant holds no NVIDIA card")
    shown = inject(
        channel,
        VISIBLE_DEVICES_ENV,
        [granted.card.id for granted in cards],
        [f"{CDI_KIND}={granted.card.id}" for granted in cards],
    )
    return ContainerResponse(envs=shown.envs, annotations=shown.annotations)


def partition_response(mig_uuid: str) -> ContainerResponse:
    """A MIG partition: the container sees its MIG device only, never the parent card. Always
    the environment variable: CDI specs name whole cards, not instances made at Allocate."""
    return ContainerResponse(envs={VISIBLE_DEVICES_ENV: mig_uuid})


@dataclass(frozen=True)
class SlicedLimits:
    """The sizes a sliced container asks for (0 = not asked)."""

    cores_percentage: int = 0
    memory_percentage: int = 0
    memory_mib: int = 0

    @classmethod
    def from_container(cls, container: Mapping[str, object], base: str) -> SlicedLimits:
        resources = container.get("resources")
        limits = resources.get("limits") if isinstance(resources, Mapping) else None
        limits = limits if isinstance(limits, Mapping) else {}

        def whole(suffix: str) -> int:
            raw = limits.get(base + suffix)
            if raw is None:
                return 0
            value = parse_quantity(str(raw))
            if value.denominator != 1 or value < 0:
                raise ValueError(f"{base}{suffix}: expected a whole number, got {raw!r}")
            return int(value)

        return cls(
            cores_percentage=whole(SLICED_CORES_PERCENTAGE),
            memory_percentage=whole(SLICED_MEMORY_PERCENTAGE),
            memory_mib=whole(SLICED_MEMORY_MIB),
        )


def memory_limit_mib(card_mib: int, limits: SlicedLimits) -> int:
    """The VRAM cap of one card: a percentage wins over MiB; never above the card."""
    if limits.memory_percentage > 0:
        return min(card_mib * limits.memory_percentage // 100, card_mib)
    if limits.memory_mib > 0:
        return min(limits.memory_mib, card_mib)
    raise ValueError(
        "a sliced container must limit .sliced.memory-percentage or .sliced.memory-mib"
    )


def cuda_major(runtime_version: str) -> int:
    """The CUDA major of a group's `runtimeVersion` (`13.0` -> 13); the default when unknown."""
    head = runtime_version.split(".", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else DEFAULT_CUDA_MAJOR


def library_dir(cards: tuple[GrantedCard, ...]) -> str:
    """`cuda-<major>`: the HAMi-core build matching every granted card's driver."""
    majors = sorted({cuda_major(granted.group.runtime_version) for granted in cards})
    if len(majors) > 1:
        spanned = " and ".join(str(major) for major in majors)
        raise ValueError(f"the grant spans CUDA majors {spanned}; one library cannot serve both")
    return f"cuda-{majors[0] if majors else DEFAULT_CUDA_MAJOR}"


def pod_work_dir(pod_uid: str, container: str, pods_dir: str = OPERATOR_PODS_DIR) -> str:
    return f"{pods_dir}/{pod_uid}/c-{container}"


def sliced_response(
    cards: tuple[GrantedCard, ...],
    limits: SlicedLimits,
    declared_env: Collection[str],
    pod_uid: str,
    container: str,
    channel: Channel,
    pods_dir: str = OPERATOR_PODS_DIR,
    lib_dir: str = OPERATOR_LIB_DIR,
) -> ContainerResponse:
    """A sliced grant: visibility plus the HAMi-core environment, mounts and directories."""
    shown = visibility_response(cards, channel)
    library = library_dir(cards)
    envs = dict(shown.envs)
    envs["CUDA_DEVICE_SM_LIMIT"] = str(limits.cores_percentage or DEFAULT_SM_LIMIT)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = SHARED_CACHE_FILE
    for position, granted in enumerate(cards):
        mib = memory_limit_mib(granted.group.memory, limits)
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{position}"] = f"{mib}m"
    for name, value in _DEFAULTS_IF_UNDECLARED:
        if name not in declared_env:
            envs[name] = value
    work = pod_work_dir(pod_uid, container, pods_dir)
    vendor_lib = f"{lib_dir}/{MANUFACTURER}"
    mounts = (
        Mount(VGPU_LOCK_DIR, VGPU_LOCK_DIR),
        Mount(LD_SO_PRELOAD, f"{vendor_lib}/ld.so.preload", read_only=True),
        Mount(LIBVGPU, f"{vendor_lib}/{library}/libvgpu.so", read_only=True),
        Mount(VGPU_CACHE_DIR, work + VGPU_CACHE_DIR),
        Mount("/dev/shm", "/dev/shm"),
    )
    return ContainerResponse(
        envs=envs,
        mounts=mounts,
        annotations=shown.annotations,
        directories=(VGPU_LOCK_DIR, work, work + VGPU_CACHE_DIR),
    )


def declared_env(container: Mapping[str, object]) -> frozenset[str]:
    """Names a container sets in `env:` (`envFrom` is not visible to the plugin)."""
    entries = container.get("env")
    if not isinstance(entries, list):
        return frozenset()
    return frozenset(
        str(entry["name"]) for entry in entries if isinstance(entry, Mapping) and "name" in entry
    )
