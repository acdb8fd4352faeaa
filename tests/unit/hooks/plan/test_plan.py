"""The planner over the shipped sample snapshot: the pools docs/design/vectors.md names, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chain.settings import StartupEnv
from hooks.plan import plan
from tests.unit.hooks.clock import NOW

SAMPLE = Path(__file__).resolve().parents[4] / "examples" / "cluster.json"


def _plan(**overrides: str) -> list[dict[str, Any]]:
    items = json.loads(SAMPLE.read_text())["items"]
    return plan(items, overrides, StartupEnv(), NOW)


def _names(objects: list[dict[str, Any]], kind: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == kind)


def test_sample_pools() -> None:
    objects = _plan()
    assert _names(objects, "InstanceType") == [
        "gpustack--generic-linux-amd64",
        "gpustack--nvidia-a10g-linux-amd64",
        "gpustack--nvidia-tesla-t4-linux-amd64",
    ]
    flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
    t4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.capacity"
    # 5 T4 cards in two flavors (2 and 3 per node): the pool's 5 cards.
    assert (
        flavors["gpustack--amd-25-1--nvidia-tesla-t4-linux-amd64-2d"]["metadata"]["labels"][t4]
        == "2"
    )
    assert (
        flavors["gpustack--amd-25-1--nvidia-tesla-t4-linux-amd64-3d"]["metadata"]["labels"][t4]
        == "3"
    )
    a10g = flavors["gpustack--amd-25-1--nvidia-a10g-linux-amd64-1d"]["metadata"]["labels"]
    assert a10g["acceleratable.feature.gpustack.ai/nvidia-a10g.capacity"] == "1"
    # The control-plane node opted out (gpustack.ai/managed=false): it feeds nothing.
    assert "control-plane" not in _names(objects, "NodeFlavors")
    assert _names(objects, "Topology") == ["gpustack-fnv64-87bf574bea2a4f23"]


def test_aware_setting_splits_pools_by_cpu() -> None:
    names = _names(_plan(**{"instance-type-aware-cpu-manufacturer": "true"}), "InstanceType")
    assert "gpustack--amd-25-1--nvidia-tesla-t4-linux-amd64" in names
    assert "gpustack--intel-xeon-platinum-8358-linux-amd64" in names
    assert "gpustack--amd-25-1-linux-amd64" in names


def test_derived_off_authors_no_types() -> None:
    assert _names(_plan(**{"instance-type-derived-from-node": "false"}), "InstanceType") == []


def test_cli_json_and_errors(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "hooks", "plan", "--cluster", str(SAMPLE), "-o", "json"]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    kinds = {o["kind"] for o in json.loads(out.stdout)["objects"]}
    assert {"Node", "NodeFlavors", "ResourceFlavor", "InstanceType", "Topology"} <= kinds
    bad = subprocess.run(
        [*run, "--setting", "node-management-manual=maybe"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert "node-management-manual" in bad.stderr
    (tmp_path / "x.json").write_text('{"kind": "Node"}')
    bad = subprocess.run(
        [sys.executable, "-m", "hooks", "plan", "--cluster", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "List" in bad.stderr


@pytest.mark.parametrize("output", ["table", "yaml"])
def test_cli_outputs(output: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hooks", "plan", "--cluster", str(SAMPLE), "-o", output],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "gpustack--nvidia-tesla-t4-linux-amd64" in out.stdout


def test_sample_admission() -> None:
    from chain.manufacturers import manufacturers
    from hooks.plan_admission import admission

    items = json.loads(SAMPLE.read_text())["items"]
    planned = plan(items, {}, StartupEnv(), NOW)
    results = {r["name"]: r for r in admission(items, planned, manufacturers({}))}
    assert results["slice-20-percent"]["allowed"] and results["slice-20-percent"]["folded"]
    # The 4 GiB slice folds against the planned T4 pool's card memory from the catalog.
    assert results["slice-4gib"]["allowed"] and results["slice-4gib"]["folded"]
    assert not results["slice-without-memory"]["allowed"]
    assert (
        "memory-percentage or nvidia.com/gpu.sliced.memory-mib"
        in (results["slice-without-memory"]["message"])
    )
    assert "only one accelerator family" in results["two-families"]["message"]


def test_sample_instances_run_as_pods_and_meet_their_webhooks() -> None:
    """The sample's Instances: each planned with its controller's status and the Pod it runs
    as (the slice's Pod folded by the Pod webhook, the SSH one with its sidecar); the one
    asking more RAM than its unit is refused by the Instance webhook and runs no Pod."""
    from chain.manufacturers import manufacturers
    from hooks.plan_admission import admission

    items = json.loads(SAMPLE.read_text())["items"]
    planned = plan(items, {}, StartupEnv(), NOW)
    instances = {i["metadata"]["name"]: i for i in planned if i["kind"] == "Instance"}
    assert instances["notebook-slice"]["status"]["accelerator"] == "1x40%"
    assert instances["notebook-ssh"]["status"]["phase"] == "Pending"
    pods = {p["metadata"]["name"]: p for p in planned if p["kind"] == "Pod"}
    assert [c["name"] for c in pods["notebook-ssh"]["spec"]["containers"]] == ["main", "sshd"]
    results = [
        (r["kind"], r["name"], r["allowed"])
        for r in admission(items, planned, manufacturers({}))
        if r["name"].startswith(("notebook", "too-much"))
    ]
    assert results == [
        ("Instance", "notebook-slice", True),
        ("Instance", "notebook-ssh", True),
        ("Instance", "too-much-ram", False),
        ("Pod", "notebook-slice", True),
        ("Pod", "notebook-ssh", True),
    ]
