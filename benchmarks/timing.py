"""Side-by-side timing shared by the hook benchmarks: decode alone vs decode + hook + encode.

Samples are interleaved (and their order alternated) in one run, because the machines are noisy:
only the ratio of the two, measured together, means something.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from typing import Any


def timed(action: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(
    raw: bytes, hook: Callable[[Any], Any], repeats: int
) -> tuple[list[float], list[float]]:
    """Interleaved samples of `json.loads(raw)` and `json.dumps(hook(json.loads(raw)))`."""

    def decode() -> None:
        json.loads(raw)

    def serve() -> None:
        json.dumps(hook(json.loads(raw)))

    serve()  # warm imports and caches outside the samples
    decoded: list[float] = []
    served: list[float] = []
    for index in range(repeats):
        pair = [(decoded, decode), (served, serve)]
        for samples, action in pair if index % 2 == 0 else reversed(pair):
            samples.append(timed(action))
    return decoded, served
