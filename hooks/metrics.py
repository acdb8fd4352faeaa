"""The hooks' and webhooks' Prometheus metrics, at `GET /metrics` beside `/healthz`.

- `gpustack_hook_requests_total{app,route,code}`: requests by route and HTTP status;
- `gpustack_hook_request_seconds{app,route}`: how long a request took;
- `gpustack_hook_request_bytes{app,route}`: request body sizes (Metacontroller sends the parent,
  its children and every related object, so this is what grows with the cluster);
- `gpustack_webhook_decisions_total{app,route,decision,rule}`: what the webhooks answered
  (`allowed`, `patched`, `denied`, `retry`), and for a refusal each rule that refused (an
  AdmissionReview answer is an HTTP 200 whatever it says, so the request count cannot tell).

gunicorn runs several worker processes, and a scrape reaches one of them: with
`PROMETHEUS_MULTIPROC_DIR` set (the shipped Deployments set it, `hooks/gunicorn_conf.py` empties
it at start and retires a dead worker's files), every worker writes its values there and
`/metrics` adds them up. Without it (a single process: tests, the testbed's direct runs) the
process's own values are served.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_LOCAL = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "gpustack_hook_requests",
    "Hook requests, by app, route and HTTP status.",
    ["app", "route", "code"],
    registry=_LOCAL,
)
SECONDS = Histogram(
    "gpustack_hook_request_seconds",
    "Time a hook request took, by app and route.",
    ["app", "route"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
    registry=_LOCAL,
)
BYTES = Histogram(
    "gpustack_hook_request_bytes",
    "Hook request body sizes, by app and route.",
    ["app", "route"],
    buckets=(1e3, 1e4, 1e5, 1e6, 1e7, 1e8),
    registry=_LOCAL,
)


DECISIONS = Counter(
    "gpustack_webhook_decisions",
    "Webhook answers, by app, route, decision and the rule that refused.",
    ["app", "route", "decision", "rule"],
    registry=_LOCAL,
)


def decision(answer: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What an AdmissionReview answer decided (`allowed`, `patched`, `denied`, or `retry` for
    a refusal that goes away by itself, a 503) and the rules that refused (the `rules` an
    `admissionreview.Answer` carries; `other` when it names none)."""
    response = answer.get("response") or {}
    if response.get("allowed"):
        return ("patched" if response.get("patch") else "allowed"), ()
    code = (response.get("status") or {}).get("code")
    rules = getattr(answer, "rules", ()) or ("other",)
    return ("retry" if code == 503 else "denied"), tuple(rules)


def decided(app: str, route: str, answer: Mapping[str, Any]) -> None:
    """One webhook answer: counted once per rule that refused (once, rule "", if none did)."""
    verdict, rules = decision(answer)
    for rule in rules or ("",):
        DECISIONS.labels(app, route, verdict, rule).inc()


def observe(app: str, route: str, code: int, seconds: float, size: int) -> None:
    REQUESTS.labels(app, route, str(code)).inc()
    SECONDS.labels(app, route).observe(seconds)
    BYTES.labels(app, route).observe(size)


def exposition() -> bytes:
    """Every worker's values (multiprocess mode), else this process's."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(_LOCAL)
