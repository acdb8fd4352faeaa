"""NVIDIA container responses (docs/design/vectors.md, "NVIDIA sliced env")."""

from __future__ import annotations

import pytest

from chain.accelerators import Accelerator
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import AllocationRecord
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.plugin.grants import (
    GrantedCard,
    SlicedLimits,
    SliceRequest,
    declared_env,
    granted_cards,
    memory_limit_mib,
)
from nodeagent.plugin.injection import Channel, NodeFacts, Strategy
from nodeagent.plugin.response import ContainerResponse, Mount
from nodeagent.vendors.nvidia.grants import (
    cuda_major,
    library_dir,
    sliced_response,
    visibility_response,
)

ENVVAR = Channel("nvidia", "nvidia")
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
VECTOR_LIMITS = SlicedLimits(cores_percentage=10, memory_percentage=25)
"""The vector: cores 10 %, memory 25 % of a 24576 MiB card."""


def group(
    runtime: str = "13.0", memory: int = 24576, *cards: int, gid: str = "a10g"
) -> DevicesGroup:
    return DevicesGroup(
        id=gid,
        manufacturer="nvidia",
        name="NVIDIA A10G",
        memory=memory,
        runtime_version=runtime,
        accelerators=tuple(Accelerator(id=f"GPU-{n}", index=n) for n in cards),
    )


def granted(runtime: str = "13.0", memory: int = 24576) -> tuple[GrantedCard, ...]:
    return (GrantedCard(group(runtime, memory), Accelerator(id=UUID0, index=0)),)


def sliced(
    cards: tuple[GrantedCard, ...] | None = None,
    limits: SlicedLimits = VECTOR_LIMITS,
    declared: frozenset[str] = frozenset(),
    channel: Channel = ENVVAR,
) -> ContainerResponse:
    request = SliceRequest(limits, "uid-1", "main", channel, declared)
    return sliced_response(cards or granted(), request)


def test_sliced_env_vector() -> None:
    assert sliced().envs == {
        "NVIDIA_VISIBLE_DEVICES": UUID0,
        "CUDA_DEVICE_SM_LIMIT": "10",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "LIBCUDA_LOG_LEVEL": "0",
    }


def test_declared_log_level_is_not_overwritten() -> None:
    envs = sliced(declared=frozenset({"LIBCUDA_LOG_LEVEL"})).envs
    assert "LIBCUDA_LOG_LEVEL" not in envs
    assert envs["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_declared_env_reads_names_of_env_entries() -> None:
    container = {"env": [{"name": "LIBCUDA_LOG_LEVEL", "value": "3"}, {"value": "x"}]}
    assert declared_env(container) == {"LIBCUDA_LOG_LEVEL"}
    assert declared_env({}) == frozenset()


def test_sliced_mounts_and_directories() -> None:
    response = sliced()
    work = "/var/lib/gpustack/operator/pods/uid-1/c-main"
    assert response.mounts == (
        Mount("/tmp/vgpulock", "/tmp/vgpulock"),
        Mount("/etc/ld.so.preload", "/var/lib/gpustack/operator/lib/nvidia/ld.so.preload", True),
        Mount(
            "/usr/local/vgpu/libvgpu.so",
            "/var/lib/gpustack/operator/lib/nvidia/cuda-13/libvgpu.so",
            True,
        ),
        Mount("/tmp/vgpu", work + "/tmp/vgpu"),
        Mount("/dev/shm", "/dev/shm"),
    )
    assert response.directories == ("/tmp/vgpulock", work, work + "/tmp/vgpu")


@pytest.mark.parametrize(
    ("runtime", "directory"), [("13.0", "cuda-13"), ("12.4", "cuda-12"), ("", "cuda-12")]
)
def test_library_dir_follows_the_cuda_major(runtime: str, directory: str) -> None:
    assert library_dir(granted(runtime)) == directory


def test_cards_spanning_cuda_majors_are_an_error() -> None:
    cards = (
        GrantedCard(group("12.4"), Accelerator(id="GPU-0", index=0)),
        GrantedCard(group("13.0"), Accelerator(id="GPU-1", index=1)),
    )
    with pytest.raises(ValueError, match="spans CUDA majors 12 and 13"):
        sliced(cards)


def test_no_memory_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="memory"):
        sliced(limits=SlicedLimits(cores_percentage=10))


