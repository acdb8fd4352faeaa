"""NVIDIA container responses (docs/design/node-agent.md, "NVIDIA responses").

- Whole, shared and visibility grants: the cards' UUIDs, in index order, through the injection
  channel (`NVIDIA_VISIBLE_DEVICES`, or the CDI annotation naming `nvidia.com/gpu=<uuid>`).
- Partitioned grants: the MIG device UUID made for the container, always as
  `NVIDIA_VISIBLE_DEVICES` (never CDI), never the parent card.
- Sliced grants: the same visibility plus HAMi-core (`hami_core.py`), with
  `CUDA_DEVICE_ORDER=PCI_BUS_ID` unless declared: the memory-limit table is filled in index order
  and read back by CUDA ordinal, which agree only under PCI bus order. The library is built per
  CUDA major, so a grant must not span two majors.

Everything here is pure: the server creates `directories` and sends the response.

Judgment call: a group without a readable `runtimeVersion` counts as CUDA 12 (the default
library), so it never conflicts with a 12.x group.
"""

from __future__ import annotations

from chain.devices import DevicesGroup
from chain.ledger import Mode
from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    GrantedCard,
    IsolationFile,
    SliceRequest,
    staged_dir,
)
from nodeagent.plugin.injection import Channel, inject
from nodeagent.plugin.mig import Made
from nodeagent.plugin.response import ContainerResponse
from nodeagent.vendors.common.hami_core import hami_core_kit, hami_core_response

MANUFACTURER = "nvidia"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
CDI_KIND = "nvidia.com/gpu"
DEFAULT_CUDA_MAJOR = 12
ORDERED = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)


def visibility_response(cards: Cards, channel: Channel) -> ContainerResponse:
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


def cuda_major(runtime_version: str) -> int:
    """The CUDA major of a group's `runtimeVersion` (`13.0` -> 13); the default when unknown."""
    head = runtime_version.split(".", 1)[0]
    return int(head) if head.isascii() and head.isdigit() else DEFAULT_CUDA_MAJOR


def build_dir(major: int) -> str:
    """`cuda-<major>`: the directory of the HAMi-core build for one CUDA major."""
    return f"cuda-{major}"


def library_dir(cards: Cards) -> str:
    """`cuda-<major>`: the HAMi-core build matching every granted card's driver."""
    majors = sorted({cuda_major(granted.group.runtime_version) for granted in cards})
    if len(majors) > 1:
        spanned = " and ".join(str(major) for major in majors)
        raise ValueError(f"the grant spans CUDA majors {spanned}; one library cannot serve both")
    return build_dir(majors[0] if majors else DEFAULT_CUDA_MAJOR)


def sliced_response(cards: Cards, request: SliceRequest) -> ContainerResponse:
    """A sliced grant: visibility plus the HAMi-core environment, mounts and directories."""
    shown = visibility_response(cards, request.channel)
    staged = staged_dir(request.lib_dir, MANUFACTURER)
    return hami_core_response(
        shown, cards, request, staged, f"{library_dir(cards)}/libvgpu.so", ORDERED
    )


def group_kit(group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
    """What a slice of the group mounts: the preload list and the HAMi-core build of the
    group's CUDA major (`build_dir`, as `library_dir` picks it for a grant of its cards)."""
    build = f"{build_dir(cuda_major(group.runtime_version))}/libvgpu.so"
    return hami_core_kit(staged_dir(lib_dir, MANUFACTURER), build)


class Nvidia:
    manufacturer = MANUFACTURER
    slices = True
    channels = True

    def shown(
        self, cards: Cards, mode: Mode, channel: Channel, nodes: DeviceNodes
    ) -> ContainerResponse:
        return visibility_response(cards, channel)

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        return sliced_response(cards, request)

    def partition(self, card: GrantedCard, made: Made, nodes: DeviceNodes) -> ContainerResponse:
        return partition_response(made.mig_uuid)

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        return group_kit(group, lib_dir)
