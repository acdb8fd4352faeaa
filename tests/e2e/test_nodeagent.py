"""Node agents in simulated mode on three fake Nodes: Devices, NodeFeatures, labels, pools.

Each agent is the real `python -m nodeagent serve`, detecting through the real NVIDIA detector
over a simulated NVML; its NodeFeature goes through the real nfd-master, and the chain's hooks
(installed from the shipped manifests) turn the labels into flavors and pools.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterable, Iterator

import pytest

from chain.quantity import parse_quantity
from chain.release import AGENT_NAMESPACE
from kubeapi import Kube, Obj, wait_for
from testbed.drivers import run_agent
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kubectl import condition_of, kubectl, wait_condition
from testbed.nodes import node_object, register_node
from tests.e2e.test_pools import forget_pool, nfd_worker_feature

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
NFD = "nfd.k8s-sigs.io/v1alpha1"
AGENT_NS = AGENT_NAMESPACE
T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
POOLS = ("gpustack--nvidia-tesla-t4-linux-amd64", "gpustack--nvidia-a10g-linux-amd64")


def forget_nodes(testbed: Testbed, nodes: Iterable[str]) -> None:
    for name in nodes:
        testbed.stop(f"agent-{name}")
        testbed.kube.delete(NFD, "NodeFeature", name, "node-feature-discovery")
        testbed.kube.delete("v1", "Node", name)
    for pool in POOLS:
        forget_pool(testbed.kube, pool, tuple(nodes))


@pytest.fixture
def simulated_nodes(testbed: Testbed, chain: Installed) -> Iterator[dict[str, str]]:
    kube = testbed.kube
    tag = uuid.uuid4().hex[:5]
    # The second T4 node also has a 25G Ethernet port without RDMA (docs/topology.md, "Network
    # cards"): the same cards, so the same pool.
    nodes = {
        f"sim-{tag}-t4a": "t4x4",
        f"sim-{tag}-t4b": "t4x4-ethernet",
        f"sim-{tag}-a10g": "a10gx1",
    }
    for name, profile in nodes.items():
        register_node(kube, node_object(name, cpu="48"))
        kube.apply(nfd_worker_feature(name))
        run_agent(testbed, name, profile, "--period", "0.5", "--redetect-every", "4")
    yield nodes
    forget_nodes(testbed, nodes)


def test_fit_labels_follow_the_nodes_labels_at_once(testbed: Testbed, chain: Installed) -> None:
    """The fit labels depend on the Node's `gpustack.ai/managed` mark, which can change after
    the agent's first report (here an admin brings the node under management; NFD's labels
    arriving late do the same through the flavor hook). The agent reacts to the Node's labels,
    not to its next monitor tick (a minute here; before, the fit labels waited for it)."""
    kube = testbed.kube
    name = f"sim-{uuid.uuid4().hex[:5]}-late"
    managed = "gpustack.ai/managed"
    register_node(kube, node_object(name, cpu="48", labels={managed: "false"}))
    kube.apply(nfd_worker_feature(name))
    fit = "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4"
    try:
        run_agent(testbed, name, "t4x4", "--period", "60", "--redetect-every", "100")
        devices = wait_for(lambda: kube.get(WORKER, "Devices", name), 60, "the first report")
        # A ledger (all free) as the device plugins would keep it: the fit labels read it.
        [group] = devices["spec"]["groups"]
        rows = [{"id": c["id"], "index": c["index"], "mode": 0} for c in group["accelerators"]]
        ledger = {"groups": [{"id": group["id"], "manufacturer": "nvidia", "accelerators": rows}]}
        kube.apply(
            {"apiVersion": WORKER, "kind": "Devices", "metadata": {"name": name}, "status": ledger},
            manager="e2e-ledger",
            subresource="status",
        )
        assert fit not in _labels(kube, "Node", name)
        kube.merge_patch("v1", "Node", name, {"metadata": {"labels": {managed: "true"}}})
        wait_for(lambda: fit in _labels(kube, "Node", name), 20, "the fit labels, at once")
    finally:
        forget_nodes(testbed, [name])


def _sliced_units(kube: Kube, name: str) -> int:
    node = kube.get("v1", "Node", name) or {}
    value = ((node.get("status") or {}).get("capacity") or {}).get("nvidia.com/gpu.sliced.units")
    return int(parse_quantity(value)) if value else 0


def test_an_agent_started_after_its_nodefeature_went_brings_its_slice_keys_back(
    testbed: Testbed, chain: Installed
) -> None:
    """The Helm test's uninstall and install elsewhere, in small (#35): the uninstall deletes the
    agents' namespace, so the NodeFeature goes, nfd-master takes the accelerator labels off the
    Node, and the old agent's counting keys stay. The next agent's first report nulls the keys
    (no accelerator label) and writes the NodeFeature again; the labels nfd-master writes back,
    during that report or after it, bring the keys back at once, not at a monitor round (a
    minute here) or a re-detection. Which of the two it is, is a race: this test passed before
    the fix whenever the labels came after the report (the unit test
    `tests/unit/nodeagent/test_report_lost_update.py` makes them land during it)."""
    kube = testbed.kube
    name = f"sim-{uuid.uuid4().hex[:5]}-moved"
    register_node(kube, node_object(name, cpu="48"))
    kube.apply(nfd_worker_feature(name))
    feature = f"{name}-gpustack-device-manager"
    try:
        run_agent(testbed, name, "t4x4", "--period", "0.5", "--redetect-every", "4")
        # The kubelet advertises sliced tokens: the agent adds the counting keys.
        tokens = {"status": {"capacity": {"nvidia.com/gpu.sliced": "512"}}}
        kube.merge_patch("v1", "Node", name, tokens, subresource="status")
        wait_for(lambda: _sliced_units(kube, name) == 4 * 1_600_000, 60, "the first agent's keys")
        # The uninstall: the agent goes, its NodeFeature with its namespace, and NFD's labels.
        testbed.stop(f"agent-{name}")
        kube.delete(NFD, "NodeFeature", feature, AGENT_NS)
        wait_for(lambda: T4 not in _labels(kube, "Node", name), 60, "NFD to take the labels off")
        assert _sliced_units(kube, name) == 4 * 1_600_000  # the old agent's keys stay
        # The install: a new agent, whose monitor rounds come a minute apart.
        run_agent(testbed, name, "t4x4", "--period", "60", "--redetect-every", "100")
        wait_for(lambda: kube.get(NFD, "NodeFeature", feature, AGENT_NS), 60, "its NodeFeature")
        wait_for(lambda: T4 in _labels(kube, "Node", name), 60, "NFD to put the labels back")
        wait_for(lambda: _sliced_units(kube, name) == 4 * 1_600_000, 40, "the keys back at once")
    finally:
        forget_nodes(testbed, [name])


def devices_owner_uid(devices: Obj) -> str:
    return str(devices["metadata"]["ownerReferences"][0]["uid"])


def _labels(kube: Kube, kind: str, name: str, api: str = "v1") -> dict[str, str]:
    obj = kube.get(api, kind, name) or {}
    return dict((obj.get("metadata") or {}).get("labels") or {})


def test_agents_report_and_pools_appear(
    testbed: Testbed, chain: Installed, simulated_nodes: dict[str, str]
) -> None:
    kube = testbed.kube
    t4a, t4b, a10g = simulated_nodes

    devices: Obj = wait_for(lambda: kube.get(WORKER, "Devices", t4a), 60, "the Devices object")
    [group] = devices["spec"]["groups"]
    assert (group["id"], group["manufacturer"], group["name"]) == ("tesla-t4", "nvidia", "Tesla T4")
    assert len(group["accelerators"]) == 4
    owner = devices["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Node", t4a)

    feature = kube.get(NFD, "NodeFeature", f"{t4a}-gpustack-device-manager", AGENT_NS)
    assert feature is not None and feature["spec"]["labels"][f"{T4}.count"] == "4"
    # Owned by its Node, like the Devices (upstream): it leaves with the node (below).
    [owner] = feature["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", t4a, devices_owner_uid(devices))

    # The agent tells the Node what it found: an Event `kubectl describe node` shows.
    def described() -> str:
        return kubectl(testbed, "describe", "node", t4a)

    wait_for(lambda: "CardsDetected" in described(), 60, "the CardsDetected Event on the Node")
    assert "4 Tesla T4 cards detected (nvidia-tesla-t4; index 0, 1, 2, 3)" in described()

    other = wait_for(lambda: kube.get(WORKER, "Devices", a10g), 60, "the A10G node's Devices")
    assert [g["id"] for g in other["spec"]["groups"]] == ["a10g"]
    with_port = wait_for(lambda: kube.get(WORKER, "Devices", t4b), 60, "the second T4's Devices")
    # Its network port is in the inventory, with the four cards under one host bridge; the
    # first node has none, so no field. `-o wide` shows the port, and no RDMA one.
    [port] = with_port["spec"]["interfaces"]
    assert (port["name"], port["pciAddress"], port["rdma"]) == ("ens6", "0000:00:06.0", False)
    [near] = port["cards"]
    assert near["link"] == "PHB" and len(near["cards"]) == 4
    assert "interfaces" not in devices["spec"]
    wide = kubectl(testbed, "get", "devices", t4b, "-o", "wide")
    header, row = wide.splitlines()[:2]
    # kubectl leaves an empty cell blank: read each column at its header's offset.
    starts = [m.start() for m in re.finditer(r"\S+", header)] + [len(row) + 1]
    columns = {header[a:b].strip(): row[a:b].strip() for a, b in itertools.pairwise(starts)}
    assert (columns["NICS"], columns["RDMA"]) == ("ens6", ""), wide
    assert "feature.gpustack.ai/rdma.capable" not in _labels(kube, "Node", t4b)

    # nfd-master turned the agent's NodeFeature into Node labels.
    wait_for(
        lambda: _labels(kube, "Node", t4a).get(f"{T4}.count") == "4",
        60,
        "the agent's labels on the Node",
    )
    assert _labels(kube, "Node", t4a)["feature.gpustack.ai/acceleratable"] == "true"

    # The chain made pools of them: one T4 flavor over the two 4-card nodes, one A10G flavor.
    flavor = "gpustack--amd-25-1--nvidia-tesla-t4-linux-amd64-4d"
    wait_for(
        lambda: _labels(kube, "ResourceFlavor", flavor, KUEUE).get(f"{T4}.capacity") == "8",
        90,
        "the T4 flavor over both simulated nodes",
    )
    for pool in POOLS:
        wait_for(lambda p=pool: kube.get(WORKER, "InstanceType", p), 60, f"the {pool} type")

    # Conditions, as a user waits on them: the agent measured its cards and the node is Ready;
    # the pool over the two T4 nodes is Ready and a new Instance fits in it now.
    wait_condition(testbed, f"devices/{t4a}", "nvidia.gpustack.ai/Detected")
    wait_condition(testbed, f"devices/{t4a}", "Ready")
    detected = condition_of(kube.get(WORKER, "Devices", t4a), "nvidia.gpustack.ai/Detected")
    assert detected["message"] == "the last detection measured 4 cards", detected
    wait_condition(testbed, f"instancetype/{POOLS[0]}", "Ready", timeout=90)
    wait_condition(testbed, f"instancetype/{POOLS[0]}", "Available")
    # The T4 pool's second node has an Ethernet port only: no node of the pool has RDMA.
    t4_type = kube.get(WORKER, "InstanceType", POOLS[0]) or {}
    assert t4_type["status"]["detail"]["rdmaNodes"] == 0

    # Once the kubelet advertises sliced tokens, the agent adds the counting keys.
    kube.merge_patch(
        "v1",
        "Node",
        t4a,
        {"status": {"capacity": {"nvidia.com/gpu.sliced": "512"}}},
        subresource="status",
    )

    wait_for(lambda: _sliced_units(kube, t4a) == 4 * 1_600_000, 60, "the sliced counting keys")

    # A node leaves the cluster: the garbage collector takes its NodeFeature and its Devices.
    testbed.stop(f"agent-{t4b}")
    kube.delete("v1", "Node", t4b)
    feature_of_b = f"{t4b}-gpustack-device-manager"
    wait_for(
        lambda: (
            kube.get(NFD, "NodeFeature", feature_of_b, AGENT_NS) is None
            and kube.get(WORKER, "Devices", t4b) is None
        ),
        60,
        "the departed node's NodeFeature and Devices to be collected",
    )


def _summary(kube: Kube, name: str) -> str:
    obj = kube.get(WORKER, "InstanceType", name) or {}
    return str((obj.get("status") or {}).get("acceleratorSummary", ""))


def test_ledger_edits_move_the_views(
    testbed: Testbed, chain: Installed, simulated_nodes: dict[str, str]
) -> None:
    """`kubectl get instancetypes -w`: the four views follow the Devices ledgers."""
    kube = testbed.kube
    t4a, _t4b, _a10g = simulated_nodes
    pool = POOLS[0]
    # Two nodes x 4 free T4: EX 4/8, SH 4/80 (cards with a free share on the largest node),
    # SL 100/800 (percent of one card / of all), PT 0/0.
    wait_for(lambda: _summary(kube, pool) == "4/8 4/80 100/800 0/0", 90, "the pool's views")

    devices = kube.get(WORKER, "Devices", t4a)
    assert devices is not None
    [group] = devices["spec"]["groups"]
    first, second = group["accelerators"][:2]
    rows = [
        {"id": first["id"], "index": first["index"], "mode": 1},  # held whole: remaining 0
        {
            "id": second["id"],
            "index": second["index"],
            "mode": 3,
            "remaining": 1_280_000,
            "allocatedSlices": 1,
        },  # a 20 % slice
    ]
    kube.apply(
        {
            "apiVersion": WORKER,
            "kind": "Devices",
            "metadata": {"name": t4a},
            "status": {
                "groups": [{"id": group["id"], "manufacturer": "nvidia", "accelerators": rows}]
            },
        },
        manager="e2e-ledger",
        subresource="status",
    )
    # EX: free cards 2 + 4 -> 4/6. SH counts shares of free or Shared cards only: 20 + 40, the
    # largest node still has 4 cards with a free share -> 4/60. SL counts free or Sliced cards:
    # 80 (the sliced card) + 100 + 100 + 400 -> 100/680.
    expected = "4/6 4/60 100/680 0/0"
    try:
        wait_for(lambda: _summary(kube, pool) == expected, 90, "the views to follow the ledger")
    except TimeoutError:
        pytest.fail(f"views read {_summary(kube, pool)!r}, expected {expected!r}")

    # The agent follows its ledger with the fit labels the Workload webhook pins against. They read
    # the ledger's rows (docs/design/control-plane.md, "Fit labels"): the sliced card has 1,280,000
    # units of room, and neither row is a card with a free share (one is Exclusive, one Sliced).
    fit = {
        "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4": "1280000",
        "shared-free-cards.fit.gpustack.ai/nvidia-tesla-t4": "0",
    }
    wait_for(lambda: fit.items() <= _labels(kube, "Node", t4a).items(), 60, "the fit labels")
