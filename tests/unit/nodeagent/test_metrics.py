"""The agent's metrics: Allocate latency and refusals from real gRPC calls, the ledger's
units per card and mode, detection passes, and `/metrics` beside the probes."""

from __future__ import annotations

import contextlib
import urllib.request

from chain.devices import Devices, DevicesSpec
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.detect.loop import DetectLoop
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.health import Health
from nodeagent.health import serve as serve_health
from nodeagent.metrics import LEDGER, REGISTRY, exposition
from testbed.kubelet import AdmissionError
from tests.unit.nodeagent.helpers import nvidia_node
from tests.unit.nodeagent.plugin.fakes import GPU, SLICED, rig, t4_spec


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_allocate_latency_and_refusals_are_counted() -> None:
    granted = sample("gpustack_allocate_seconds_count", resource=GPU, outcome="granted")
    refused = sample("gpustack_allocate_refusals_total", resource=SLICED, code="Internal")
    with rig() as r:
        r.ready()
        r.kubelet.admit(r.cluster.add("whole", ("main", {GPU: "1"})))
        # A slice without a memory limit: HAMi-core cannot be configured, the grant is refused.
        unlimited = {SLICED: "1", SLICED + ".units": "100000"}
        with contextlib.suppress(AdmissionError):
            r.kubelet.admit(r.cluster.add("unlimited", ("main", unlimited)))
    assert sample("gpustack_allocate_seconds_count", resource=GPU, outcome="granted") == (
        granted + 1
    )
    after = sample("gpustack_allocate_refusals_total", resource=SLICED, code="Internal")
    assert after == refused + 1


def test_the_ledger_is_exposed_per_card_and_mode() -> None:
    spec = DevicesSpec(t4_spec().groups)
    group = spec.groups[0]
    first, second = group.accelerators[:2]
    rows = (
        AcceleratorAllocation(
            first.id,
            first.index,
            Mode.SLICED,
            remaining=RESOURCE_MAX_UNITS - 400000,
            allocated_slices=2,
        ),
    )
    status = DevicesStatus((DevicesAllocationGroup(group.id, "nvidia", rows),))
    LEDGER.observe(Devices("node-a", spec, status))
    card = {"manufacturer": "nvidia", "group": group.id}
    assert sample("gpustack_cards", **card, health="healthy") == 4
    assert sample("gpustack_card_allocated_units", **card, card=first.id, mode="sliced") == (400000)
    assert sample("gpustack_card_free_units", **card, card=first.id) == RESOURCE_MAX_UNITS - 400000
    assert sample("gpustack_card_slices", **card, card=first.id) == 2
    assert sample("gpustack_card_free_units", **card, card=second.id) == RESOURCE_MAX_UNITS


def test_metrics_are_served_beside_the_probes() -> None:
    server = serve_health(Health(60.0), 0, "127.0.0.1", metrics=exposition)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
            kind = answer.headers["Content-Type"]
        assert kind.startswith("text/plain; version=0.0.4")
        assert "# TYPE gpustack_allocate_seconds histogram" in text
        assert "# TYPE gpustack_detection_passes_total counter" in text
    finally:
        server.shutdown()


def test_detection_passes_are_counted_by_result() -> None:
    before = sample("gpustack_detection_passes_total", manufacturer="nvidia", result="measured")
    with nvidia_node("t4x4") as (detector, _, sysfs):
        detection = ManufacturerDetection(detector, sysfs, "10de", ("03",))
        loop = DetectLoop([detection], ("nvidia",), lambda _: None, lambda _: None)
        loop.detect()
        loop.detect()
    after = sample("gpustack_detection_passes_total", manufacturer="nvidia", result="measured")
    assert after == before + 2
