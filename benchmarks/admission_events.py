"""What the admission benchmark reads from what it watched: when each Workload reached each stage,
and which API requests the control plane served in between.

Pure: the shell (`benchmarks.admission`) feeds it watch events stamped with the local clock and
`/metrics` texts of the API server.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

from chain.queues import NODE_DEVICES_CHECK
from chain.workload_state import State, check_state
from kubeapi import Obj
from testbed.workloads import condition

VERDICTS = frozenset({State.READY.value, State.RETRY.value})


@dataclass(frozen=True)
class Stages:
    """When (local monotonic seconds) one Workload was first seen at each stage."""

    created: float | None = None
    """Just before its create request was sent."""
    reserved: float | None = None
    """QuotaReserved True."""
    judged: float | None = None
    """Our check entry Ready or Retry (the verdict written)."""
    admitted: float | None = None
    retried: bool = False
    """Some verdict on it was Retry."""


def observed(stages: Stages, workload: Obj, at: float, check: str = NODE_DEVICES_CHECK) -> Stages:
    """`stages` with every stage `workload` shows, first seen `at`, filled in."""
    state = check_state(workload, check)
    return replace(
        stages,
        reserved=_first(stages.reserved, at, condition(workload, "QuotaReserved") == "True"),
        judged=_first(stages.judged, at, state in VERDICTS),
        admitted=_first(stages.admitted, at, condition(workload, "Admitted") == "True"),
        retried=stages.retried or state == State.RETRY.value,
    )


def _first(seen: float | None, at: float, now: bool) -> float | None:
    return seen if seen is not None or not now else at


def throughput(stages: Iterable[Stages]) -> float:
    """Admitted Workloads per second, from the first create to the last admission."""
    done = [s for s in stages if s.admitted is not None]
    created = [s.created for s in done if s.created is not None]
    if not done or not created:
        return 0.0
    span = max(s.admitted for s in done if s.admitted is not None) - min(created)
    return len(done) / span if span > 0 else float("inf")


def verdict_latencies(stages: Iterable[Stages]) -> list[float]:
    """Seconds from quota reserved to our verdict written, per Workload judged."""
    return [
        s.judged - s.reserved
        for s in stages
        if s.judged is not None and s.reserved is not None and s.judged >= s.reserved
    ]


def admission_latencies(stages: Iterable[Stages]) -> list[float]:
    """Seconds from create to admitted, per Workload admitted."""
    return [
        s.admitted - s.created for s in stages if s.admitted is not None and s.created is not None
    ]


def verdict_pace(stages: Iterable[Stages]) -> float:
    """Median seconds between consecutive verdicts: the driver's cost per verdict while busy."""
    judged = sorted(s.judged for s in stages if s.judged is not None)
    gaps = [b - a for a, b in itertools.pairwise(judged)]
    return statistics.median(gaps) if gaps else 0.0


# --- API server requests ----------------------------------------------------------------------

RequestKey = tuple[str, str, str]
"""(verb, resource, subresource), as `apiserver_request_total` labels them."""

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_counts(metrics: str) -> Counter[RequestKey]:
    """Requests served so far by (verb, resource, subresource), summed over codes and groups."""
    counts: Counter[RequestKey] = Counter()
    for line in metrics.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] += round(float(match["value"]))
    return counts


def served_between(
    before: Mapping[RequestKey, int], after: Mapping[RequestKey, int]
) -> Counter[RequestKey]:
    """Requests served between two `request_counts` readings (keys that grew only)."""
    grown = Counter({key: after[key] - before.get(key, 0) for key in after})
    return Counter({key: n for key, n in grown.items() if n > 0})


def per_workload(
    extra: Mapping[RequestKey, int], workloads: int, top: int = 8
) -> list[tuple[RequestKey, float]]:
    """The `top` request kinds by how many more each Workload cost, largest first."""
    if workloads <= 0:
        return []
    ranked = sorted(extra.items(), key=lambda item: (-item[1], item[0]))
    return [(key, n / workloads) for key, n in ranked[:top]]


# --- the driver's own write timings -----------------------------------------------------------

Buckets = dict[float, float]
"""A Prometheus histogram's cumulative counts by upper bound (`le`; +Inf as `math.inf`)."""

WRITE_SECONDS = "gpustack_verdict_write_seconds"


def write_buckets(metrics: str) -> Buckets:
    """The driver's `gpustack_verdict_write_seconds` histogram from its `/metrics` text."""
    for family in text_string_to_metric_families(metrics):
        if family.name == WRITE_SECONDS:
            return {
                float(sample.labels["le"]): sample.value
                for sample in family.samples
                if sample.name == f"{WRITE_SECONDS}_bucket"
            }
    return {}


def buckets_between(before: Mapping[float, float], after: Mapping[float, float]) -> Buckets:
    """The observations made between two readings of one histogram."""
    return {le: count - before.get(le, 0.0) for le, count in after.items()}


def bucket_quantile(buckets: Mapping[float, float], fraction: float) -> float | None:
    """The upper bound of the bucket the `fraction` quantile falls in: the quantile is at most
    this (None without observations)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    for le in bounds:
        if buckets[le] >= fraction * total:
            return le
    return bounds[-1]
