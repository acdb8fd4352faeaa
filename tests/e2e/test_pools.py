"""Nodes to pools on the real control plane, with the shipped manifests.

Nodes are registered as a kubelet would; their hardware reaches them the real way: an
nfd-worker-style NodeFeature (CPU identity) and a device-manager-style NodeFeature (accelerator
labels) go through the real NFD master, which labels the Nodes; then the real Metacontroller
calls the flavor and entrance hooks (served by gunicorn from the shipped Deployments' commands).
"""

from __future__ import annotations

import importlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from hooks.recheck import WRITE_RECHECK_SECONDS, parent_write_outstanding
from kubeapi import Kube, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.nodes import (
    NFD,
    NFD_NS,
    T4_KEY,
    T4_POOL,
    device_manager_feature,
    nfd_worker_feature,
    node_object,
    register_node,
)
from tests.e2e.test_instancetypes import instance_type

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
CPU_FLAVOR = "gpustack--amd-25-1-linux-amd64-16c"
T4_FLAVOR = "gpustack--amd-25-1--nvidia-tesla-t4-linux-amd64-2d"
CPU_POOL = "gpustack--generic-linux-amd64"


def _add_node(kube: Kube, name: str, cards: int = 0) -> None:
    register_node(kube, node_object(name, cpu="16"))
    kube.apply(nfd_worker_feature(name))
    if cards:
        kube.apply(device_manager_feature(name, cards))


def _remove_node(kube: Kube, name: str) -> None:
    kube.delete(NFD, "NodeFeature", name, NFD_NS)
    kube.delete(NFD, "NodeFeature", f"{name}-gpustack-device-manager", NFD_NS)
    kube.delete("v1", "Node", name)


def _label(kube: Kube, kind: str, name: str, key: str, api: str = KUEUE) -> str | None:
    obj = kube.get(api, kind, name)
    return ((obj or {}).get("metadata", {}).get("labels") or {}).get(key)


def test_nodes_become_pools(testbed: Testbed, chain: Installed) -> None:
    kube = testbed.kube
    tag = uuid.uuid4().hex[:6]
    gpu_nodes = [f"gpu-{tag}-{i}" for i in range(2)]
    cpu_node = f"cpu-{tag}"
    for node in gpu_nodes:
        _add_node(kube, node, cards=2)
    _add_node(kube, cpu_node)
    try:
        # NFD master turned the NodeFeatures into labels, the node decorator managed the Nodes.
        for node in [*gpu_nodes, cpu_node]:
            wait_for(
                lambda n=node: _label(kube, "Node", n, "gpustack.ai/managed", "v1") == "true",
                60,
                f"{node} to be managed",
            )
        wait_for(
            lambda: (
                _label(kube, "Node", cpu_node, "general.feature.gpustack.ai/amd-25-1.count", "v1")
                == "16"
            ),
            60,
            "the CPU key count label",
        )

        # Pools: a device flavor over the two GPU nodes, a CPU flavor over all three (mixed on).
        wait_for(
            lambda: _label(kube, "ResourceFlavor", T4_FLAVOR, f"{T4_KEY}.capacity") == "4",
            90,
            "the T4 flavor with capacity 4",
        )
        wait_for(
            lambda: (
                _label(
                    kube,
                    "ResourceFlavor",
                    CPU_FLAVOR,
                    "general.feature.gpustack.ai/amd-25-1.capacity",
                )
                == "48"
            ),
            90,
            "the CPU flavor with capacity 48",
        )
        t4 = kube.get(KUEUE, "ResourceFlavor", T4_FLAVOR)
        assert t4 is not None
        assert t4["spec"]["tolerations"] == [{"operator": "Exists"}]
        assert t4["spec"]["topologyName"] == "gpustack-fnv64-87bf574bea2a4f23"
        assert t4["spec"]["nodeLabels"][T4_KEY] == "true"
        assert kube.get(KUEUE, "Topology", "gpustack-fnv64-87bf574bea2a4f23") is not None

        # One derived InstanceType per pool, with the product's preset units.
        it = wait_for(lambda: kube.get(WORKER, "InstanceType", T4_POOL), 60, "the T4 type")
        assert it["spec"]["unitResources"] == {"cpu": "8", "ram": "32Gi"}
        assert it["metadata"]["labels"]["schedule.gpustack.ai/derived-from-node"] == "true"
        wait_for(lambda: kube.get(WORKER, "InstanceType", CPU_POOL), 60, "the CPU type")

        # Removing a node shrinks capacity.
        _remove_node(kube, gpu_nodes[1])
        wait_for(
            lambda: _label(kube, "ResourceFlavor", T4_FLAVOR, f"{T4_KEY}.capacity") == "2",
            90,
            "T4 capacity to shrink to 2",
        )

        # A derived InstanceType deleted by hand comes back while its pool lives.
        uid = it["metadata"]["uid"]
        kube.delete(WORKER, "InstanceType", T4_POOL)
        wait_for(
            lambda: (
                (o := kube.get(WORKER, "InstanceType", T4_POOL)) and o["metadata"]["uid"] != uid
            ),
            90,
            "the deleted InstanceType to come back",
        )

        # The last T4 node leaves: the flavor goes, the derived type stays (it drains later).
        _remove_node(kube, gpu_nodes[0])
        wait_for(
            lambda: kube.get(KUEUE, "ResourceFlavor", T4_FLAVOR) is None,
            90,
            "the T4 flavor to be deleted",
        )
        assert kube.get(WORKER, "InstanceType", T4_POOL) is not None
    finally:
        for node in [*gpu_nodes, cpu_node]:
            _remove_node(kube, node)
        forget_pool(kube, T4_POOL, tuple(gpu_nodes))


