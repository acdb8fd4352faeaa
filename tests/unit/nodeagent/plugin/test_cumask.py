"""AMD compute windows (`HSA_CU_MASK`): the atoms, the smallest slice, alignment and placement,
with the seed's two figures (9 % on 60 CU / 3 SE, 3 % on 304 CU / 8 XCC) as literals."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.accelerators import Accelerator
from chain.devices import DevicesGroup
from nodeagent.plugin.grants import GrantedCard, SimulatedNodes, SlicedLimits, SliceRequest
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.response import DeviceNode, Mount
from nodeagent.vendors.amd.grants import Amd
from nodeagent.vendors.common.cumask import (
    Topology,
    delivered_percentage,
    mask_entry,
    place,
    shape,
    window_length,
)
from nodeagent.vendors.common.kfd_topology import KFD_NODES, card_topology, render_properties

MI300X = Topology("gfx942", 304, shader_engines=32, xcc=8)
RDNA_60 = Topology("gfx1100", 60, shader_engines=3)
LIB = "/var/lib/gpustack/operator/lib/amd"


def test_the_smallest_slice_is_a_property_of_the_card() -> None:
    assert shape(RDNA_60).minimum_percentage() == 9
    assert shape(MI300X).minimum_percentage() == 3
    with pytest.raises(ValueError, match="its smallest slice is 9%"):
        window_length(RDNA_60, 8)
    assert window_length(RDNA_60, 9) == 6  # one WGP per shader engine
    with pytest.raises(ValueError, match="its smallest slice is 3%"):
        window_length(MI300X, 2)
    assert window_length(MI300X, 3) == 8  # one CU per XCC


def test_a_request_missing_the_atom_is_aligned_down() -> None:
    assert window_length(MI300X, 25) == 72  # 76 CUs, down to a multiple of 8
    assert delivered_percentage(MI300X, 72) == 23
    assert window_length(MI300X, 100) == 304
    assert window_length(RDNA_60, 50) == 30  # 15 WGPs, a multiple of 3


def test_cards_a_mask_cannot_be_derived_for() -> None:
    with pytest.raises(ValueError, match="no XCC count"):
        shape(Topology("gfx942", 304))
    with pytest.raises(ValueError, match="odd"):
        shape(Topology("gfx1100", 61, shader_engines=3))
    with pytest.raises(ValueError, match="unrecognised GPU architecture"):
        shape(Topology("gfx803", 64, shader_engines=4))
    with pytest.raises(ValueError, match="not a share"):
        window_length(MI300X, 101)


def test_windows_are_placed_beside_each_other() -> None:
    assert place(MI300X, 72, []) == 0
    assert place(MI300X, 72, [(0, 72)]) == 72
    assert place(MI300X, 72, [(0, 72), (72, 72), (144, 72)]) == 216
    # No free window: the least overlapping one, lowest start first.
    assert place(MI300X, 152, [(0, 152), (152, 152)]) == 0
    assert place(MI300X, 152, [(0, 152), (152, 150)]) == 152  # 2 CUs of overlap, not 152
    assert mask_entry(1, 72, 72) == "1:72-143"


def mi300x(render: int = 128) -> GrantedCard:
    group = DevicesGroup(
        id="instinct-mi300x",
        manufacturer="amd",
        name="AMD Instinct MI300X",
        memory=196592,
        compute_capability="gfx942",
    )
    return GrantedCard(group, Accelerator("GPU-5b4c", 0, physical_indexes=(1, render)))


HOST = SimulatedNodes(
    {"/dev/kfd": 0, "/dev/dri/card1": 1, "/dev/dri/renderD128": 128},
    {
        f"{KFD_NODES}/0/properties": render_properties({"cpu_cores_count": 96}),
        f"{KFD_NODES}/1/properties": render_properties(
            {
                "simd_count": 1216,
                "array_count": 32,
                "simd_arrays_per_engine": 1,
                "simd_per_cu": 4,
                "drm_render_minor": 128,
                "num_xcc": 8,
            }
        ),
    },
)


def test_the_topology_is_read_from_the_cards_kfd_node() -> None:
    assert card_topology(HOST, mi300x()) == MI300X
    with pytest.raises(ValueError, match="no KFD node has render minor 129"):
        card_topology(HOST, mi300x(129))


def slice_request(pods: Path, container: str, cores: int) -> SliceRequest:
    limits = SlicedLimits(cores_percentage=cores, memory_percentage=25)
    return SliceRequest(limits, "uid-1", container, Channel("amd", "amd"), pods_dir=str(pods))


def test_an_amd_slice(tmp_path: Path) -> None:
    response = Amd().sliced((mi300x(),), slice_request(tmp_path, "main", 25), HOST)
    work = f"{tmp_path}/uid-1/c-main"
    assert response.envs == {
        "AMD_VISIBLE_DEVICES": "none",
        "ROCR_VISIBLE_DEVICES": "GPU-5b4c",
        "VROCM_LEDGER_PATH": "/var/run/vrocm/ledger",
        "VROCM_DEVICE_MEMORY_LIMIT_0": "49148",
        "HSA_CU_MASK": "0:0-71",
        "LIBVROCM_LOG_LEVEL": "1",
    }
    assert response.devices == tuple(
        DeviceNode(p, p) for p in ("/dev/kfd", "/dev/dri/card1", "/dev/dri/renderD128")
    )
    assert response.mounts == (
        Mount("/etc/ld.so.preload", f"{LIB}/ld.so.preload", True),
        Mount("/usr/local/vrocm/libvrocm.so", f"{LIB}/libvrocm.so", True),
        Mount("/usr/local/vrocm/rocm-monitor", f"{LIB}/rocm-monitor", True),
        Mount("/usr/local/vrocm/rocm-cumask-check", f"{LIB}/rocm-cumask-check", True),
        Mount("/var/run/vrocm", f"{work}/run/vrocm"),
    )
    assert response.directories == (work, f"{work}/run/vrocm")
    # The window is recorded outside what the container mounts.
    assert Path(work, "amd-cumask").read_text() == "GPU-5b4c 0 72\n"


def test_a_second_slice_is_placed_beside_the_first_and_a_retry_keeps_its_window_across_restarts(
    tmp_path: Path,
) -> None:
    amd = Amd()
    amd.sliced((mi300x(),), slice_request(tmp_path, "a", 25), HOST)
    second = amd.sliced((mi300x(),), slice_request(tmp_path, "b", 25), HOST)
    assert second.envs["HSA_CU_MASK"] == "0:72-143"
    restarted = Amd()  # a new agent process: the windows are on the host, not in memory
    again = restarted.sliced((mi300x(),), slice_request(tmp_path, "a", 25), HOST)
    assert again.envs["HSA_CU_MASK"] == "0:0-71"
    with pytest.raises(ValueError, match="smallest slice is 3%"):
        amd.sliced((mi300x(),), slice_request(tmp_path, "c", 2), HOST)