def test_memory_limit_rules() -> None:
    assert memory_limit_mib(24576, SlicedLimits(memory_percentage=25)) == 6144
    assert memory_limit_mib(24576, SlicedLimits(memory_percentage=25, memory_mib=100)) == 6144
    assert memory_limit_mib(24576, SlicedLimits(memory_mib=4096)) == 4096
    assert memory_limit_mib(24576, SlicedLimits(memory_mib=99999)) == 24576
    assert memory_limit_mib(15360, SlicedLimits(memory_percentage=33)) == 5068


def test_cores_default_to_the_whole_card_and_limits_go_per_card() -> None:
    cards = (
        GrantedCard(group(memory=24576), Accelerator(id="GPU-0", index=0)),
        GrantedCard(group(memory=16384, gid="t4"), Accelerator(id="GPU-1", index=1)),
    )
    envs = sliced(cards, SlicedLimits(memory_percentage=50)).envs
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "100"
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "12288m"
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "8192m"
    assert envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-0,GPU-1"


def test_sliced_limits_from_container() -> None:
    container = {
        "resources": {
            "limits": {
                "nvidia.com/gpu.sliced": "1",
                "nvidia.com/gpu.sliced.cores-percentage": "10",
                "nvidia.com/gpu.sliced.memory-percentage": "25",
            }
        }
    }
    assert SlicedLimits.from_container(container, "nvidia.com/gpu") == SlicedLimits(10, 25, 0)
    assert SlicedLimits.from_container({}, "nvidia.com/gpu") == SlicedLimits()
    broken = {"resources": {"limits": {"nvidia.com/gpu.sliced.memory-mib": "1.5"}}}
    with pytest.raises(ValueError):
        SlicedLimits.from_container(broken, "nvidia.com/gpu")


def test_cuda_major() -> None:
    assert [cuda_major(v) for v in ("13.0", "12.4", "", "x.y", "11")] == [13, 12, 12, 12, 11]


def record(*cards: tuple[str, int], maker: str = "nvidia") -> AllocationRecord:
    rows = tuple(
        AcceleratorAllocation(uuid, index, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
        for uuid, index in cards
    )
    return AllocationRecord(DevicesStatus((DevicesAllocationGroup("a10g", maker, rows),)))


def test_granted_cards_in_index_order() -> None:
    node = DevicesSpec((group("13.0", 24576, 0, 1, 2),))
    cards = granted_cards(record(("GPU-2", 2), ("GPU-0", 0)), node, "nvidia")
    assert [c.card.id for c in cards] == ["GPU-0", "GPU-2"]
    response = visibility_response(cards, ENVVAR)
    assert response.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-2"}
    assert response.annotations == {}


def test_granted_cards_errors() -> None:
    node = DevicesSpec((group("13.0", 24576, 0),))
    with pytest.raises(ValueError, match="no nvidia card"):
        granted_cards(record(("GPU-0", 0), maker="amd"), node, "nvidia")
    with pytest.raises(ValueError, match="no longer"):
        granted_cards(record(("GPU-9", 9)), node, "nvidia")
    with pytest.raises(ValueError):
        visibility_response((), ENVVAR)


def test_cdi_channel_replaces_the_env_var() -> None:
    channel = Channel("nvidia", "nvidia", Strategy.CDI_ANNOTATIONS, NodeFacts(None, None))
    response = sliced(channel=channel)
    assert "NVIDIA_VISIBLE_DEVICES" not in response.envs
    assert response.annotations == {"cdi.k8s.io/gpustack-nvidia": f"nvidia.com/gpu={UUID0}"}
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m"
