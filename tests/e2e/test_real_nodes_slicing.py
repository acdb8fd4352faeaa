"""Slices only where their isolation library is: on the real nodes, installed as a user installs
it, with NVIDIA's library staged by the shipped component's init container.

Simulated, said plainly: the cards (node-b's 2 x L4) and the library (the testbed's stand-in,
testbed/isolation/standin.c: a real shared object that loads and enforces nothing). Real: the
init container that staged it from an image, the agent's check (an ELF of this machine that
`dlopen` accepts, in a subprocess of the agent's container), the kubelet's allocatable, the
counting keys, the pool's InstanceType views and the Node's Events.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chain.devices import Devices
from kubeapi import wait_for
from nodeagent.node_events import SLICING_AVAILABLE, SLICING_UNAVAILABLE
from nodeagent.plugin.grants import OPERATOR_LIB_DIR
from testbed.cluster import REAL_NODES
from testbed.harness import Testbed
from testbed.realnode import RealNode

NODE = "node-b"  # 2 x NVIDIA L4, driver CUDA 12.4
L4_POOL = "gpustack--nvidia-l4-linux-amd64"
SLICED = "nvidia.com/gpu.sliced"
LIBRARY = f"{OPERATOR_LIB_DIR}/nvidia/cuda-12/libvgpu.so"
WORKER = "worker.gpustack.ai/v1alpha1"


def _allocatable(bed: Testbed) -> dict[str, str]:
    found = bed.kube.get("v1", "Node", NODE) or {}
    return dict(found.get("status", {}).get("allocatable", {}))


def _slices_offered(bed: Testbed) -> bool:
    offered = _allocatable(bed)
    return offered.get(SLICED, "0") != "0" and f"{SLICED}.units" in offered


def _sliced_view(bed: Testbed) -> str:
    """The SL view (`onceMaxRequest/remaining`) of the L4 pool's InstanceType."""
    found = bed.kube.get(WORKER, "InstanceType", L4_POOL) or {}
    summary = str(found.get("status", {}).get("acceleratorSummary") or "")
    views = summary.split(" ")
    return views[2] if len(views) == 4 else ""


def _events(bed: Testbed, reason: str) -> list[str]:
    """The notes of the Node's Events with `reason`."""
    return [
        str(event.get("note", ""))
        for event in bed.kube.list("events.k8s.io/v1", "Event")
        if event.get("reason") == reason and event.get("regarding", {}).get("name") == NODE
    ]


def _unavailable(bed: Testbed) -> list[str]:
    found = bed.kube.get(WORKER, "Devices", NODE)
    if found is None:
        return []
    return [
        g.slicing_unavailable for g in Devices.parse(found).spec.groups if g.slicing_unavailable
    ]


@pytest.fixture
def library_removed(real_chain: Testbed) -> Iterator[Testbed]:
    """node-b's staged library moved away on the node itself (as if never staged), and put back
    after the test."""
    bed = real_chain
    (spec,) = [s for s in REAL_NODES if s.name == NODE]
    staged = RealNode(bed, spec).host_path(LIBRARY)
    wait_for(lambda: staged.is_file() and _slices_offered(bed), 180, "node-b's slices")
    aside = Path(f"{staged}.aside")
    staged.rename(aside)
    try:
        yield bed
    finally:
        aside.rename(staged)
        wait_for(lambda: _slices_offered(bed), 120, "node-b's slices back")


def test_a_node_without_the_library_offers_no_slices_and_says_why(
    library_removed: Testbed,
) -> None:
    bed = library_removed
    # The agent's next round finds the library gone: no sliced token, no counting key.
    wait_for(lambda: not _slices_offered(bed), 90, "node-b to stop offering slices")
    assert f"{SLICED}.units" not in _allocatable(bed)
    (reason,) = wait_for(lambda: _unavailable(bed), 30, "the reason on node-b's Devices")
    assert LIBRARY in reason and "missing" in reason
    notes = wait_for(lambda: _events(bed, SLICING_UNAVAILABLE), 60, "the SlicingUnavailable Event")
    assert any(LIBRARY in note for note in notes), notes
    # The pool's InstanceType shows no slice of node-b's cards (they are the pool's only ones).
    wait_for(lambda: _sliced_view(bed).endswith("/0"), 90, "the L4 pool's SL view to empty")
    # Exclusive cards are untouched.
    assert _allocatable(bed).get("nvidia.com/gpu") == "2"


def test_the_staged_library_is_checked_and_slices_are_offered(real_chain: Testbed) -> None:
    """With the init container's library in place, both nodes offer slices and say nothing
    against them; the L4 pool's SL view counts them."""
    bed = real_chain
    wait_for(lambda: _slices_offered(bed), 180, "node-b's slices")
    assert _unavailable(bed) == []
    wait_for(lambda: not _sliced_view(bed).endswith("/0"), 90, "the L4 pool's SL view")
    # If the library was ever found missing (the test above), its return was said too.
    if _events(bed, SLICING_UNAVAILABLE):
        wait_for(lambda: _events(bed, SLICING_AVAILABLE), 60, "the SlicingAvailable Event")
