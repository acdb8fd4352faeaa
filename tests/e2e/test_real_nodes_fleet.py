"""A fleet of three clusters, one member running containers (docs/fleet.md; issue #32): the
real-node cluster (`real_chain`, the whole install as a user installs it) and an emulated
member with one node of two L4 cards join a fleet manager, so a Job a tenant submits to the
manager is dispatched by MultiKueue onto a real node, its container runs there with its slice,
and its status comes back to the manager; and an L4 Job goes to the one member with L4.

The manager is an emulated control plane of its own (`testbed.fleet.manager_bed`: etcd, the API
server, the controller manager, Kueue with MultiKueue, Metacontroller and the chain with the
shipped `manifests/fleet`, the worker gateway from its shipped command line); it has no nodes,
as a fleet's manager need not. The emulated member (`testbed.fleet.member_bed`) is the fleet
bed's kind: no kubelet runs there, so its L4 Job's Pod is marked Succeeded by the test, which
says so. The real member gets what docs/fleet.md tells users to apply on a member
(`manifests/fleet/member`, MultiKueue's account), removed again at the end with the tenant
namespace, so the modules after this one find the install as it was. Only the cards are
simulated (the real nodes' simulated T4s, the emulated member's L4s).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from chain.apis import KUEUE_API, WORKER_API
from chain.fleet_pools import fleet_check_name
from chain.names import local_queue_name
from kubeapi import Kube, Obj, wait_for
from testbed import images
from testbed.cluster import offers_every_card
from testbed.fleet import (
    L4_POOL,
    MEMBER_COMPONENT,
    FleetNode,
    bed_rss,
    instance_type_status,
    manager_bed,
    manager_up,
    member_bed,
    member_up,
    remove_kueue_account,
    succeed_pod,
    views,
    wait_sums,
)
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.nodes import T4_POOL
from testbed.pytest_plugin import REAL_NODES
from testbed.workloads import complete_job, condition, queued_job, sliced_job

MEMBER = "real"
EMULATED = "emulated"
EMULATED_NODES = (FleetNode("e-l4-0", "l4", 4),)
"""The emulated member's one node: four L4 cards, where the real member's node-b has two, so a
request for four goes to it alone."""
NAMESPACE = "team-fleet-real"
MEMBER_FRAMEWORKS = ("batch/job",)
"""The job frameworks whose CRDs the real-node cluster serves (it installs no JobSet)."""
DISPATCH_WAIT = 480
"""Seconds the manager's Workload may wait for the member's copy to be admitted. Usually a few;
in two full `make test` runs, the member's Kueue reserved quota for the copy only 180 s after
the manager had (docs/fleet.md, "A member with a real node"), so the bound leaves room for two
such delays."""
SLOW = 60
"""Seconds after which a dispatch is slow: the test warns with what it waits for, and waits on."""
MEMBER_RBAC = MEMBER_COMPONENT / "rbac.yaml"
"""The member component's one resource file: the gateway's read-only account on the member."""


@pytest.fixture(scope="module")
def emulated() -> Iterator[Testbed]:
    """The second member, emulated, with the member component, its L4 node registered."""
    root = Path(tempfile.mkdtemp(prefix="gpustack-fleet-member-"))
    bed = member_bed(root / EMULATED)
    try:
        started = time.monotonic()
        member_up(bed, EMULATED_NODES)
        print(f"\n{EMULATED} member up in {time.monotonic() - started:.0f} s")
        yield bed
    finally:
        print(f"\n{EMULATED} member RSS at the end: {bed_rss(bed)} MiB")
        bed.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def manager(real_chain: Testbed, emulated: Testbed) -> Iterator[Testbed]:
    root = Path(tempfile.mkdtemp(prefix="gpustack-fleet-manager-"))
    # The member runs no JobSet: the manager's Kueue integrates only what every member serves
    # (docs/fleet.md, "What MultiKueue gives, and what it asks").
    bed = manager_bed(root / "manager", frameworks=MEMBER_FRAMEWORKS)
    timings: dict[str, float] = {}
    started = time.monotonic()
    kubectl(real_chain, "apply", "-f", str(MEMBER_RBAC))
    try:
        manager_up(bed, {MEMBER: real_chain, EMULATED: emulated}, timings=timings)
        print(
            f"\nfleet manager up, {MEMBER} and {EMULATED} joined, in "
            f"{time.monotonic() - started:.0f} s {timings}"
        )
        # The platform team mirrors the tenant namespace on the members (docs/fleet.md,
        # "Namespaces").
        for kube in (bed.kube, real_chain.kube, emulated.kube):
            kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        wait_for(
            lambda: emulated.kube.get("v1", "ServiceAccount", "default", NAMESPACE),
            60,
            f"the tenant namespace's default ServiceAccount on {EMULATED}",
        )
        yield bed
    finally:
        print(f"\nfleet manager RSS at the end: {bed_rss(bed)} MiB")
        bed.down()
        shutil.rmtree(root, ignore_errors=True)
        real_chain.kube.delete("v1", "Namespace", NAMESPACE)
        kubectl(real_chain, "delete", "--ignore-not-found", "-f", str(MEMBER_RBAC))
        remove_kueue_account(real_chain.kube)
        # Gone before the next module starts: its LocalQueues vanishing later would read as
        # losses to a test that watches them.
        wait_for(
            lambda: real_chain.kube.get("v1", "Namespace", NAMESPACE) is None,
            120,
            f"{NAMESPACE} deleted",
        )


def _workload_of(kube: Kube, job: str) -> Obj | None:
    for workload in kube.list(KUEUE_API, "Workload", NAMESPACE):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(owner.get("kind") == "Job" and owner.get("name") == job for owner in owners):
            return workload
    return None


def _dispatched_to(kube: Kube, job: str, pool: str = T4_POOL) -> str | None:
    workload = _workload_of(kube, job) or {}
    status = workload.get("status") or {}
    checks = {c["name"]: c for c in status.get("admissionChecks") or []}
    if (checks.get(fleet_check_name(pool)) or {}).get("state") != "Ready":
        return None
    return str(status.get("clusterName") or "") or None


def _why_not(manager: Testbed, member: Testbed, job: str) -> str:
    """What a Job not yet dispatched waits for, from both sides: the manager's Workload and its
    MultiKueueCluster, the member's copies (when each was made tells a late copy, the manager's
    side, from one that waited in the member's queue), what else holds quota on the member, its
    pool queue, whether its Kueue restarted, node-a's fit labels, and the manager's Kueue log
    lines about MultiKueue."""
    there = (_workload_of(manager.kube, job) or {}).get("status")
    cluster = (manager.kube.get(KUEUE_API, "MultiKueueCluster", MEMBER) or {}).get("status")
    copies = [
        (w["metadata"]["name"], w["metadata"].get("creationTimestamp"), w.get("status"))
        for w in member.kube.list(KUEUE_API, "Workload", NAMESPACE)
    ]
    holding = [
        f"{w['metadata']['namespace']}/{w['metadata']['name']}"
        for w in member.kube.list(KUEUE_API, "Workload")
        if condition(w, "QuotaReserved") == "True" and condition(w, "Finished") != "True"
    ]
    queue = (member.kube.get(KUEUE_API, "ClusterQueue", T4_POOL) or {}).get("status") or {}
    queue_status = {k: v for k, v in queue.items() if k != "flavorsUsage"}
    restarts = {
        p["metadata"]["name"]: [
            c.get("restartCount") for c in p["status"].get("containerStatuses") or []
        ]
        for p in member.kube.list("v1", "Pod", "kueue-system")
    }
    labels = ((member.kube.get("v1", "Node", "node-a") or {}).get("metadata") or {}).get("labels")
    fit = {k: v for k, v in (labels or {}).items() if "fit.gpustack.ai" in k}
    log = [
        line
        for line in manager.log_tail("kueue", 2000).splitlines()
        if "multikueue" in line.lower() or "error" in line.lower() or "watch" in line.lower()
    ][-25:]
    return (
        f"manager's Workload status {there}; its MultiKueueCluster {cluster}; member's copies "
        f"{copies}; member's Workloads holding quota {holding}; member's {T4_POOL} queue "
        f"{queue_status}; member's Kueue restarts {restarts}; node-a's fit {fit}; manager's "
        "Kueue log on MultiKueue:\n" + "\n".join(log)
    )


def _fleet_cards(kube: Kube, pool: str = T4_POOL, member: str = MEMBER) -> str | None:
    """The manager's InstanceType of `pool`: its card count, once `member` is its one member
    and counts."""
    found = kube.get(WORKER_API, "InstanceType", pool) or {}
    status = found.get("status") or {}
    if status.get("memberSummary") != f"1/1 {member}":
        return None
    return str((status.get("accelerator") or {}).get("capacity") or "") or None


def _env(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def test_a_sliced_job_on_the_manager_runs_on_the_members_real_node(
    manager: Testbed, real_chain: Testbed
) -> None:
    """A tenant's batch/v1 Job asking half a card's memory, submitted to the manager: folded and
    pinned there, admitted by the manager's fleet queue, dispatched to the member, admitted by
    the member's queue and per-card check, run on node-a with its slice's environment, and
    Complete on the manager once it ends there."""
    # The fleet counts the member's four T4 cards (node-a's).
    assert wait_for(lambda: _fleet_cards(manager.kube), 180, "the fleet's T4 pool") == "4"
    queue = local_queue_name(T4_POOL)
    for kube in (manager.kube, real_chain.kube):
        wait_for(
            lambda kube=kube: kube.get(KUEUE_API, "LocalQueue", queue, NAMESPACE),
            90,
            "the pool's LocalQueue in the tenant namespace",
        )
    name = f"sliced-{uuid.uuid4().hex[:6]}"
    # /proc/self/maps of grep itself: the dynamic loader preloaded the isolation library. The
    # sleep keeps the Pod (and its log) there to be read: once the Job is done, MultiKueue
    # deletes the member's copy and its Pod with it.
    command = "env; echo LIBVGPU=$(grep -c /usr/local/vgpu/libvgpu.so /proc/self/maps); sleep 15"
    created = manager.kube.create(
        sliced_job(name, NAMESPACE, queue, images.PROJECT_IMAGE, 50, command)
    )
    limits = created["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "800k"  # folded on the manager: 50 %
    submitted = time.monotonic()
    try:
        where = wait_for(lambda: _dispatched_to(manager.kube, name), SLOW, "the Job dispatched")
    except TimeoutError:
        # A snapshot while it still waits (the state at the end may already be the cure), as a
        # warning: a passing run's summary shows it, where a print would be captured.
        snapshot = _why_not(manager, real_chain, name)
        warnings.warn(f"not dispatched after {SLOW} s: {snapshot}", stacklevel=1)
        try:
            where = wait_for(
                lambda: _dispatched_to(manager.kube, name),
                DISPATCH_WAIT - SLOW,
                "the Job dispatched",
            )
        except TimeoutError as err:
            raise TimeoutError(f"{err}; {_why_not(manager, real_chain, name)}") from err
    assert where == MEMBER
    # Shown with `pytest -s` (a passing run captures it); a slow one is in the warning above.
    print(f"\ndispatched to {where} {time.monotonic() - submitted:.1f} s after the Job's creation")

    def running_pod() -> Obj | None:
        pods = real_chain.kube.list("v1", "Pod", NAMESPACE, label_selector=f"job-name={name}")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return running[0] if running else None

    pod = wait_for(running_pod, 180, "the member's Pod to run on a real node")
    assert pod["spec"]["nodeName"] == "node-a"

    def logged() -> dict[str, str] | None:
        env = _env(kubectl(real_chain, "logs", "-n", NAMESPACE, pod["metadata"]["name"]))
        return env if "LIBVGPU" in env else None

    env = wait_for(logged, 30, "the sliced container's environment")
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{16384 // 2}m"  # half a T4's 16,384 MiB
    assert env["CUDA_DEVICE_SM_LIMIT"] == "100"
    assert int(env["LIBVGPU"]) > 0
    assert env["GPUSTACK_ISOLATION_STANDIN"] == "loaded"  # the testbed's stand-in: enforces nothing
    # MultiKueue copies the member's Job status to the manager's Job.
    mirrored = wait_for(
        lambda: complete_job(manager.kube, name, NAMESPACE),
        120,
        "the manager's Job Complete (its status mirrored from the member)",
    )
    assert mirrored["status"].get("succeeded") == 1
    (node_a,) = [spec for spec in REAL_NODES if spec.name == "node-a"]
    wait_for(lambda: offers_every_card(real_chain, node_a), 120, "node-a's four cards free")


def _clusters(kube: Kube, pool: str) -> list[str] | None:
    """The members `pool`'s MultiKueueConfig on the manager lists."""
    found = kube.get(KUEUE_API, "MultiKueueConfig", pool) or {}
    return (found.get("spec") or {}).get("clusters")


