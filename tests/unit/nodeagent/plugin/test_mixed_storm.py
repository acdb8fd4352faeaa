"""A storm over a mixed-manufacturer node: two NVIDIA L4 and two AMD MI300X on one node, every
manufacturer's exclusive, shared, sliced and visibility servers registered with one kubelet
emulator over one `NodeState` (one mutex, one ledger), as `nodeagent serve --manufacturer all`
runs them. 150 admissions of either manufacturer in random modes, with Pods leaving now and
then; after every step the invariants of `test_storm.check` hold for all four cards, and each
answer carries its own manufacturer's injection."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

from chain.devices import DevicesSpec
from chain.manufacturers import manufacturers
from nodeagent.plugin.identify import PodResourcesClient
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import plugin_servers
from nodeagent.simulate.host import simulated_host
from testbed.kubelet import AdmissionError, KubeletEmulator
from tests.unit.nodeagent.helpers import detect
from tests.unit.nodeagent.plugin.fakes import FakeCluster, Rig, t4_spec
from tests.unit.nodeagent.plugin.test_storm import check

STEPS = 150
BASES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def request(draw: random.Random) -> tuple[str, dict[str, str]]:
    maker = draw.choice(sorted(BASES))
    base = BASES[maker]
    mode = draw.choice(["exclusive", "shared", "sliced", "sliced"])
    if mode == "exclusive":
        return maker, {base: "1"}
    if mode == "shared":
        return maker, {base + ".shared": "1"}
    sliced = base + ".sliced"
    limits = {
        sliced: "1",
        sliced + ".units": str(draw.choice([100000, 400000, 800000])),
        sliced + ".memory-percentage": "10",
        sliced + ".cores-percentage": str(draw.choice([10, 25, 50])),
    }
    return maker, limits


def test_a_mixed_node_never_promises_a_card_twice() -> None:
    draw = random.Random(20261202)
    spec = DevicesSpec((*t4_spec("l4x2").groups, *detect("mi300x-x2")))
    assert {group.manufacturer for group in spec.groups} == {"nvidia", "amd"}
    table = manufacturers({})
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    cluster = FakeCluster()
    node = NodeState(lambda: spec, cluster, cluster)
    client = PodResourcesClient(str(kubelet.pod_resources_socket))
    servers = []
    granted = refused = 0
    codes: dict[str, int] = defaultdict(int)
    by_maker: dict[str, int] = defaultdict(int)
    try:
        with simulated_host("mi300x-x2") as host:
            for maker in BASES:
                servers += plugin_servers(
                    node,
                    table[maker],
                    str(kubelet.plugin_dir),
                    client,
                    pods_dir=str(root / "pods"),
                    nodes=host.device_nodes,
                )
            for server in servers:
                server.start()
            for base in BASES.values():
                for resource in (base, base + ".shared", base + ".sliced"):
                    kubelet.wait_devices(resource, lambda d: len(d) > 0)
            rig = Rig(kubelet, cluster, node, {})
            admitted: list[dict[str, object]] = []
            for step in range(STEPS):
                if admitted and draw.random() < 0.25:
                    gone = admitted.pop(draw.randrange(len(admitted)))
                    cluster.remove(str(gone["metadata"]["name"]))  # type: ignore[index]
                    kubelet.forget(gone)
                    node.notify()
                maker, limits = request(draw)
                pod = cluster.add(f"m{step}", ("main", limits))
                try:
                    kubelet.admit(pod)
                except AdmissionError as error:
                    refused += 1
                    codes[str(error.code)] += 1
                    cluster.remove(f"m{step}")
                else:
                    granted += 1
                    by_maker[maker] += 1
                    admitted.append(pod)
                    envs = dict(kubelet.responses[-1][2].envs)
                    if maker == "amd":
                        assert envs["AMD_VISIBLE_DEVICES"] == "none"
                        assert "NVIDIA_VISIBLE_DEVICES" not in envs
                    else:
                        assert "NVIDIA_VISIBLE_DEVICES" in envs
                        assert "AMD_VISIBLE_DEVICES" not in envs
                check(rig, spec)
    finally:
        for server in servers:
            server.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert granted + refused == STEPS
    assert set(codes) <= {"Insufficient", "StatusCode.FAILED_PRECONDITION"}
    assert granted > STEPS // 4
    assert min(by_maker.values()) > STEPS // 10, by_maker
