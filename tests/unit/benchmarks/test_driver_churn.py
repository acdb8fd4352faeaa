"""The driver churn benchmark's report (issue #35, item 3): which samples its ratio compares.
The run itself needs a testbed (`python -m benchmarks.driver_churn`); no memory figure is
asserted here."""

from __future__ import annotations

from benchmarks.driver_churn import Sample, report


def _samples(*rss_mib: float) -> list[Sample]:
    return [Sample(100 * i, int(mib * 1024), 20, 12) for i, mib in enumerate(rss_mib)]


def test_the_ratio_is_the_end_over_the_sample_after_the_warm_up_not_over_the_start() -> None:
    # The start is before any verdict (imports settle on the first rounds): growth up to the
    # warm-up is not counted.
    lines = report(_samples(40.0, 60.0, 64.0, 65.0, 66.0), warmup=2, rounds=4)
    assert lines[-1].endswith("end / warm-up 1.031 (goal <= 1.10: met)"), lines
    assert "warm-up (200 Workloads) 64.0 MiB" in lines[-1]
    assert "middle (200) 64.0 MiB" in lines[-1]
    assert "lowest 64.0 MiB, highest 66.0 MiB" in lines[-1]


def test_growth_past_the_goal_is_called_missed() -> None:
    lines = report(_samples(40.0, 50.0, 56.0), warmup=1, rounds=2)
    assert lines[-1].endswith("end / warm-up 1.120 (goal <= 1.10: MISSED)"), lines
