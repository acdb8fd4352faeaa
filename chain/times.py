"""The two time formats of the Kubernetes API, from seconds since the epoch: the caller reads its
clock (the pure code takes the time as an argument, so a hook's answer stays a function of its
request and the clock it was given)."""

from __future__ import annotations

import time


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC to the second, as the API server writes a `metav1.Time`
    (`lastTransitionTime`, `creationTimestamp`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def micro_timestamp(seconds: float) -> str:
    """RFC 3339 in UTC to the microsecond, a `metav1.MicroTime` (an Event's `eventTime`, a
    Lease's `renewTime`)."""
    whole = int(seconds)
    micros = round((seconds - whole) * 1_000_000)
    if micros == 1_000_000:
        whole, micros = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"
