"""The planner runs the queue and status hooks: the sample snapshot plus the node agents' Devices
and Kueue's word on one queue gives the vectors' views in the InstanceTypes' status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    Devices,
    DevicesGroup,
    DevicesSpec,
    LogicalSliced,
)
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.settings import StartupEnv
from hooks.plan import plan, table
from tests.unit.hooks.clock import NOW

SAMPLE = Path(__file__).resolve().parents[4] / "examples" / "cluster.json"
A10G = "gpustack--nvidia-a10g-linux-amd64"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
SLICEABLE = AcceleratorStatus(logical_sliced=LogicalSliced(128, True))


def _devices(node: str, akey: str, group_id: str, cards: int, rows: dict[int, Any]) -> Any:
    """A node's Devices as the agent reports it, with the worker's mirrored labels."""
    accelerators = tuple(Accelerator(f"GPU-{node}-{n}", n, status=SLICEABLE) for n in range(cards))
    ledger = tuple(
        AcceleratorAllocation(f"GPU-{node}-{n}", n, mode, remaining=left)
        for n, (mode, left) in rows.items()
    )
    labels = {
        "gpustack.ai/managed": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        f"acceleratable.feature.gpustack.ai/{akey}": "true",
        "general.feature.gpustack.ai/amd-25-1": "true",
    }
    group = DevicesGroup(group_id, "nvidia", group_id, 15360, accelerators=accelerators)
    status = DevicesStatus((DevicesAllocationGroup(group_id, "nvidia", ledger),))
    return Devices(node, DevicesSpec((group,)), status, labels).render()


def _kueue_queue(name: str) -> dict[str, Any]:
    """A ClusterQueue as Kueue reports it in the snapshot (spec is the queue hook's to plan)."""
    condition = {"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit"}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "generation": 1},
        "spec": {"stopPolicy": "None"},
        "status": {"conditions": [condition]},
    }


def _snapshot() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(SAMPLE.read_text())["items"]
    return [
        *items,
        _devices("a10g-1", "nvidia-a10g", "a10g", 1, {}),
        _devices("t4-1", "nvidia-tesla-t4", "tesla-t4", 2, {1: (Mode.SLICED, 1_280_000)}),
        _devices("t4-2", "nvidia-tesla-t4", "tesla-t4", 3, {0: (Mode.EXCLUSIVE, 0)}),
        _kueue_queue(A10G),
    ]


def test_views_and_queues_are_planned() -> None:
    objects = plan(_snapshot(), {}, StartupEnv(), NOW)
    types = {o["metadata"]["name"]: o for o in objects if o["kind"] == "InstanceType"}
    a10g = types[A10G]["status"]
    # vectors: one free A10G; Kueue reported the queue Active.
    assert a10g["acceleratorSummary"] == "1/1 1/10 100/100 0/0"
    assert (a10g["phase"], a10g["phaseMessage"]) == ("Active", "Can admit")
    assert a10g["entrance"] == "gpustack-fnv64-c4680bb149644f1c"
    # T4: t4-1 one free + one sliced to 80 %, t4-2 two free + one exclusive.
    t4 = types[T4]["status"]
    assert t4["acceleratorSummary"] == "2/3 2/30 100/380 0/0"
    assert t4["phase"] == "Pending"  # planned queue, Kueue has not seen it
    # CPU pool: 16c (x3 = 48) + 8c + 4c (x2 = 8) + 48c flavors; the largest node has 48.
    assert types[GENERIC]["status"]["cpuSummary"] == "48/112"
    queues = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue")
    assert queues == [GENERIC, A10G, T4]
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert {q["metadata"]["namespace"] for q in local} == {"default", "team-a"}
    assert len(local) == 6


def test_table_shows_views_and_queues() -> None:
    text = table(plan(_snapshot(), {}, StartupEnv(), NOW))
    assert "ACCELERATOR(EX/SH/SL/PT)" in text
    assert "1/1 1/10 100/100 0/0" in text
    assert "ClusterQueues" in text and "credits.gpustack.ai/nvidia" in text
