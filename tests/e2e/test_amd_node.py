"""A non-NVIDIA node end to end: two simulated AMD MI300X under the kubelet emulator.

The real `python -m nodeagent serve --manufacturer amd` detects them through the real AMD
detector (over the simulated `amdsmi` surface and sysfs), reports Devices and labels that
nfd-master and the chain's hooks turn into a pool with its queue, registers AMD's device
plugins, and answers kubelet's Allocate calls with AMD's own injection: for a whole card
`/dev/kfd` and the card's DRM nodes with `AMD_VISIBLE_DEVICES=none`; for a slice also the
`libvrocm.so` memory cap and a compute window in `HSA_CU_MASK`, read from the card's (simulated)
KFD topology and placed beside the card's other slice. The grants reach the Pods' annotations
and the ledger.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest

from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.units import RESOURCE_MAX_UNITS
from kubeapi import Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from tests.e2e.test_device_plugin import PluginNode, agent_node
from tests.e2e.test_pools import forget_pool

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
GPU = "amd.com/gpu"
SHARED = GPU + ".shared"
SLICED = GPU + ".sliced"
POOL = "gpustack--amd-instinct-mi300x-linux-amd64"
MI300X = "acceleratable.feature.gpustack.ai/amd-instinct-mi300x"


@pytest.fixture
def amd_node(testbed: Testbed, chain: Installed) -> Iterator[PluginNode]:
    with agent_node(testbed, "mi300x-x2", nfd=True) as node:
        yield node
        name = node.name
    forget_pool(testbed.kube, POOL, (name,))


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def test_an_amd_node_is_pooled_and_its_cards_allocated(
    testbed: Testbed, amd_node: PluginNode
) -> None:
    kube = testbed.kube
    kubelet = amd_node.kubelet
    exclusive = kubelet.wait_devices(GPU, lambda d: len(d) == 2, timeout=90)
    cards = {token.split(":")[1] for token in exclusive}
    assert cards == {"GPU-5b4c6e3a7d2f1a09", "GPU-1e0f2d3c4b5a6978"}
    registered = {resource for resource, _ in kubelet.registrations}
    assert registered == {GPU, SHARED, SLICED, "device.gpustack.ai/amd.visibility"}

    # Detected and published: 128 slices a card.
    devices = wait_for(lambda: kube.get(WORKER, "Devices", amd_node.name), 60, "the Devices")
    [group] = Devices.parse(devices).spec.groups
    assert (group.id, group.manufacturer, group.memory) == ("instinct-mi300x", "amd", 196592)
    assert [card.physical_indexes for card in group.accelerators] == [(1, 128), (2, 129)]
    assert {card.status.logical_sliced.count for card in group.accelerators} == {128}

    # nfd-master labels the Node; the chain makes a pool and its queue of it.
    wait_for(
        lambda: _labels(kube.get("v1", "Node", amd_node.name)).get(f"{MI300X}.count") == "2",
        60,
        "the agent's labels on the Node",
    )
    wait_for(lambda: kube.get(WORKER, "InstanceType", POOL), 90, "the MI300X InstanceType")
    wait_for(lambda: kube.get(KUEUE, "ClusterQueue", POOL), 60, "the MI300X ClusterQueue")

    # kubelet admits a Pod asking for one card: AMD's own injection comes back.
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train", "namespace": amd_node.namespace},
            "spec": {
                "nodeName": amd_node.name,
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
                    }
                ],
            },
        }
    )
    kubelet.admit(pod)
    [(container, resource, response)] = kubelet.responses
    assert (container, resource) == ("main", GPU)
    assert dict(response.envs) == {"AMD_VISIBLE_DEVICES": "none"}
    nodes = [(d.container_path, d.host_path, d.permissions) for d in response.devices]
    assert nodes[0] == ("/dev/kfd", "/dev/kfd", "rw")
    drm = {path for path, _, _ in nodes[1:]}
    assert drm in (
        {"/dev/dri/card1", "/dev/dri/renderD128"},
        {"/dev/dri/card2", "/dev/dri/renderD129"},
    )

    def recorded() -> str | None:
        stored = kube.get("v1", "Pod", "train", amd_node.namespace) or {}
        return (stored.get("metadata") or {}).get("annotations", {}).get(ALLOCATED_ANNOTATION)

    annotation = wait_for(recorded, 10, "the grant's annotation")
    [row] = [claim.row for claim in parse_allocated(annotation)["main"].claims()]
    assert (row.mode, row.allocated) == (Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
    card = "/dev/dri/card1" if row.index == 0 else "/dev/dri/card2"
    assert card in drm

    def mode() -> Mode | None:
        found = kube.get(WORKER, "Devices", amd_node.name)
        held = Devices.parse(found).status.row("amd", "instinct-mi300x", row.id) if found else None
        return held.mode if held is not None else None

    wait_for(lambda: mode() == Mode.EXCLUSIVE, 15, "the ledger to charge the AMD card")

    # Two quarter slices land on the other card: a memory cap each, side-by-side CU windows
    # (25 % of 304 CUs is 76, aligned down to the 8-XCC atom: 72).
    kubelet.wait_devices(SLICED, lambda d: len(d) > 0, timeout=30)
    masks = []
    for name in ("slice-a", "slice-b"):
        limits = {
            SLICED: "1",
            f"{SLICED}.cores-percentage": "25",
            f"{SLICED}.memory-percentage": "25",
        }
        sliced = kube.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": amd_node.namespace},
                "spec": {
                    "nodeName": amd_node.name,
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": limits, "requests": limits},
                        }
                    ],
                },
            }
        )
        kubelet.admit(sliced)
        envs = dict(kubelet.responses[-1][2].envs)
        assert envs["ROCR_VISIBLE_DEVICES"] in cards - {row.id}
        assert envs["VROCM_DEVICE_MEMORY_LIMIT_0"] == str(196592 * 25 // 100)
        masks.append(envs["HSA_CU_MASK"])
    assert masks == ["0:0-71", "0:72-143"]

    # The agent's metrics saw it all: three grants, the exclusive card's units, the slices.
    def scraped() -> str:
        url = f"http://127.0.0.1:{amd_node.health_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return str(reply.read().decode())

    text = scraped()
    assert f'gpustack_allocate_seconds_count{{outcome="granted",resource="{GPU}"}} 1.0' in text
    assert f'gpustack_allocate_seconds_count{{outcome="granted",resource="{SLICED}"}} 2.0' in text
    held = (
        f'gpustack_card_allocated_units{{card="{row.id}",group="instinct-mi300x",'
        f'manufacturer="amd",mode="exclusive"}} 1.6e+06'
    )
    wait_for(lambda: held in scraped(), 15, "the ledger's units in the agent's metrics")
