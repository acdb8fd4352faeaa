"""Pure: the driver's `status.admissionChecks` entries and the apply bodies that write them, and
the AdmissionCheck's Active condition."""

from __future__ import annotations

import time
from collections.abc import Sequence

from chain.apis import ADMISSION_CHECK, KUEUE_API
from chain.apis import WORKLOAD as WORKLOAD_KIND
from chain.times import timestamp
from chain.verdicts import Verdict
from chain.workload_state import State
from kubeapi import Obj
from verdictdriver.workloads import metadata

RETRY_AFTER_SECONDS = 30
ACTIVE_MESSAGE = "The admission check is active"


def now_text() -> str:
    return timestamp(time.time())


def _entry(workload: Obj, name: str) -> Obj | None:
    for e in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(e, dict) and e.get("name") == name:
            return e
    return None


def check_entry(previous: Obj | None, name: str, verdict: Verdict, now: str) -> Obj:
    """Our entry for `verdict`; the transition time moves only when the state does."""
    state = str(verdict.state)
    kept = previous is not None and previous.get("state") == state
    entry: Obj = {
        "name": name,
        "state": state,
        "message": verdict.message,
        "lastTransitionTime": (previous or {}).get("lastTransitionTime") if kept else now,
    }
    if verdict.state == State.RETRY:
        entry["requeueAfterSeconds"] = RETRY_AFTER_SECONDS
    return entry


def _same(previous: Obj | None, entry: Obj) -> bool:
    return previous is not None and all(
        previous.get(k) == entry.get(k) for k in ("state", "message", "requeueAfterSeconds")
    )


def verdict_patch(workload: Obj, names: Sequence[str], verdict: Verdict, now: str) -> Obj | None:
    """The apply body for our entries, or None when every one already says this."""
    entries = [check_entry(_entry(workload, n), n, verdict, now) for n in names]
    if all(_same(_entry(workload, e["name"]), e) for e in entries):
        return None
    meta = metadata(workload)
    return {
        "apiVersion": KUEUE_API,
        "kind": WORKLOAD_KIND,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            # A stale read fails with 409 rather than answering a Workload that moved on.
            "resourceVersion": meta.get("resourceVersion"),
        },
        "status": {"admissionChecks": entries},
    }


def active_patch(check: Obj, now: str) -> Obj | None:
    """The apply body that marks an AdmissionCheck Active, or None when it already is."""
    meta = metadata(check)
    generation = meta.get("generation")
    for cond in (check.get("status") or {}).get("conditions") or []:
        if (
            isinstance(cond, dict)
            and cond.get("type") == "Active"
            and cond.get("status") == "True"
            and cond.get("reason") == "Active"
            and cond.get("observedGeneration") == generation
        ):
            return None
    condition: Obj = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": ACTIVE_MESSAGE,
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return {
        "apiVersion": KUEUE_API,
        "kind": ADMISSION_CHECK,
        "metadata": {"name": meta["name"]},
        "status": {"conditions": [condition]},
    }


def as_written(workload: Obj, body: Obj) -> Obj:
    """`workload` with the entries of `body` (a `verdict_patch`) in place of its own."""
    written = {e["name"]: e for e in body["status"]["admissionChecks"]}
    status = dict(workload.get("status") or {})
    entries = [
        written.pop(str(e.get("name")), e)
        for e in status.get("admissionChecks") or []
        if isinstance(e, dict)
    ]
    status["admissionChecks"] = [*entries, *written.values()]
    return {**workload, "status": status}
