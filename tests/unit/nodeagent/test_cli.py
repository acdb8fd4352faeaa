"""`python -m nodeagent detect`, run as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chain.devices import DevicesSpec
from nodeagent.simulate import shipped_profiles
from tests.unit.nodeagent.helpers import detect

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", "detect", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("profile", shipped_profiles())
def test_detect_prints_the_groups_of_every_profile(profile: str) -> None:
    done = run("--simulate", profile, "-o", "json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert DevicesSpec.parse({"groups": printed}).groups == detect(profile)


def test_yaml_is_the_default() -> None:
    done = run("--simulate", "a10gx1")
    assert done.returncode == 0, done.stderr
    (group,) = yaml.safe_load(done.stdout)
    assert (group["id"], group["name"], group["memory"]) == ("a10g", "NVIDIA A10G", 24563)


def test_no_driver_prints_an_empty_list() -> None:
    # This machine has no NVIDIA card on its bus (or, with --no-pci-check, no driver).
    for extra in ((), ("--no-pci-check",)):
        done = run(*extra, "-o", "json")
        # A crash (no output, or not JSON) fails here; only cards really found skip.
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        if found:
            pytest.skip("this machine has an NVIDIA driver and cards")
        assert found == []


def test_profile_file_and_environment(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[3] / "nodeagent/simulate/profiles/t4x4.yaml"
    copy = tmp_path / "mine.yaml"
    copy.write_text(source.read_text())
    done = run(
        "--simulate", str(copy), "-o", "json", env={"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"}
    )
    assert done.returncode == 0, done.stderr
    assert [group["id"] for group in json.loads(done.stdout)] == ["tesla-t4-16g"]


def test_json_profile_with_a_failing_pass(tmp_path: Path) -> None:
    profile = {
        "models": {"t4": {"name": "Tesla T4", "memoryMib": 15360}},
        "cards": [{"model": "t4"}],
        "faults": [{"kind": "panic"}],
    }
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(profile))
    done = run("--simulate", str(path), "-o", "json")
    assert done.returncode == 1
    assert json.loads(done.stdout) == []
    assert "nvidia: detection failed: simulated fault" in done.stderr


def test_pci_class_prefixes_can_hide_the_cards() -> None:
    done = run("--simulate", "l4x2", "-o", "json", env={"GPUSTACK_PCI_CLASS_PREFIXES": "12"})
    assert done.returncode == 0 and json.loads(done.stdout) == []
    done = run(
        "--simulate",
        "l4x2",
        "-o",
        "json",
        "--no-pci-check",
        env={"GPUSTACK_PCI_CLASS_PREFIXES": "12"},
    )
    assert len(json.loads(done.stdout)) == 1


def test_usage_errors() -> None:
    unknown = run("--simulate", "no-such-profile")
    assert unknown.returncode == 2 and "no profile 'no-such-profile'" in unknown.stderr
    maker = run("--manufacturer", "acme")
    assert maker.returncode == 2 and "unknown acme" in maker.stderr


def test_simulate_names_one_profile_or_one_per_node() -> None:
    from nodeagent.cli import simulated_profile

    assert simulated_profile(None, "node-a") is None
    assert simulated_profile("t4x4", "node-a") == "t4x4"
    per_node = "node-a=t4x4,node-b=l4x2"
    assert simulated_profile(per_node, "node-a") == "t4x4"
    assert simulated_profile(per_node, "node-b") == "l4x2"
    assert simulated_profile(per_node, "node-c") is None  # its real hardware


def test_each_agent_journals_to_its_own_file_beside_the_pods_dir() -> None:
    from nodeagent.cli import _journal_path

    pods = "/var/lib/gpustack/operator/pods"
    assert _journal_path(None, pods, "nvidia") == Path(
        "/var/lib/gpustack/operator/nvidia-allocations.journal"
    )
    assert _journal_path(None, pods + "/", "all") == Path(
        "/var/lib/gpustack/operator/allocations.journal"
    )
    assert _journal_path("/elsewhere/j", pods, "nvidia") == Path("/elsewhere/j")
    assert _journal_path("off", pods, "nvidia") is None
