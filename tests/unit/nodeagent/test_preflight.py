"""`nodeagent preflight`: its three questions, states, depths and exit status, on this machine
(no accelerator), on simulated profiles, and on host answers that disagree."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chain.accelerators import Accelerator, AcceleratorStatus, LogicalSliced
from chain.devices import DevicesGroup
from chain.manufacturers import manufacturers
from nodeagent.detect.remembered import DetectionPass
from nodeagent.plugin.grants import DeviceNodes
from nodeagent.preflight import (
    Depth,
    State,
    count_host_cards,
    preflight,
)
from nodeagent.simulate import shipped_profiles
from nodeagent.vendors.ascend.preflight import ReadOnlyShare
from nodeagent.vendors.mthreads.grants import MThreads
from tests.unit.nodeagent.helpers import detect, nodeagent_command, shared_object

ROOT = Path(__file__).resolve().parents[3]
TABLE = manufacturers({})
CLOCK = lambda: datetime(2026, 12, 2, tzinfo=UTC)  # noqa: E731
LIB = "var/lib/gpustack/operator/lib/nvidia"


def answers(status: int, output: str, seen: list[list[str]] | None = None):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> tuple[int, str]:
        if seen is not None:
            seen.append(list(argv))
        return status, output

    return run


def no_cli(argv: Sequence[str]) -> tuple[int, str]:
    raise OSError(f"{argv[0]} is not installed")


def t4_pass() -> DetectionPass:
    return DetectionPass("nvidia", detect("t4x4"))


def staged(root: Path) -> Path:
    """HAMi-core's CUDA 13 build under the host root: a real shared object and its list."""
    shared_object(root / LIB / "cuda-13/libvgpu.so")
    (root / LIB / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    return root


def test_a_host_without_accelerators_passes_and_says_so(tmp_path: Path) -> None:
    report = preflight([DetectionPass("nvidia", ())], TABLE, DeviceNodes(), str(tmp_path), no_cli)
    [entry] = report.accelerators
    assert entry.detection.state == State.OK and entry.detection.accelerators == 0
    assert entry.checks == ()
    assert entry.detection.host is not None and "not installed" in entry.detection.host.reason
    assert report.exit_status() == 0


def test_a_staged_sliced_node_answers_every_question_ok(tmp_path: Path) -> None:
    root = str(staged(tmp_path))
    host = "\n".join(f"GPU {n}: Tesla T4 (UUID: GPU-{n})" for n in range(4))
    seen: list[list[str]] = []
    report = preflight([t4_pass()], TABLE, DeviceNodes(), root, answers(0, host, seen), clock=CLOCK)
    assert seen == [["chroot", root, "nvidia-smi", "-L"]]
    [entry] = report.accelerators
    assert entry.detection.host is not None and entry.detection.host.accelerators == 4
    capabilities = {(check.capability, check.state, check.depth) for check in entry.checks}
    assert capabilities == {
        ("isolation-library", State.OK, Depth.MEASURED),
        ("whole-card-injection", State.OK, Depth.SIMULATED),
        ("sliced-runtime-loaded", State.OK, Depth.SIMULATED),
        ("sliced-quota-in-force", State.OK, Depth.SIMULATED),
        ("sidecar-visibility", State.OK, Depth.SIMULATED),
        ("co-tenancy", State.OK, Depth.SIMULATED),
    }
    assert len(entry.checks) == 1 + 4 * 5
    library = entry.checks[0]  # one row for the group, before its cards'
    assert library.accelerator == "nvidia-tesla-t4"
    assert library.detail.endswith(f"/{LIB}/cuda-13/libvgpu.so")
    quota = next(c for c in entry.checks if c.capability == "sliced-quota-in-force")
    assert quota.detail == "CUDA_DEVICE_MEMORY_LIMIT_0=8192m, CUDA_DEVICE_SM_LIMIT=50"
    # No container ran; only the library was loaded (in a subprocess).
    assert [c.capability for c in entry.checks if c.depth == Depth.MEASURED] == [
        "isolation-library"
    ]
    assert report.exit_status() == 0
    assert report.render()["accelerators"][0]["timestamp"] == "2026-12-02T00:00:00Z"


def test_an_unstaged_library_is_unavailable(tmp_path: Path) -> None:
    report = preflight([t4_pass()], TABLE, DeviceNodes(), str(tmp_path), no_cli)
    loaded = [c for c in report.accelerators[0].checks if c.capability == "sliced-runtime-loaded"]
    assert {c.state for c in loaded} == {State.UNAVAILABLE}
    assert "cuda-13/libvgpu.so" in loaded[0].reason
    [library] = [c for c in report.accelerators[0].checks if c.capability == "isolation-library"]
    assert library.state == State.UNAVAILABLE
    assert "/var/lib/gpustack/operator/lib/nvidia/cuda-13/libvgpu.so: missing" in library.reason
    assert "a sliced allocation is refused" in library.reason
    assert report.exit_status() == 1


def test_a_placeholder_library_is_unavailable_however_it_is_named(tmp_path: Path) -> None:
    root = staged(tmp_path)
    (root / LIB / "cuda-13/libvgpu.so").write_text("staged\n")
    report = preflight([t4_pass()], TABLE, DeviceNodes(), str(root), no_cli)
    [library] = [c for c in report.accelerators[0].checks if c.capability == "isolation-library"]
    assert "libvgpu.so: not an ELF shared object" in library.reason
    assert report.exit_status() == 1


def test_slices_the_driver_makes_need_no_library(tmp_path: Path) -> None:
    sliceable = AcceleratorStatus(logical_sliced=LogicalSliced(count=4))
    card = Accelerator(id="gpu-0", index=0, status=sliceable)
    group = DevicesGroup(id="s4000", manufacturer="mthreads", name="S4000", memory=49152)
    passed = DetectionPass("mthreads", (replace(group, accelerators=(card,)),))
    report = preflight([passed], TABLE, DeviceNodes(str(tmp_path)), str(tmp_path), no_cli)
    [library] = [c for c in report.accelerators[0].checks if c.capability == "isolation-library"]
    assert (library.state, library.depth) == (State.OK, Depth.DECLARED)
    assert "preloads no library" in library.detail
    assert report.exit_status() == 0


def test_a_simulated_node_is_checked_like_a_real_one(tmp_path: Path) -> None:
    """`--simulate` reads the same staged directory (here `--lib-dir`): not staged, refused;
    staged, ok."""
    lib = tmp_path / "lib"
    done = run("--simulate", "t4x4", "--lib-dir", str(lib), "-o", "json")
    assert done.returncode == 1, done.stderr
    [entry] = [e for e in json.loads(done.stdout)["accelerators"] if e["manufacturer"] == "nvidia"]
    [library] = [c for c in entry["checks"] if c["capability"] == "isolation-library"]
    assert library["state"] == "unavailable" and str(lib) in library["reason"]
    shared_object(lib / "nvidia" / "cuda-13" / "libvgpu.so")
    (lib / "nvidia" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    done = run("--simulate", "t4x4", "--lib-dir", str(lib), "-o", "json")
    assert done.returncode == 0, done.stdout


def test_cards_the_host_lists_and_the_agent_cannot_see_are_unavailable(tmp_path: Path) -> None:
    host = "\n".join(f"GPU {n}: Tesla T4 (UUID: GPU-{n})" for n in range(8))
    report = preflight([t4_pass()], TABLE, DeviceNodes(), str(staged(tmp_path)), answers(0, host))
    detection = report.accelerators[0].detection
    assert detection.state == State.UNAVAILABLE
    assert "the host lists 8 cards and this agent detects 4" in detection.reason
    assert report.exit_status() == 1


def test_a_failed_pass_and_a_missing_host_root(tmp_path: Path) -> None:
    failed = DetectionPass("nvidia", (), measured=False, error="NVML: driver not loaded")
    report = preflight([failed], TABLE, DeviceNodes(), str(tmp_path / "absent"), no_cli)
    detection = report.accelerators[0].detection
    assert detection.state == State.UNAVAILABLE and "driver not loaded" in detection.reason
    assert detection.host is not None
    assert detection.host.missing_mounts == (str(tmp_path / "absent"),)


def test_unserved_slices_are_not_declared_and_the_nodes_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    amd = DetectionPass("amd", detect("mi300x-x2"))
    without_nodes = preflight([amd], TABLE, DeviceNodes(str(tmp_path)), str(tmp_path), no_cli)
    checks = without_nodes.accelerators[0].checks
    injection = [c for c in checks if c.capability == "whole-card-injection"]
    assert {c.state for c in injection} == {State.UNAVAILABLE}
    assert "/dev/kfd" in injection[0].reason
    sliced = [c for c in checks if c.mode == "sliced"]
    assert {c.state for c in sliced} == {State.UNAVAILABLE}  # a slice needs the nodes too
    sliceable = AcceleratorStatus(logical_sliced=LogicalSliced(count=4))
    card = Accelerator(id="gpu-0", index=0, status=sliceable)
    group = DevicesGroup(id="s4000", manufacturer="mthreads", name="S4000", memory=49152)
    passed = DetectionPass("mthreads", (replace(group, accelerators=(card,)),))
    unsliced = replace_responder(MThreads(), slices=False)
    monkeypatch.setattr("nodeagent.preflight.RESPONDERS", {"mthreads": unsliced})
    report = preflight([passed], TABLE, DeviceNodes(str(tmp_path)), str(tmp_path), no_cli)
    unserved = [c for c in report.accelerators[0].checks if c.mode == "sliced"]
    assert {c.state for c in unserved} == {State.NOT_DECLARED}
    assert "serves no mthreads slices" in unserved[0].reason


def replace_responder(responder: MThreads, slices: bool) -> MThreads:
    """The responder as an agent built without its manufacturer's slice isolation has it."""
    responder.slices = slices
    return responder


def test_host_cli_counts() -> None:
    assert count_host_cards("nvidia", "GPU 0: A (UUID: x)\nGPU 1: A (UUID: y)\n") == 2
    assert count_host_cards("ascend", "\tTotal Count                    : 8\n\n\tNPU ID : 0\n") == 8
    amd = "GPU[0]\t\t: Unique ID: 0x5b4c\nGPU[1]\t\t: Unique ID: 0x1e0f\n"
    assert count_host_cards("amd", amd) == 2


def test_the_ascend_share_flag_is_read_never_written() -> None:
    class Flag:
        api = 1
        writes = 0

        def share_enabled(self, card: int, device: int) -> bool:
            return False

        def enable_share(self, card: int, device: int) -> None:
            self.writes += 1

    flag = Flag()
    dry = ReadOnlyShare(flag)
    assert dry.share_enabled(0, 0) is False
    dry.enable_share(0, 0)
    assert flag.writes == 0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return nodeagent_command("preflight", *args)


def test_preflight_on_this_machine_reports_no_accelerator() -> None:
    done = run("-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    found = {e["manufacturer"]: e["detection"]["accelerators"] for e in report["accelerators"]}
    if any(found.values()):
        pytest.skip("this machine has accelerators")
    assert set(found) == set(TABLE)
    assert report["topology"]["policy"] == "unknown"


@pytest.mark.parametrize("profile", shipped_profiles())
def test_preflight_runs_on_every_simulated_profile(profile: str) -> None:
    done = run("--simulate", profile, "-o", "json")
    # 1: the sliced libraries are not staged on this machine; nothing else may fail.
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    detected = [e for e in report["accelerators"] if e["detection"]["accelerators"]]
    assert len(detected) == 1 and detected[0]["detection"]["state"] == "ok"
    unavailable = {c["capability"] for c in detected[0]["checks"] if c["state"] == "unavailable"}
    assert unavailable <= {"isolation-library", "sliced-runtime-loaded", "partitioning"}
    assert (done.returncode == 1) == bool(unavailable)


def test_thead_cards_in_mig_mode_declare_their_partitions() -> None:
    done = run("--simulate", "ppu-zw810e-mig-x2", "-o", "json")
    report = json.loads(done.stdout)
    (thead,) = [e for e in report["accelerators"] if e["detection"]["accelerators"]]
    rows = [(c["capability"], c["mode"], c["state"], c["depth"]) for c in thead["checks"]]
    partitioning = ("mig-partitioning", "partitioned", "ok", "declared")
    assert rows.count(partitioning) == 2, rows
    assert done.returncode == 0, done.stdout
