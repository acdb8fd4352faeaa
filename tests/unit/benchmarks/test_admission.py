"""The admission benchmark's pure parts: stages read from watched Workloads, the figures derived
from them, the API server's request counters, and the objects it writes (a Ready verdict)."""

from __future__ import annotations

import math
import os
import pstats
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.admission import DRIVER, TRIVIAL, alternated, devices, free_ledger, workload
from benchmarks.admission_events import (
    Stages,
    admission_latencies,
    bucket_quantile,
    buckets_between,
    observed,
    per_workload,
    request_counts,
    served_between,
    throughput,
    verdict_latencies,
    verdict_pace,
    write_buckets,
)
from chain.devices import Devices
from chain.manufacturers import manufacturers
from chain.queues import NODE_DEVICES_CHECK
from chain.verdicts import NODE_READY, Snapshot, judge
from chain.workload_state import State

T4_KEY = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
FLAVOR = "gpustack--nvidia-tesla-t4-linux-amd64-8c"
REPO = Path(__file__).resolve().parents[3]


def seen(conditions: tuple[str, ...] = (), checks: dict[str, str] | None = None) -> dict[str, Any]:
    """A watched Workload with `conditions` True and these check entry states."""
    return {
        "metadata": {"name": "w", "namespace": "bench"},
        "status": {
            "conditions": [
                {"type": t, "status": "True" if t in conditions else "False"}
                for t in ("QuotaReserved", "Admitted")
            ],
            "admissionChecks": [
                {"name": n, "state": s, "message": ""} for n, s in (checks or {}).items()
            ],
        },
    }


def test_each_stage_is_stamped_when_first_seen() -> None:
    stages = Stages(created=1.0)
    stages = observed(stages, seen(), 1.5)
    assert stages == Stages(created=1.0)
    stages = observed(stages, seen(("QuotaReserved",), {NODE_DEVICES_CHECK: "Pending"}), 2.0)
    assert (stages.reserved, stages.judged) == (2.0, None)
    stages = observed(stages, seen(("QuotaReserved",), {NODE_DEVICES_CHECK: "Ready"}), 2.5)
    stages = observed(stages, seen(("QuotaReserved", "Admitted"), {NODE_DEVICES_CHECK: "Ready"}), 3)
    # Later sightings of a stage already seen move nothing.
    stages = observed(stages, seen(("QuotaReserved", "Admitted"), {NODE_DEVICES_CHECK: "Ready"}), 9)
    assert stages == Stages(created=1.0, reserved=2.0, judged=2.5, admitted=3, retried=False)


def test_a_retry_is_a_verdict_and_is_remembered() -> None:
    stages = observed(Stages(), seen(("QuotaReserved",), {NODE_DEVICES_CHECK: "Retry"}), 4.0)
    stages = observed(stages, seen(("QuotaReserved",), {NODE_DEVICES_CHECK: "Ready"}), 5.0)
    assert (stages.judged, stages.retried) == (4.0, True)


def test_another_checks_entry_is_not_our_verdict() -> None:
    stages = observed(Stages(), seen(("QuotaReserved",), {"other-check": "Ready"}), 4.0)
    assert stages.judged is None


def test_throughput_spans_first_create_to_last_admission() -> None:
    stages = [
        Stages(created=10.0, admitted=12.0),
        Stages(created=11.0, admitted=14.0),
        Stages(created=12.0, admitted=13.0),
        Stages(created=9.0),  # never admitted: neither counted nor opening the span
    ]
    assert throughput(stages) == pytest.approx(3 / 4)
    assert throughput([Stages(created=1.0)]) == 0.0


def test_latencies() -> None:
    stages = [
        Stages(created=0.0, reserved=1.0, judged=1.25, admitted=1.5),
        Stages(created=0.0, reserved=2.0, admitted=2.5),  # no check on its queue
        Stages(created=1.0, reserved=2.0, judged=3.0),
    ]
    assert verdict_latencies(stages) == [0.25, 1.0]
    assert admission_latencies(stages) == [1.5, 2.5]


def test_verdict_pace_is_the_median_gap_between_verdicts() -> None:
    stages = [Stages(judged=t) for t in (5.0, 1.0, 1.5, 2.5, 2.0)] + [Stages(reserved=3.0)]
    assert verdict_pace(stages) == 0.5
    assert verdict_pace([Stages(judged=1.0)]) == 0.0


