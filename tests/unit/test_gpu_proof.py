"""The GPU proof's pure parts (testbed/gpu/prove.py) against nvidia-smi output written by hand
in the shape nvidia-smi prints it; the proof itself needs a card (docs/nodeagent.md, "On a real
GPU")."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from chain.devices import DevicesGroup
from nodeagent.plugin.grants import LD_SO_PRELOAD
from nodeagent.plugin.isolation import OFFERED, IsolationCheck
from nodeagent.plugin.response import Mount
from nodeagent.vendors.common.hami_core import LIBVGPU
from testbed.gpu import prove, workload

UUID = "GPU-4f1e2a3b-1111-2222-3333-444455556666"
SMI_Q = """
==============NVSMI LOG==============

Timestamp                                 : Fri Dec  4 18:00:00 2026
Driver Version                            : 580.159.04
CUDA Version                              : 13.0

Attached GPUs                             : 1
GPU 00000000:00:1E.0
    Product Name                          : NVIDIA H200
    Product Brand                         : NVIDIA
    Display Mode                          : Disabled
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    Serial Number                         : 1654123456789
    GPU UUID                              : GPU-4f1e2a3b-1111-2222-3333-444455556666
    Minor Number                          : 0
    PCI
        Bus                               : 0x00
        Device                            : 0x1E
        Domain                            : 0x0000
        Bus Id                            : 00000000:00:1E.0
    FB Memory Usage
        Total                             : 143771 MiB
        Reserved                          : 551 MiB
        Used                              : 0 MiB
        Free                              : 143219 MiB
    BAR1 Memory Usage
        Total                             : 262144 MiB
