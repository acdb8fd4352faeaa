"""One simulated node per other manufacturer, end to end under the kubelet emulator: the
real agent detects the cards through the manufacturer's own detector (over its simulated
library), registers the manufacturer's device plugins, and answers a whole card and a slice
with the manufacturer's own injection (Iluvatar: its runtime's variable and HAMi-core; T-Head:
device nodes proven by minor number and the hggc pair; Ascend: the driver's index, the
simulated DCMI's container-share flag turned on for the slice, and vcann-rt's
`npu_info.config`; Hygon: its control and DRM nodes and a `vdev.conf`; MThreads: its QoS
variables; MetaX: an `sgpu` subdevice made on the simulated card; Cambricon: an sMLU instance
of the simulated cnDev); the grants reach the Pods' annotations and the ledger. T-Head and
Hygon nodes in MIG mode serve partitions only, made at Allocate through the simulated HGML and
DMI and handed over the manufacturer's way. (AMD has its own module, with pools and CU
masks.)"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from kubeapi import Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from tests.e2e.test_device_plugin import PluginNode, agent_node

WORKER = "worker.gpustack.ai/v1alpha1"
ACCELERATOR_FEATURE = "acceleratable.feature.gpustack.ai/"


@dataclass(frozen=True)
class Family:
    profile: str
    manufacturer: str
    base: str
    cards: int
    whole: Callable[[dict[str, str], list[str], set[str]], None]
    """Checks a whole card's answer: its variables, its device nodes, the node's card ids."""
    slice: Callable[[Any, Devices], None] | None = None
    """Checks a quarter slice's answer against the node's Devices; None: no slices served."""
    runtime_class: str = ""
    """What a sliced Pod of this manufacturer names (Iluvatar's slices need their runtime)."""


def _iluvatar_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs["IX_VISIBLE_DEVICES"] in cards and devices == []


def _iluvatar_slice(response: Any, found: Devices) -> None:
    memory = found.spec.groups[0].memory
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{memory // 4}m"
    assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "100"


def _thead_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs == {}  # no variable: the nodes are the grant
    assert devices[:2] == ["/dev/alixpu", "/dev/alixpu_ctl"]
    assert devices[2] in ("/dev/alixpu_ppu0", "/dev/alixpu_ppu1")


def _thead_slice(response: Any, found: Devices) -> None:
    memory = found.spec.groups[0].memory
    assert response.envs["HGGC_DEVICE_MEMORY_LIMIT_0"] == str(memory // 4)
    assert response.envs["HGGC_DEVICE_SM_LIMIT"] == "100"


def _ascend_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs["ASCEND_VISIBLE_DEVICES"] in {str(n) for n in range(8)} and devices == []


def _ascend_slice(response: Any, found: Devices) -> None:
    envs = dict(response.envs)
    assert envs["ENPU_DSMI_HOOK"] == "1"
    text = _mounted(response, "/etc/enpu/vcann-rt/npu_info.config").read_text()
    memory = found.spec.groups[0].memory
    assert f"physical-npu-id={envs['ASCEND_VISIBLE_DEVICES']}\n" in text
    assert f"aicore-quota=100\nmemory-quota={memory // 4}\n" in text


def _hygon_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs == {}
    assert devices[:2] == ["/dev/kfd", "/dev/mkfd"]
    assert {d.rsplit("/", 1)[1][:4] for d in devices[2:]} == {"card", "rend"}


def _hygon_slice(response: Any, found: Devices) -> None:
    text = (_mounted(response, "/etc/vdev/docker") / "vdev0.conf").read_text()
    memory = found.spec.groups[0].memory
    assert "cu_count: 120\n" in text and f"mem: {memory // 4} MiB\n" in text


def _mthreads_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs["MTHREADS_VISIBLE_DEVICES"] in cards and devices == []


def _mthreads_slice(response: Any, found: Devices) -> None:
    memory = found.spec.groups[0].memory
    assert response.envs["MTHREADS_QOS_MEMORY_LIMIT"] == str(memory // 4 * 1024 * 1024)
    assert response.envs["MTHREADS_QOS_COMPUTING_POWER_WEIGHT"] == "100"


def _metax_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    assert envs == {}
    assert devices[:3] == ["/dev/mxcd", "/dev/mxnd", "/dev/mxgd"]
    assert len(devices) == 5  # and the card's DRM card and render nodes


def _metax_slice(response: Any, found: Devices) -> None:
    memory = found.spec.groups[0].memory
    subdevice = response.envs["METAX_SGPUS"]
    assert f";compute=100;vram={memory // 4};alias=gpustack-" in subdevice
    assert response.devices[0].host_path == "/dev/mxcd"


def _cambricon_whole(envs: dict[str, str], devices: list[str], cards: set[str]) -> None:
    index = envs["CAMBRICON_VISIBLE_DEVICES"]
    assert devices[0] == f"/dev/cambricon_dev{index}"
    assert devices[-1] == "/dev/cambricon_ctl"


def _cambricon_slice(response: Any, found: Devices) -> None:
    instance = response.envs["VIRTUAL_DEVICES"]
    assert instance.startswith("/dev/cambricon-caps/cap_dev")
    assert response.devices[0].host_path.startswith("/dev/cambricon_dev")


def _mounted(response: Any, container_path: str) -> Path:
    [found] = [m.host_path for m in response.mounts if m.container_path == container_path]
    return Path(found)


FAMILIES = (
    Family(
        "bi-v150-x2",
        "iluvatar",
        "iluvatar.com/gpu",
        2,
        _iluvatar_whole,
        _iluvatar_slice,
        runtime_class="iluvatar",
    ),
    Family("ppu-zw810e-x2", "thead", "alibabacloud.com/ppu", 2, _thead_whole, _thead_slice),
    Family("atlas-800t-a2", "ascend", "huawei.com/npu", 8, _ascend_whole, _ascend_slice),
    Family("k100-ai-x2", "hygon", "hygon.com/dcu", 2, _hygon_whole, _hygon_slice),
    Family("s4000-x2", "mthreads", "mthreads.com/gpu", 2, _mthreads_whole, _mthreads_slice),
    Family("mxc500-x2", "metax", "metax-tech.com/gpu", 2, _metax_whole, _metax_slice),
    Family("mlu370-x4", "cambricon", "cambricon.com/mlu", 4, _cambricon_whole, _cambricon_slice),
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
    registered = {resource for resource, _ in kubelet.registrations}
    assert (sliced in registered) == (family.slice is not None)
    found = Devices.parse(wait_for(lambda: kube.get(WORKER, "Devices", node.name), 30, "Devices"))

    kubelet.admit(kube.create(_pod(node, "whole", {family.base: "1"})))
    response = kubelet.responses[-1][2]
    family.whole(dict(response.envs), [d.host_path for d in response.devices], cards)
    names = ["whole"]
    if family.slice is not None:
        # The whole card's slice tokens turn Unhealthy (held in another mode) before kubelet
        # picks one, as the real kubelet would see them after the grant.
        kubelet.wait_devices(sliced, lambda d: "Unhealthy" in d.values(), timeout=30)
        limits = {sliced: "1", f"{sliced}.memory-percentage": "25"}
        kubelet.admit(kube.create(_pod(node, "slice", limits, family.runtime_class)))
        family.slice(kubelet.responses[-1][2], found)
        names.append("slice")

    def recorded(name: str) -> str | None:
        stored = kube.get("v1", "Pod", name, node.namespace) or {}
        return (stored.get("metadata") or {}).get("annotations", {}).get(ALLOCATED_ANNOTATION)

    modes = {}
    for name in names:
        annotation = wait_for(lambda n=name: recorded(n), 10, f"the {name} grant's annotation")
        [claim] = parse_allocated(annotation)["main"].claims()
        modes[claim.row.id] = claim.row.mode
    assert sorted(modes.values()) == [Mode.EXCLUSIVE, Mode.SLICED][: len(names)]

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

    # The node is a pool: a ResourceFlavor selects it (its name a valid object name for every
    # model, Hygon's `K100_AI` included, or the API server refuses it and the node gets none).
    def pooled() -> list[str]:
        labels = (kube.get("v1", "Node", node.name) or {}).get("metadata", {}).get("labels", {})
        return [
            flavor["metadata"]["name"]
            for flavor in kube.list("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
            if (wanted := flavor.get("spec", {}).get("nodeLabels") or {})
            and f"{ACCELERATOR_FEATURE}{family.manufacturer}-" in " ".join(wanted)
            and all(labels.get(key) == value for key, value in wanted.items())
        ]

    wait_for(pooled, 60, f"a pool of the {family.manufacturer} node")


def _thead_partition(response: Any) -> None:
    """No variable: the five nodes of the partition are the grant."""
    assert dict(response.envs) == {}
    devices = [d.host_path for d in response.devices]
    assert devices[:2] == ["/dev/alixpu", "/dev/alixpu_ctl"]
    assert devices[2] in ("/dev/alixpu_ppu0", "/dev/alixpu_ppu1")
    assert [d.startswith("/dev/alixpu-caps/alixpu-cap") for d in devices[3:]] == [True, True]


def _hygon_partition(response: Any) -> None:
    """The compute instance's registry file, and the `MIG-` identity it names."""
    assert response.envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    conf = response.mounts[-1]
    assert conf.container_path == conf.host_path and conf.read_only
    assert conf.host_path.startswith("/etc/dmi_mig_config/ci/dev")


@pytest.mark.parametrize(
    ("profile", "base", "asked", "check"),
    [
        ("ppu-zw810e-mig-x2", "alibabacloud.com/ppu", "4g.48gb", _thead_partition),
        ("k100-ai-mig-x2", "hygon.com/dcu", "4g.31gb", _hygon_partition),
    ],
    ids=["thead", "hygon"],
)
def test_a_partition_is_made_and_handed_over_the_manufacturers_way(
    testbed: Testbed,
    chain: Installed,
    profile: str,
    base: str,
    asked: str,
    check: Callable[[Any], None],
) -> None:
    """Every card in MIG mode: the agent serves the partitioned resource only (no whole cards, no
    slices), makes the instance through the simulated library at Allocate and answers it the
    manufacturer's way; the grant reaches the annotation and the ledger."""
    kube = testbed.kube
    partitioned = base + ".partitioned"
    with agent_node(testbed, profile) as node:
        node.kubelet.wait_devices(partitioned, lambda d: len(d) > 0, timeout=90)
        for offered_none in (base, base + ".sliced"):
            assert node.kubelet.wait_devices(offered_none, lambda d: True) == {}
        limits = {partitioned: "1", f"{partitioned}.mig-{asked}": "1"}
        node.kubelet.admit(kube.create(_pod(node, "part", limits)))
        check(node.kubelet.responses[-1][2])

        def recorded() -> str | None:
            stored = kube.get("v1", "Pod", "part", node.namespace) or {}
            return (stored.get("metadata") or {}).get("annotations", {}).get(ALLOCATED_ANNOTATION)

        annotation = wait_for(recorded, 10, "the partition's annotation")
        [claim] = parse_allocated(annotation)["main"].claims()
        assert (claim.row.mode, claim.row.allocated_physical_profile) == (Mode.PARTITIONED, asked)

        def ledger_mode() -> Mode | None:
            found = kube.get(WORKER, "Devices", node.name)
            if found is None:
                return None
            rows = {row.id: row.mode for _, row in Devices.parse(found).status.rows()}
            return rows.get(claim.row.id)

        wait_for(lambda: ledger_mode() == Mode.PARTITIONED or None, 15, "the partition's ledger")