METRICS = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",\
scope="namespace",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kueue.x-k8s.io",\
resource="workloads",scope="resource",subresource="status",verb="APPLY",version="v1beta2"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kueue.x-k8s.io",\
resource="workloads",scope="resource",subresource="status",verb="APPLY",version="v1beta2"} 2
apiserver_request_duration_seconds_count{resource="pods",verb="LIST"} 99
"""


def test_request_counts_sum_codes_and_ignore_other_metrics() -> None:
    assert request_counts(METRICS) == {
        ("LIST", "pods", ""): 40,
        ("APPLY", "workloads", "status"): 9,
    }


def test_requests_served_between_readings_and_per_workload() -> None:
    before = request_counts(METRICS)
    after = before.copy()
    after[("LIST", "pods", "")] += 30
    after[("GET", "devices", "")] += 10
    extra = served_between(before, after)
    assert extra == {("LIST", "pods", ""): 30, ("GET", "devices", ""): 10}
    assert per_workload(extra, 10) == [(("LIST", "pods", ""), 3.0), (("GET", "devices", ""), 1.0)]
    assert per_workload(extra, 10, top=1) == [(("LIST", "pods", ""), 3.0)]
    assert per_workload(extra, 0) == []


def test_the_benchmarks_objects_get_a_ready_verdict() -> None:
    """A benchmark Workload, assigned one node of the pool, fits that node's free ledger."""
    wl = workload("bench-00001")
    wl["status"] = {
        "conditions": [{"type": "QuotaReserved", "status": "True"}],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 1,
                    "flavors": {"credits.gpustack.ai/nvidia": FLAVOR},
                    "topologyAssignment": {
                        "levels": ["kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": 1,
                                "valuesPerLevel": [{"universal": "t4-0001"}],
                                "podCounts": {"universal": 1},
                            }
                        ],
                    },
                }
            ],
        },
    }
    labels = {T4_KEY: "true", "gpustack.ai/managed": "true"}
    flavor = {
        "metadata": {"name": FLAVOR},
        "spec": {"nodeLabels": {**labels, f"{T4_KEY}.count": "8"}},
    }
    ledgers = [
        Devices.parse({**devices(n, labels, 8), "status": free_ledger(n, 8)["status"]})
        for n in ("t4-0000", "t4-0001")
    ]
    snapshot = Snapshot({FLAVOR: flavor}, ledgers, {d.name: d.name for d in ledgers})
    verdict = judge(wl, snapshot, manufacturers({}))
    assert verdict.state == State.READY
    assert verdict.message == NODE_READY.format(node="t4-0001")


def test_profiled_writes_the_profile_when_asked(tmp_path: Path) -> None:
    """The wrapper runs a module as `python -m` would and writes its profile on SIGUSR1."""
    (tmp_path / "asker.py").write_text(
        "import os, signal, sys\n"
        "def busy():\n"
        "    return sum(range(1000))\n"
        "busy()\n"
        "assert sys.argv[1:] == ['--flag', 'x'], sys.argv\n"
        "os.kill(os.getpid(), signal.SIGUSR1)\n"
    )
    out = tmp_path / "out.prof"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    command = [sys.executable, "-m", "benchmarks.profiled", str(out), "asker", "--flag", "x"]
    subprocess.run(command, env=env, check=True, timeout=60)
    functions = {name for _, _, name in pstats.Stats(str(out)).stats}  # type: ignore[attr-defined]
    assert "busy" in functions


def test_driver_and_trivial_check_take_turns_going_first() -> None:
    assert alternated(3) == [
        (0, DRIVER),
        (0, TRIVIAL),
        (1, TRIVIAL),
        (1, DRIVER),
        (2, DRIVER),
        (2, TRIVIAL),
    ]


def test_the_drivers_write_times_are_read_from_its_histogram() -> None:
    text = "\n".join(
        [
            "# TYPE gpustack_verdict_write_seconds histogram",
            'gpustack_verdict_write_seconds_bucket{le="0.01"} 50.0',
            'gpustack_verdict_write_seconds_bucket{le="0.02"} 95.0',
            'gpustack_verdict_write_seconds_bucket{le="0.05"} 99.0',
            'gpustack_verdict_write_seconds_bucket{le="+Inf"} 100.0',
            "gpustack_verdict_write_seconds_count 100.0",
        ]
    )
    after = write_buckets(text)
    assert after == {0.01: 50.0, 0.02: 95.0, 0.05: 99.0, math.inf: 100.0}
    before = {0.01: 40.0, 0.02: 40.0, 0.05: 40.0, math.inf: 40.0}
    run = buckets_between(before, after)  # 10 under 10 ms, 45 more under 20, 4 under 50, 1 over
    assert bucket_quantile(run, 0.1) == 0.01
    assert bucket_quantile(run, 0.5) == 0.02
    assert bucket_quantile(run, 0.95) == 0.05
    assert bucket_quantile(run, 0.99) == math.inf  # the 60th is over 50 ms
    assert bucket_quantile(buckets_between(after, after), 0.5) is None
    assert bucket_quantile({}, 0.5) is None