"""
SMI_CSV = f"0, NVIDIA H200, {UUID}, 00000000:00:1E.0, 143771, 9.0, 580.159.04, Disabled\n"
TOPOLOGY = (
    "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \t0-15\t0\t\tN/A\n"
    "\nLegend:\n\n  X    = Self\n"
)
GROUP: dict[str, Any] = {
    "id": "h200",
    "manufacturer": "nvidia",
    "name": "NVIDIA H200",
    "memory": 143771,
    "cores": 16896,
    "driverVersion": "580.159.04",
    "runtimeVersion": "13.0",
    "computeCapability": "9.0",
    "family": "Hopper",
    "accelerators": [
        {
            "id": UUID,
            "index": 0,
            "physicalIndexes": [0],
            "topology": {
                "pciBusId": "0000:00:1e.0",
                "pciRootId": "0000:00:1e.0",
                "pciClass": "030200",
                "numaAffinity": "0",
                "cpuAffinity": "0-15",
            },
            "status": {
                "unhealthy": False,
                "logicalSliced": {"count": 128, "coresPercentageOvercommit": True},
            },
        }
    ],
}


def compared(group: dict[str, Any], csv: str = SMI_CSV) -> list[prove.Comparison]:
    report = prove.parse_smi_q(SMI_Q)
    rows = prove.parse_smi_csv(csv)
    numa = prove.parse_topology(TOPOLOGY)
    return prove.compare([group], rows, report, numa, {"0000:00:1e.0": "0"})


def test_bus_ids_of_nvidia_smi_and_sysfs_are_one_spelling() -> None:
    assert prove.bus_id("00000000:00:1E.0") == "0000:00:1e.0"
    assert prove.bus_id("0000:00:1e.0") == "0000:00:1e.0"
    assert prove.bus_id("") == ""


def test_the_q_report_gives_versions_and_each_cards_nested_values() -> None:
    report = prove.parse_smi_q(SMI_Q)
    assert report.values["Driver Version"] == "580.159.04"
    assert report.cuda_version == "13.0"
    [card] = report.cards
    assert card.bus_id == "0000:00:1e.0"
    assert card.values["Product Name"] == "NVIDIA H200"
    assert card.values["MIG Mode/Current"] == "Disabled"
    assert card.values["FB Memory Usage/Total"] == "143771 MiB"
    assert card.values["BAR1 Memory Usage/Total"] == "262144 MiB"
    assert card.values["PCI/Bus Id"] == "00000000:00:1E.0"


def test_csv_rows_and_topology_numa() -> None:
    [row] = prove.parse_smi_csv(SMI_CSV)
    assert row["uuid"] == UUID and row["memory.total"] == "143771"
    assert prove.parse_topology(TOPOLOGY) == {"GPU0": "0"}
    assert prove.parse_topology("no header\n") == {}


def test_a_detected_card_equal_to_nvidia_smi_matches_every_field() -> None:
    results = compared(GROUP)
    assert [item.field for item in results] == [
        "name",
        "memory MiB",
        "UUID",
        "PCI bus id",
        "compute capability",
        "driver version",
        "CUDA version",
        "MIG mode",
        "NUMA (topo -m)",
        "NUMA (sysfs numa_node)",
    ]
    assert all(item.match for item in results), [item.line() for item in results]
    assert results[0].line().startswith("MATCH ")


def test_sysfs_no_node_on_a_one_node_host_stands_for_that_node() -> None:
    # The H200 VM of docs/nodeagent.md, "On a real GPU": numa_node -1, one host node.
    report = prove.parse_smi_q(SMI_Q)
    rows = prove.parse_smi_csv(SMI_CSV)
    numa = prove.parse_topology(TOPOLOGY)
    unplaced = {"0000:00:1e.0": "-1"}
    (one,) = [
        c for c in prove.compare([GROUP], rows, report, numa, unplaced, [0]) if "sysfs" in c.field
    ]
    assert (one.smi, one.match) == ("0", True) and "one NUMA node" in one.note
    (two,) = [
        c
        for c in prove.compare([GROUP], rows, report, numa, unplaced, [0, 1])
        if "sysfs" in c.field
    ]
    assert (two.smi, two.match) == ("", False)


def test_a_differing_field_is_a_mismatch_line() -> None:
    group = copy.deepcopy(GROUP)
    group["memory"] = 143000
    group["accelerators"][0]["status"] = {"physicalSliced": {"count": 7}}
    lines = {item.field: item for item in compared(group)}
    assert not lines["memory MiB"].match
    assert not lines["MIG mode"].match
    assert lines["memory MiB"].line().startswith("MISMATCH")


def test_ecc_restored_memory_matches_with_a_note() -> None:
    group = copy.deepcopy(GROUP)
    group["memory"] = 15360 * 16 // 15
    csv = SMI_CSV.replace("143771", "15360")
    memory = next(item for item in compared(group, csv) if item.field == "memory MiB")
    assert memory.match and "16/15" in memory.note


def test_cards_only_one_side_lists_are_mismatches() -> None:
    other = SMI_CSV.replace(UUID, "GPU-other")
    results = compared(GROUP, other)
    assert [(item.card, item.field, item.match) for item in results] == [
        (UUID, "present", False),
        ("GPU-other", "present", False),
    ]


def test_the_grant_env_is_moved_to_host_paths_and_mounts_become_binds() -> None:
    mounts = [
        Mount("/tmp/vgpu", "/work/pods/p/c-main/tmp/vgpu"),
        Mount(LD_SO_PRELOAD, "/lib/nvidia/ld.so.preload", read_only=True),
        Mount(LIBVGPU, "/lib/nvidia/cuda-13/libvgpu.so", read_only=True),
        Mount("/dev/shm", "/dev/shm"),
    ]
    envs = {"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache", "X": "/tmp/vgpux"}
    assert prove.mapped_env(envs, mounts) == {
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/work/pods/p/c-main/tmp/vgpu/cudevshr.cache",
        "X": "/tmp/vgpux",
    }
    script = prove.namespace_script(mounts).splitlines()
    binds = [line for line in script if line.startswith("mount --bind")]
    assert binds[-1] == f"mount --bind /lib/nvidia/ld.so.preload {LD_SO_PRELOAD}"
    assert not any("/dev/shm" in line for line in script)
    assert script[-1] == 'exec "$@"'


def test_the_responder_grants_the_detected_card_its_limit(tmp_path: Path) -> None:
    lib_dir = str(tmp_path / "lib")
    _, response = prove.sliced_grant(GROUP, 10240, lib_dir, str(tmp_path / "pods"))
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == UUID
    sources = {mount.container_path: mount.host_path for mount in response.mounts}
    assert sources[LIBVGPU] == f"{lib_dir}/nvidia/cuda-13/libvgpu.so"
    assert sources[LD_SO_PRELOAD] == f"{lib_dir}/nvidia/ld.so.preload"
    work = [d for d in response.directories if d.startswith(str(tmp_path))]
    assert work and all(os.path.isdir(d) for d in work)


def test_staging_writes_every_build_and_the_preload_list(tmp_path: Path) -> None:
    library = tmp_path / "libvgpu.so"
    library.write_bytes(b"\x7fELF stand-in")
    lib_dir = tmp_path / "lib"
    done = prove.stage(library, str(lib_dir))
    assert done.ok, done.stderr
    assert (lib_dir / "nvidia/cuda-13/libvgpu.so").read_bytes() == library.read_bytes()
    assert (lib_dir / "nvidia/ld.so.preload").read_text() == LIBVGPU + "\n"


def test_preflight_rows_are_read_by_manufacturer() -> None:
    answer = {
        "accelerators": [
            {"manufacturer": "amd", "detection": {"state": "ok"}, "checks": []},
            {
                "manufacturer": "nvidia",
                "detection": {"state": "ok", "host": {"command": "nvidia-smi -L"}},
                "checks": [
                    {"capability": "isolation-library", "state": "unavailable"},
                    {"capability": "whole-card-injection", "state": "ok"},
                ],
            },
        ]
    }
    assert prove.nvidia_detection(answer)["state"] == "ok"
    assert prove.isolation_rows(answer) == [
        {"capability": "isolation-library", "state": "unavailable"}
    ]
    proof = prove.Proof(Path("."))
    prove.slicing_verdicts(proof, answer, None)
    assert [passed for _, passed, _ in proof.rows] == [False, False]


def test_the_workload_result_line_is_read_back() -> None:
    assert prove.RESULT_TAG == workload.RESULT_TAG
    report = {"device": "NVIDIA H200", "over": {"ok": False, "out_of_memory": True}}
    done = prove.Run(["w"], 0, "noise\n" + workload.RESULT_TAG + json.dumps(report) + "\n")
    assert prove.workload_report(done) == report
    assert prove.workload_report(prove.Run(["w"], 1))["error"] == "no result (exit 1)"


def test_a_command_that_cannot_run_or_outlives_its_timeout_is_reported() -> None:
    assert "could not be run" in prove.run(["/nonexistent/binary"]).error
    slow = prove.run(["sleep", "5"], timeout_s=0.2)
    assert slow.error.startswith("timed out") and not slow.ok


@pytest.mark.parametrize("raw", ["[N/A]", "N/A", "", "Not Supported"])
def test_values_nvidia_smi_cannot_give(raw: str) -> None:
    assert prove.no_value(raw)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_standin_staged_by_the_proof_passes_the_agents_loading_check(tmp_path: Path) -> None:
    """Without HAMi-core the proof stages the testbed's stand-in: the agent's own check
    (present, an ELF of this machine, dlopen in a subprocess) then offers the group's slices."""
    proof = prove.Proof(tmp_path)
    library = prove.standin_part(proof, prove.STANDIN, tmp_path)
    assert library is not None and proof.rows[-1][1]
    lib_dir = str(tmp_path / "lib")
    assert prove.stage(library, lib_dir).ok
    group = DevicesGroup.parse(GROUP, "group")
    assert IsolationCheck(lib_dir=lib_dir)(group) == OFFERED
    assert IsolationCheck(lib_dir=str(tmp_path / "empty"))(group).problem.count("missing") == 2
