"""The main job: the chain running on the real control plane over a simulated GPU cluster.

It builds (first run) and starts the testbed, installs the shipped manifests, registers the Nodes
of `examples/cluster.json` (CPU-only nodes, one A10G node, two T4 nodes, an opted-out control
plane node) and shows what the chain made of them, next to what the offline planner predicted.
Later stages of the chain (queues, views, verdicts) are added here as they land.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from chain.settings import StartupEnv
from hooks.plan import plan, table
from testbed import build
from testbed.harness import Testbed
from testbed.install import REPO, install
from testbed.kube import Obj, wait_for
from testbed.nodes import register_node

SAMPLE = REPO / "examples" / "cluster.json"
LIVE_KINDS = (
    ("v1", "Node"),
    ("gpustack.ai/v1alpha1", "NodeFlavors"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "Topology"),
    ("worker.gpustack.ai/v1alpha1", "InstanceType"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
)


def _signature(objects: list[Obj]) -> dict[str, str]:
    """What must agree between plan and cluster: each flavor's capacity, each type's spec."""
    out = {}
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "ResourceFlavor":
            labels = obj["metadata"].get("labels") or {}
            out[f"flavor/{name}"] = next(v for k, v in labels.items() if k.endswith(".capacity"))
        elif obj["kind"] == "InstanceType":
            out[f"type/{name}"] = json.dumps(obj["spec"].get("unitResources"), sort_keys=True)
    return out


def _live(bed: Testbed) -> list[Obj]:
    objects: list[Obj] = []
    for api, kind in LIVE_KINDS:
        for obj in bed.kube.list(api, kind):
            objects.append({**obj, "apiVersion": api, "kind": kind})
    return [o for o in objects if o["metadata"]["name"] != "testbed-control-plane"]


def main(root: Path | None = None) -> int:
    took = build.ensure()
    print(
        "build: " + ", ".join(f"{k} {'cached' if v == 0 else f'{v:.0f}s'}" for k, v in took.items())
    )
    run_root = Path(tempfile.mkdtemp(prefix="gpustack-demo-")) if root is None else root
    bed = Testbed(run_root)
    started = time.monotonic()
    bed.up()
    try:
        version = bed.kube.request("GET", "/version")["gitVersion"]
        print(
            f"testbed up in {time.monotonic() - started:.0f}s: kube-apiserver {version}, "
            + ", ".join(f"{n} {s.split(' ')[0]}" for n, s in bed.status().items())
        )
        install(bed)
        print("chain installed from manifests/ (hooks served by gunicorn on 127.0.0.1)")

        snapshot = json.loads(SAMPLE.read_text())["items"]
        nodes = [o for o in snapshot if o["kind"] == "Node"]
        for node in nodes:
            register_node(bed.kube, node)
        for ns in (o for o in snapshot if o["kind"] == "Namespace"):
            bed.kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns["metadata"]["name"]},
                }
            )
        print(f"registered {len(nodes)} simulated Nodes from {SAMPLE.relative_to(REPO)}")

        expected = _signature(plan(snapshot, {}, StartupEnv.from_env(os.environ)))
        wait_for(
            lambda: _signature(_live(bed)) == expected,
            120,
            "the cluster to converge to the planner's pools",
        )
        print(
            f"converged in {time.monotonic() - started:.0f}s; the cluster matches the offline "
            f"planner ({sum(k.startswith('flavor/') for k in expected)} flavors, "
            f"{sum(k.startswith('type/') for k in expected)} InstanceTypes)\n"
        )
        print(table(_live(bed)))
    finally:
        bed.down()
    print("testbed stopped")
    return 0
