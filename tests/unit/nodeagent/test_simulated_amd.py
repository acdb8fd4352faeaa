"""The real AMD detector over the shipped simulated AMD node, and what the simulation says
about its host (the recording the detector tests replay agrees with the shipped profile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.simulate.host import simulated_host
from nodeagent.simulate.profile import read_profile_file
from nodeagent.vendors.amd.simulate import SimulatedAmdSmi, parse_amd_profile
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.vendor_data import recorded


def test_two_mi300x() -> None:
    (group,) = detect("mi300x-x2")
    assert (group.id, group.manufacturer, group.name) == (
        "instinct-mi300x",
        "amd",
        "AMD Instinct MI300X",
    )
    assert (group.memory, group.cores, group.compute_capability) == (196592, 304, "gfx942")
    assert (group.driver_version, group.runtime_version) == ("6.10.5", "6.4.1")
    assert [card.id for card in group.accelerators] == [
        "GPU-5b4c6e3a7d2f1a09",
        "GPU-1e0f2d3c4b5a6978",
    ]
    assert [card.physical_indexes for card in group.accelerators] == [(1, 128), (2, 129)]
    assert {card.topology.numa_affinity for card in group.accelerators} == {"0"}


def test_the_profile_agrees_with_the_recorded_answers() -> None:
    recording = recorded("amd", "mi300x-x8")["cards"]
    path, body = read_profile_file("mi300x-x2")
    smi = SimulatedAmdSmi(parse_amd_profile(path.stem, body))
    for handle, card in enumerate(recording[:2]):
        asic = smi.amdsmi_get_gpu_asic_info(handle)
        for key in ("market_name", "device_id", "asic_serial", "num_compute_units"):
            assert asic[key] == card["asic_info"][key]
        assert smi.amdsmi_get_gpu_device_bdf(handle) == card["bdf"]
        assert (
            smi.amdsmi_get_gpu_vram_usage(handle)["vram_total"] == card["vram_usage"]["vram_total"]
        )


def test_the_simulated_host_has_the_nodes_the_plugin_injects() -> None:
    with simulated_host("mi300x-x2") as host:
        assert host.nvml is None and "smi" in host.injected["amd"]
        assert host.device_nodes is not None
        for path in ("/dev/kfd", "/dev/dri/card1", "/dev/dri/renderD129"):
            assert host.device_nodes.exists(path)
        assert not host.device_nodes.exists("/dev/dri/card3")


def test_a_profile_of_an_unsimulated_manufacturer_is_refused(tmp_path: Path) -> None:
    profile = tmp_path / "npu.yaml"
    profile.write_text("manufacturer: acme\ncards: []\n")
    refused = pytest.raises(
        ValueError, match="'acme' hardware; simulated here: nvidia, amd, ascend"
    )
    with refused, simulated_host(str(profile)):
        pass