def forget_pool(kube: Kube, name: str, nodes: tuple[str, ...] = ()) -> None:
    """Delete a pool's derived InstanceType (its queue drains and goes first) and wait until it
    is gone, so the next test starts from a pool that never existed (no queue left from before).

    `nodes` were the pool's nodes: a derived type deleted while its pool lives comes back, so
    first wait until the garbage collector removed their summaries."""
    for node in nodes:
        wait_for(
            lambda n=node: kube.get("gpustack.ai/v1alpha1", "NodeFlavors", n) is None,
            120,
            f"the NodeFlavors of {node} to be collected",
        )
    kube.delete(WORKER, "InstanceType", name)
    try:
        wait_for(lambda: kube.get(WORKER, "InstanceType", name) is None, 120, f"{name} to be gone")
    except TimeoutError as err:
        meta = (kube.get(WORKER, "InstanceType", name) or {}).get("metadata", {})
        state = {k: meta.get(k) for k in ("uid", "deletionTimestamp", "finalizers")}
        raise TimeoutError(f"{err}; it reads {state}") from None


def test_new_namespace_gets_local_queues(testbed: Testbed, chain: Installed) -> None:
    kube = testbed.kube
    # The queue hook (a later stage) authors the chain's ClusterQueues; here one stands in.
    cq = f"gpustack--e2e-{uuid.uuid4().hex[:6]}-linux-amd64"
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": cq, "labels": {"resource.gpustack.ai/type": "instancetypes"}},
            "spec": {"namespaceSelector": {}, "resourceGroups": []},
        }
    )
    ns = f"team-{uuid.uuid4().hex[:6]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        from chain.names import local_queue_name

        lq = wait_for(
            lambda: kube.get(KUEUE, "LocalQueue", local_queue_name(cq), ns),
            60,
            "the new namespace's LocalQueue",
        )
        assert lq["spec"]["clusterQueue"] == cq
        assert lq["metadata"]["annotations"]["schedule.gpustack.ai/queue"] == cq
        assert kube.get(KUEUE, "LocalQueue", local_queue_name(cq), "kube-system") is None
    finally:
        kube.delete("v1", "Namespace", ns)
        kube.delete(KUEUE, "ClusterQueue", cq)


def _shape(body: dict[str, Any]) -> dict[str, Any]:
    """What a fixture must share with a real request: top-level keys and map group keys."""
    return {
        "keys": sorted(body),
        "controller": body.get("controller", {}).get("kind"),
        "object": (body.get("object") or body.get("parent") or {}).get("kind"),
        **{m: sorted(body[m]) for m in ("attachments", "related") if isinstance(body.get(m), dict)},
    }


FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "hooks"


@pytest.mark.parametrize(
    ("hook", "route", "fixture_dir"),
    [
        ("hook-gpustack-hook-flavor", "node-sync", "flavor"),
        ("hook-gpustack-hook-flavor", "flavors-sync", "flavor"),
        ("hook-gpustack-hook-flavor", "node-customize", "flavor"),
        ("hook-gpustack-hook-entrance", "sync", "entrance"),
        ("hook-gpustack-hook-queue", "sync", "queue"),
        ("hook-gpustack-hook-instancetype", "sync", "instancetype"),
    ],
)
def test_fixtures_have_the_shape_metacontroller_sends(
    testbed: Testbed, chain: Installed, hook: str, route: str, fixture_dir: str
) -> None:
    """The hooks' JSON fixtures are shaped like the requests the real Metacontroller sent.
    The queue and status hooks are called per InstanceType: one is made if none exists yet."""
    folder = testbed.root / "captured" / hook

    def captured_calls() -> list[Path]:
        return sorted(folder.glob(f"{route}-*.json"))

    made = None
    if not captured_calls():
        made = f"gpustack--e2e-shape-{uuid.uuid4().hex[:6]}"
        testbed.kube.create(instance_type(made))
    try:
        captured = wait_for(captured_calls, 60, f"Metacontroller to call {hook} /{route}")
    finally:
        if made is not None:
            testbed.kube.delete(WORKER, "InstanceType", made)
    real = {json.dumps(_shape(json.loads(f.read_bytes()))) for f in captured}
    path = "/" + route.replace("-", "/")
    fixtures = [
        json.loads(f.read_text())
        for f in sorted((FIXTURES / fixture_dir / "fixtures").glob("*.json"))
    ]
    ok = [f for f in fixtures if f["path"] == path and f.get("status", 200) == 200]
    assert ok, f"no successful fixture for {path}"
    for fixture in ok:
        assert json.dumps(_shape(fixture["request"])) in real, fixture.get("description")


HOOK_SYNCS = [
    # (captured folder, route file prefix, the hook's app, the route)
    ("hook-gpustack-hook-flavor", "node-sync", "hooks.flavor.app", "/node/sync"),
    ("hook-gpustack-hook-flavor", "flavors-sync", "hooks.flavor.app", "/flavors/sync"),
    ("hook-gpustack-hook-entrance", "sync", "hooks.entrance.app", "/sync"),
    ("hook-gpustack-hook-queue", "sync", "hooks.queue.app", "/sync"),
    ("hook-gpustack-hook-instancetype", "sync", "hooks.instancetype.app", "/sync"),
]


def test_a_converged_parent_is_not_synced_every_few_seconds(
    testbed: Testbed, chain: Installed
) -> None:
    """The shell asks for a resync within seconds while an answer still changes its parent.
    Once the parent shows the answer, it must stop asking: a label, annotation or status the
    API server stores otherwise than the hook writes it (pruned, defaulted) would keep the
    parent in a five-second loop for ever. So every call Metacontroller made in a quiet 25 s
    is answered again by the hook, in-process: no parent may have been sent three requests
    that each still asked to change it (a loop sends five)."""
    root = testbed.root / "captured"
    start = time.time()
    time.sleep(25)
    looping: dict[tuple[str, str], int] = {}
    for hook, prefix, module, route in HOOK_SYNCS:
        client = importlib.import_module(module).app.test_client()
        for path in (root / hook).glob(f"{prefix}-*.json"):
            if path.stat().st_mtime < start:
                continue
            body = json.loads(path.read_bytes())
            parent = body["object"]
            answer = client.post(route, json=body).get_json()
            quick = float(answer.get("resyncAfterSeconds") or 0) == WRITE_RECHECK_SECONDS
            if quick or parent_write_outstanding(parent, answer):
                key = (hook + route, parent["metadata"]["name"])
                looping[key] = looping.get(key, 0) + 1
    busy = {key: n for key, n in looping.items() if n >= 3}
    assert not busy, f"parents asked again and again to take a write they never show: {busy}"
