"""The verdict driver's Prometheus metrics, served at `/metrics` beside `/healthz` (port 8080).

- `gpustack_verdicts_total{state}`: verdicts written (`Ready` or `Retry`: the driver never rejects);
- `gpustack_verdict_seconds{state}`: from the Workload's QuotaReserved transition to its
  verdict written (Kueue stamps whole seconds, so the low buckets read coarse);
- `gpustack_verdict_write_seconds`: one verdict write's round trip (the API server, Kueue's
  validating webhook on `workloads/status`, etcd), landed or not: what any AdmissionCheck pays
  between its decision and its verdict being there;
- `gpustack_verdict_write_failures_total`: verdict writes that did not land (judged again);
- `gpustack_promises`: Readys written and not yet seen back in the watch cache (cards promised
  that the next verdict must not hand out again);
- `gpustack_lease_leading`: 1 while this replica holds the Lease (only the leader judges).

One registry per process (`REGISTRY`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

VERDICTS = Counter("gpustack_verdicts", "Verdicts written, by state.", ["state"], registry=REGISTRY)
VERDICT_SECONDS = Histogram(
    "gpustack_verdict_seconds",
    "From a Workload's QuotaReserved transition to its verdict written, by state.",
    ["state"],
    buckets=(0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0),
    registry=REGISTRY,
)
WRITE_SECONDS = Histogram(
    "gpustack_verdict_write_seconds",
    "One verdict write's round trip to the API server, landed or not.",
    buckets=(0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.25, 1.0, 5.0),
    registry=REGISTRY,
)
WRITE_FAILURES = Counter(
    "gpustack_verdict_write_failures",
    "Verdict writes that did not land (the Workload is judged again).",
    registry=REGISTRY,
)
PROMISES = Gauge(
    "gpustack_promises",
    "Ready verdicts written and not yet seen back in the watch cache.",
    registry=REGISTRY,
)
LEADING = Gauge(
    "gpustack_lease_leading", "1 while this replica holds the verdict Lease.", registry=REGISTRY
)


def since(reserved_at: str, now: datetime | None = None) -> float | None:
    """Seconds since an RFC 3339 `lastTransitionTime`; None when there is none to read."""
    if not reserved_at:
        return None
    try:
        then = datetime.fromisoformat(reserved_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(((now or datetime.now(UTC)) - then).total_seconds(), 0.0)


def watch(promises: Callable[[], int], leading: Callable[[], bool]) -> None:
    """Read the promises held and the Lease at scrape time."""
    PROMISES.set_function(lambda: float(promises()))
    LEADING.set_function(lambda: 1.0 if leading() else 0.0)


def exposition() -> bytes:
    return generate_latest(REGISTRY)
