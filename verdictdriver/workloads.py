"""Pure: which Workloads wait for the driver's verdict, and what each asks of which nodes."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from chain.manufacturers import ManufacturerTable
from chain.queues import NODE_DEVICES_CONTROLLER
from chain.workload_state import State, check_state, needs_verdict, workload_shares
from kubeapi import Obj
from kubeapi.watch import key_of

log = logging.getLogger("admission-driver")


def metadata(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def controllers(admission_checks: Iterable[Obj]) -> dict[str, str]:
    """AdmissionCheck name -> its `spec.controllerName`."""
    return {
        str(metadata(ac).get("name", "")): str((ac.get("spec") or {}).get("controllerName", ""))
        for ac in admission_checks
    }


def owned_checks(
    workload: Obj, checks: Mapping[str, str], controller: str = NODE_DEVICES_CONTROLLER
) -> list[str]:
    """Names of the Workload's `admissionChecks` entries whose check is ours."""
    entries = (workload.get("status") or {}).get("admissionChecks") or []
    return [
        str(e.get("name"))
        for e in entries
        if isinstance(e, dict) and checks.get(str(e.get("name"))) == controller
    ]


def reserved_at(workload: Obj) -> str:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "QuotaReserved":
            return str(cond.get("lastTransitionTime", ""))
    return ""


def to_judge(workloads: Iterable[Obj], checks: Mapping[str, str]) -> list[Obj]:
    """Workloads waiting for our verdict, in the order Kueue reserved their quota.

    Reserved, not evicted, finished, deactivated or admitted (`needs_verdict`); with an entry
    of ours that is not Ready yet (a Ready stays promised until Kueue admits)."""
    out = []
    for wl in workloads:
        mine = owned_checks(wl, checks)
        try:
            if not mine or not needs_verdict(wl):
                continue
            if all(check_state(wl, name) == State.READY for name in mine):
                continue
        except ValueError as err:
            # One malformed Workload must not stop the verdicts of all the others.
            log.warning("skipping %s/%s: %s", *key_of(wl), err)
            continue
        out.append(wl)
    return sorted(out, key=lambda w: (reserved_at(w), key_of(w)))


def own_flavors(workload: Obj, table: ManufacturerTable) -> set[str]:
    return {s.flavor for s in workload_shares(workload, table) if s.flavor}


def assigned_hosts(workload: Obj, table: ManufacturerTable) -> set[str] | None:
    """Hostnames Kueue assigned, or None when some PodSet's assignment names no nodes."""
    shares = [s for s in workload_shares(workload, table) if any(p.cards for p in s.per_pod)]
    if any(not s.node for s in shares):
        return None
    return {s.node for s in shares}
