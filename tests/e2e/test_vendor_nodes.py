"""One simulated node per other manufacturer family, end to end under the kubelet emulator: the
real agent detects the cards through the manufacturer's own detector (over its simulated
library), registers the manufacturer's device plugins, and answers a whole card and a slice
with the manufacturer's own injection (Iluvatar: its runtime's variable and HAMi-core;
T-Head: device nodes proven by minor number and the hggc pair; Ascend: the driver's index, the
container-share flag of the simulated DCMI turned on for the slice, and vcann-rt's
`npu_info.config`); the grants reach the Pods' annotations and the ledger. (AMD has its own
module, with pools and CU masks.)"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.kube import Obj, wait_for
from tests.e2e.test_device_plugin import PluginNode, agent_node

WORKER = "worker.gpustack.ai/v1alpha1"


@dataclass(frozen=True)
class Family:
    profile: str
    manufacturer: str
    base: str
    runtime_class: str
    """What a sliced Pod of this manufacturer names (Iluvatar's slices need their runtime)."""
    cards: int = 2


FAMILIES = (
    Family("bi-v150-x2", "iluvatar", "iluvatar.com/gpu", "iluvatar"),
    Family("ppu-zw810e-x2", "thead", "alibabacloud.com/ppu", ""),
    Family("atlas-800t-a2", "ascend", "huawei.com/npu", "", cards=8),
)


@pytest.fixture(params=FAMILIES, ids=lambda family: family.manufacturer)
def vendor_node(
    request: pytest.FixtureRequest, testbed: Testbed, chain: Installed
) -> Iterator[tuple[Family, PluginNode]]:
    family: Family = request.param
    if family.runtime_class:  # as a cluster with the vendor's container runtime has it
        runtime = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass"}
        testbed.kube.apply(
            {**runtime, "metadata": {"name": family.runtime_class}, "handler": family.runtime_class}
        )
    with agent_node(testbed, family.profile) as node:
        yield family, node
    if family.runtime_class:
        testbed.kube.delete("node.k8s.io/v1", "RuntimeClass", family.runtime_class)


def _pod(node: PluginNode, name: str, limits: dict[str, str], runtime_class: str = "") -> Obj:
    spec: Obj = {
        "nodeName": node.name,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"limits": limits, "requests": limits},
            }
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": node.namespace},
        "spec": spec,
    }


def test_a_whole_card_and_a_slice_get_the_manufacturers_injection(
    testbed: Testbed, vendor_node: tuple[Family, PluginNode]
) -> None:
    family, node = vendor_node
    kube, kubelet = testbed.kube, node.kubelet
    sliced = family.base + ".sliced"
    whole = kubelet.wait_devices(family.base, lambda d: len(d) == family.cards, timeout=90)
    cards = {token.split(":")[1] for token in whole}
    kubelet.wait_devices(sliced, lambda d: len(d) > 0, timeout=30)

    kubelet.admit(kube.create(_pod(node, "whole", {family.base: "1"})))
    response = kubelet.responses[-1][2]
    envs = dict(response.envs)
    devices = [d.host_path for d in response.devices]
    if family.manufacturer == "iluvatar":
        assert envs["IX_VISIBLE_DEVICES"] in cards and devices == []
    elif family.manufacturer == "ascend":
        assert envs["ASCEND_VISIBLE_DEVICES"] in {str(n) for n in range(8)} and devices == []
    else:
        assert envs == {}  # no variable: the nodes are the grant
        assert devices[:2] == ["/dev/alixpu", "/dev/alixpu_ctl"]
        assert devices[2] in ("/dev/alixpu_ppu0", "/dev/alixpu_ppu1")

    limits = {sliced: "1", f"{sliced}.memory-percentage": "25"}
    kubelet.admit(kube.create(_pod(node, "slice", limits, family.runtime_class)))
    sliced_response = kubelet.responses[-1][2]
    envs = dict(sliced_response.envs)
    if family.manufacturer == "iluvatar":
        assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{32768 // 4}m"
        assert envs["CUDA_DEVICE_SM_LIMIT"] == "100"
    elif family.manufacturer == "ascend":
        assert envs["ENPU_DSMI_HOOK"] == "1"
        [config] = [
            m.host_path
            for m in sliced_response.mounts
            if m.container_path == "/etc/enpu/vcann-rt/npu_info.config"
        ]
        text = Path(config).read_text()
        assert f"physical-npu-id={envs['ASCEND_VISIBLE_DEVICES']}\n" in text
        assert "aicore-quota=100\nmemory-quota=16384\n" in text
    else:
        assert envs["HGGC_DEVICE_MEMORY_LIMIT_0"] == str(98304 // 4)
        assert envs["HGGC_DEVICE_SM_LIMIT"] == "100"

    def recorded(name: str) -> str | None:
        stored = kube.get("v1", "Pod", name, node.namespace) or {}
        return (stored.get("metadata") or {}).get("annotations", {}).get(ALLOCATED_ANNOTATION)

    modes = {}
    for name in ("whole", "slice"):
        annotation = wait_for(lambda n=name: recorded(n), 10, f"the {name} grant's annotation")
        [claim] = parse_allocated(annotation)["main"].claims()
        modes[claim.row.id] = claim.row.mode
    assert sorted(modes.values()) == [Mode.EXCLUSIVE, Mode.SLICED]

    def ledger() -> dict[str, Mode]:
        found = kube.get(WORKER, "Devices", node.name)
        if found is None:
            return {}
        devices_obj = Devices.parse(found)
        return {row.id: row.mode for _, row in devices_obj.status.rows()}

    wait_for(
        lambda: all(ledger().get(card) == mode for card, mode in modes.items()),
        15,
        f"the {family.manufacturer} ledger to hold both grants",
    )