def test_the_l4_pool_sums_both_members_and_a_job_only_one_can_host_goes_there(
    manager: Testbed, real_chain: Testbed, emulated: Testbed
) -> None:
    """Three clusters, one with real nodes: the fleet's L4 pool is the sum of both members' own
    L4 InstanceTypes (node-b's two cards on `real`, four on `emulated`, read from each member),
    its MultiKueueConfig lists both, and T4's lists `real` alone. A Job asking four L4 cards,
    which only `emulated` can host, is dispatched there and not to `real`, and is Complete on
    the manager once its Pod ends (marked Succeeded by the test: no kubelet on `emulated`)."""
    members = {EMULATED: emulated.kube, MEMBER: real_chain.kube}
    wait_sums(manager.kube, members, L4_POOL, f"2/2 {EMULATED},{MEMBER}")
    whole = views(instance_type_status(manager.kube, L4_POOL))["accelerator"]
    assert (whole[0], whole[2]) == (4, 6)  # the largest request is emulated's node; 2 + 4 cards
    assert sorted(_clusters(manager.kube, L4_POOL) or []) == [EMULATED, MEMBER]
    assert _clusters(manager.kube, T4_POOL) == [MEMBER]
    queue = local_queue_name(L4_POOL)
    wait_for(
        lambda: manager.kube.get(KUEUE_API, "LocalQueue", queue, NAMESPACE),
        90,
        "the L4 pool's LocalQueue on the manager",
    )
    name = f"l4-{uuid.uuid4().hex[:6]}"
    manager.kube.create(
        queued_job(name, NAMESPACE, queue, {"nvidia.com/gpu": "4"}, images.PROJECT_IMAGE, "true")
    )
    where = wait_for(
        lambda: _dispatched_to(manager.kube, name, L4_POOL), DISPATCH_WAIT, "the L4 Job dispatched"
    )
    assert where == EMULATED
    assert real_chain.kube.get("batch/v1", "Job", name, NAMESPACE) is None
    pod = wait_for(
        lambda: next(
            iter(emulated.kube.list("v1", "Pod", NAMESPACE, label_selector=f"job-name={name}")),
            None,
        ),
        120,
        f"{EMULATED}'s Pod",
    )
    succeed_pod(emulated.kube, pod)  # SIMULATED: no kubelet on the emulated member
    mirrored = wait_for(
        lambda: complete_job(manager.kube, name, NAMESPACE),
        120,
        f"the manager's Job Complete (its status mirrored from {EMULATED})",
    )
    assert mirrored["status"].get("succeeded") == 1
