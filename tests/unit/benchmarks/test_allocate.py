"""The Allocate benchmark's pure parts (the spreads, the printed table, the Pod it admits, its
in-memory node) and the emulator's Allocate timings it reads."""

from __future__ import annotations

import pytest

from benchmarks.allocate import (
    SLICE,
    MemoryNode,
    Row,
    Spread,
    report,
    sliced_pod,
    spread,
    stored_pod,
)
from chain.ledger import Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, PodAllocations
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.plugin.identify import candidates, container_limit
from testbed.kubelet import AdmissionError
from tests.unit.nodeagent.plugin.fakes import GPU, rig


def test_spread_is_the_median_and_the_99th_percentile() -> None:
    samples = [float(n) for n in range(100, 0, -1)]  # unordered on purpose
    assert spread(samples) == Spread(50.5, 99.0)


def test_report_lines_up_the_variants_their_ratio_and_hamis_figure() -> None:
    rows = [
        Row("api", Spread(0.010, 0.040), Spread(0.020, 0.050), 0),
        Row("memory", Spread(0.005, 0.010), Spread(0.010, 0.025), 2),
    ]
    header, api, memory, ratio, hami = report(rows, [("api", "memory")])
    assert header.split()[0] == "variant" and header.split()[-1] == "refused"
    assert api.split() == ["api", "10.0", "/", "40.0", "ms", "20.0", "/", "50.0", "ms", "0"]
    assert memory.split()[-1] == "2"
    assert ratio.split() == [
        "ratio",
        "api",
        "/",
        "memory",
        "2.00",
        "/",
        "4.00",
        "2.00",
        "/",
        "2.00",
    ]
    assert len({len(line) for line in (header, api, memory)}) == 1  # columns line up
    assert "~20 ms" in hami and "Project-HAMi/website PR #734" in hami


def test_the_benchmark_pod_is_one_the_plugin_identifies() -> None:
    pod = stored_pod(sliced_pod("slice-0", "node-a"))
    [found] = candidates([pod], SLICE, 1)
    assert found.allocations.phase == "Pending" and found.allocations.uid
    assert container_limit(found.container, SLICE + ".units") == RESOURCE_MAX_UNITS // 10
    assert pod["spec"]["nodeName"] == "node-a"


def test_memory_node_writes_the_annotation_on_a_new_object() -> None:
    node = MemoryNode()
    pod = stored_pod(sliced_pod("slice-0", "node-a"))
    node.add(pod)
    node.write("bench-allocate", "slice-0", "{}")
    [written] = node.pods()
    assert written["metadata"]["annotations"] == {ALLOCATED_ANNOTATION: "{}"}  # type: ignore[index]
    assert "annotations" not in pod["metadata"]  # what the caller holds is left alone
    assert PodAllocations.from_pod(written).records == {}
    node.remove(pod)
    assert node.pods() == []


def test_the_emulator_times_each_granted_allocate_only() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.ready()
        r.kubelet.admit(r.cluster.add("first", ("main", {GPU: "1"})))
        r.cluster.fail = RuntimeError("API down")  # the next grant cannot be recorded
        with pytest.raises(AdmissionError):
            r.kubelet.admit(r.cluster.add("second", ("main", {GPU: "1"})))
        assert len(r.kubelet.allocate_seconds) == len(r.kubelet.responses) == 1
        assert r.kubelet.allocate_seconds[0] > 0
