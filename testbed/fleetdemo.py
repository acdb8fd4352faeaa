"""The fleet scene (`make demo-fleet`, `python -m testbed demo-fleet`): a tenant's Job on a fleet
of clusters, dispatched by MultiKueue and mirrored back (docs/fleet.md).

It starts the fleet bed (`testbed.fleet`: a manager and two members on this machine), shows the
fleet's InstanceTypes beside each member's own, creates a Job asking one L4 card on the
manager, shows where MultiKueue dispatched it (member-b, the only member with L4 cards), marks
the member's Pod Succeeded (SIMULATED: the emulated members run no containers), and shows the
manager's Job Complete with the member's status, and the member's copy deleted. Then it takes
the bed down.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from chain import cli
from chain.apis import KUEUE_API, WORKER_API
from chain.fleet_pools import fleet_check_name
from chain.names import local_queue_name
from kubeapi import Kube, Obj, wait_for
from testbed import build
from testbed.fleet import L4_POOL, MEMBERS, FleetBed, succeed_pod
from testbed.nodes import T4_POOL
from testbed.workloads import condition, queued_job

NAMESPACE = "team-demo"
COLUMNS = ("CLUSTER", "POOL", "MEMBERS", "EXCLUSIVE", "SHARED", "SLICED")
SUMMARY_VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced")


def view_cell(status: Mapping[str, object], view: str) -> str:
    """`onceMaxRequest/remaining of capacity`, as the InstanceType's printer columns read."""
    found = status.get(view)
    if not isinstance(found, Mapping):
        return "-"
    once, remaining = found.get("onceMaxRequest", 0), found.get("remaining", 0)
    return f"{once}/{remaining} of {found.get('capacity', 0)}"


def pool_rows(cluster: str, types: Sequence[Obj]) -> list[tuple[str, ...]]:
    """One row per card pool of a cluster (CPU pools left out: the scene is about cards)."""
    rows = []
    for obj in sorted(types, key=lambda o: str(o["metadata"]["name"])):
        if not (obj.get("spec") or {}).get("acceleratable"):
            continue
        status = obj.get("status") or {}
        members = str(status.get("memberSummary") or "-")
        cells = tuple(view_cell(status, view) for view in SUMMARY_VIEWS)
        rows.append((cluster, str(obj["metadata"]["name"]), members, *cells))
    return rows


def table(rows: Sequence[tuple[str, ...]], columns: Sequence[str] = COLUMNS) -> str:
    return "\n".join(cli.columns([tuple(columns), *rows]))


def dispatch_line(job: str, workload: Obj | None, pool: str) -> str:
    """Where the manager's Workload of `job` stands: waiting, or on which member."""
    status = (workload or {}).get("status") or {}
    checks = {c.get("name"): c for c in status.get("admissionChecks") or []}
    check = checks.get(fleet_check_name(pool)) or {}
    state = check.get("state") or "not yet"
    where = status.get("clusterName") or "-"
    line = f"job {job}: MultiKueue check {state}, dispatched to {where}"
    message = check.get("message")
    return f"{line}: {message}" if message else line


def job_line(cluster: str, job: Obj | None) -> str:
    status = (job or {}).get("status") or {}
    complete = condition(job, "Complete") or "-"
    return (
        f"{cluster}: job {(job or {}).get('metadata', {}).get('name', '?')} "
        f"succeeded={status.get('succeeded', 0)} Complete={complete}"
    )


def _workload_of(kube: Kube, job: str) -> Obj | None:
    for workload in kube.list(KUEUE_API, "Workload", NAMESPACE):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(owner.get("name") == job for owner in owners):
            return workload
    return None


def scene(bed: FleetBed, say: Callable[[str], None] = print) -> None:
    manager = bed.manager.kube
    member_b = bed.members["member-b"].kube
    for kube in (manager, *(m.kube for m in bed.members.values())):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

    def summary(pool: str) -> object:
        return ((manager.get(WORKER_API, "InstanceType", pool) or {}).get("status") or {}).get(
            "memberSummary"
        )

    wait_for(lambda: summary(L4_POOL) == "1/1 member-b", 180, "the fleet's L4 pool")
    wait_for(lambda: summary(T4_POOL) == "2/2 member-a,member-b", 180, "the fleet's T4 pool")
    rows = pool_rows("manager", manager.list(WORKER_API, "InstanceType"))
    for name, member in bed.members.items():
        rows += pool_rows(name, member.kube.list(WORKER_API, "InstanceType"))
    say("The fleet's pools (the manager's rows are the members' sums):")
    say(table(rows))
    queue = local_queue_name(L4_POOL)
    wait_for(lambda: manager.get(KUEUE_API, "LocalQueue", queue, NAMESPACE), 120, "the queue")
    job = f"l4-{uuid.uuid4().hex[:6]}"
    manager.create(queued_job(job, NAMESPACE, queue, {"nvidia.com/gpu": "1"}, "busybox", "true"))
    say(f"\nA tenant's Job asking one L4 card, created on the manager: {NAMESPACE}/{job}")

    def dispatched() -> Obj | None:
        workload = _workload_of(manager, job)
        return workload if ((workload or {}).get("status") or {}).get("clusterName") else None

    say(dispatch_line(job, wait_for(dispatched, 180, "the dispatch"), L4_POOL))
    pod = wait_for(
        lambda: next(
            iter(member_b.list("v1", "Pod", NAMESPACE, label_selector=f"job-name={job}")), None
        ),
        120,
        "member-b's Pod",
    )
    say(f"member-b made Pod {pod['metadata']['name']}; SIMULATED: it is marked Succeeded")
    succeed_pod(member_b, pod)
    mirrored = wait_for(
        lambda: (
            j
            if condition(j := manager.get("batch/v1", "Job", job, NAMESPACE), "Complete") == "True"
            else None
        ),
        180,
        "the manager's Job Complete",
    )
    say(job_line("manager", mirrored) + " (mirrored from member-b)")
    wait_for(
        lambda: member_b.get("batch/v1", "Job", job, NAMESPACE) is None, 60, "member-b's copy gone"
    )
    say("member-b's copy of the Job: deleted by MultiKueue once the manager's Workload finished")


def main(argv: Sequence[str] | None = None) -> int:
    build.ensure()
    root = Path(tempfile.mkdtemp(prefix="gpustack-fleet-demo-"))
    bed = FleetBed(root)
    started = time.monotonic()
    try:
        bed.up()
        print(f"fleet bed up in {time.monotonic() - started:.0f} s: manager, " + ", ".join(MEMBERS))
        scene(bed)
    finally:
        bed.down()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
