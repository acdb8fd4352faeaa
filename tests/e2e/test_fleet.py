"""A fleet on real control planes (docs/fleet.md; issue #32): one fleet bed for the module
(`testbed.fleet`: a manager with Kueue's MultiKueue, the shipped `manifests/fleet` and the worker
gateway; member-a with two 4xT4 nodes, member-b with a 4xT4 and a 2xL4 node).

No kubelet runs on these emulated clusters, so no container ever starts: where a test needs a
Pod to finish, it marks the member's Pod Succeeded itself, and says so. Kueue's
`workerLostTimeout` is shortened on the manager (`testbed.fleet.WORKER_LOST_TIMEOUT`) and the
gateway's `--orphan-grace` set at least to it, as docs/fleet.md tells users.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.fleet_pools import FLEET_POOL, FLEET_POOL_API, MEMBERS_LOST_SINCE, fleet_check_name
from chain.names import local_queue_name
from kubeapi import Kube, Obj, wait_for
from kubeapi.events import EVENTS_API
from testbed.components import KUEUE_NAMESPACE
from testbed.fleet import (
    GATEWAY_TOKEN,
    KUEUE_ACCOUNT,
    L4_POOL,
    MEMBERS,
    SYSTEM_NAMESPACE,
    FleetBed,
    cluster_active,
    instance_type_status,
    kueue_token_secret,
    multikueue_secret,
    succeed_pod,
    views,
    wait_sums,
)
from testbed.nodes import T4_POOL
from testbed.workloads import complete_job, condition, queued_job, sliced_job
from workergateway.members import MULTIKUEUE_CLUSTER
from workergateway.plan import plan_fleet

IMAGE = "busybox"
NAMESPACE = "team-fleet"
MEMBER_RBAC = Path(__file__).parents[2] / "manifests" / "fleet" / "member" / "rbac.yaml"


@pytest.fixture(scope="module")
def fleet() -> Iterator[FleetBed]:
    root = Path(tempfile.mkdtemp(prefix="gpustack-fleet-"))
    bed = FleetBed(root)
    started = time.monotonic()
    try:
        bed.up()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    print(
        f"\nfleet bed up in {time.monotonic() - started:.0f} s {bed.timings}; RSS MiB {bed.rss()}"
    )
    try:
        # The platform team mirrors the tenant namespace on every member (docs/fleet.md,
        # "Namespaces").
        for kube in _all(bed):
            kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        for kube in _all(bed):
            wait_for(
                lambda kube=kube: kube.get("v1", "ServiceAccount", "default", NAMESPACE),
                60,
                "the tenant namespace's default ServiceAccount",
            )
        yield bed
    finally:
        print(f"\nfleet bed RSS MiB at the end {bed.rss()}")
        bed.down()


@pytest.fixture(autouse=True)
def _alive(fleet: FleetBed) -> Iterator[None]:
    fleet.check_alive()
    yield
    fleet.check_alive()


def _all(bed: FleetBed) -> list[Kube]:
    return [bed.manager.kube, *(member.kube for member in bed.members.values())]


def _wait_sums(fleet: FleetBed, pool: str, members: tuple[str, ...], summary: str) -> None:
    wait_sums(
        fleet.manager.kube, {name: fleet.members[name].kube for name in members}, pool, summary
    )


def test_fleet_views_are_the_sums_of_the_members_own(fleet: FleetBed) -> None:
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    _wait_sums(fleet, L4_POOL, ("member-b",), "1/1 member-b")
    t4 = instance_type_status(fleet.manager.kube, T4_POOL)
    # The breakdown, one entry per member, each its own views.
    breakdown = {entry["name"]: entry for entry in t4["memberViews"]}
    assert sorted(breakdown) == ["member-a", "member-b"]
    for name in breakdown:
        own = views(instance_type_status(fleet.members[name].kube, T4_POOL))
        assert views(breakdown[name]) == own
        assert breakdown[name]["counted"] is True
    # 12 T4 and 2 L4 cards in all, as the nodes were made.
    assert views(t4)["accelerator"][2] == sum(
        node.cards for nodes in MEMBERS.values() for node in nodes if node.model == "t4"
    )
    assert views(instance_type_status(fleet.manager.kube, L4_POOL))["accelerator"][2] == 2
    # MultiKueue's side of it: one config per pool, listing the members that have it.
    config = fleet.manager.kube.get(KUEUE_API, "MultiKueueConfig", L4_POOL) or {}
    assert config["spec"]["clusters"] == ["member-b"]
    # Planned offline from what each member holds (docs/fleet.md, "Planning a fleet offline"),
    # the fleet is what the gateway wrote: the same pools, spec for spec.
    assert {T4_POOL, L4_POOL} <= set(_written(fleet))
    wait_for(
        lambda: _planned_offline(fleet) == _written(fleet),
        30,
        "the offline plan to be the gateway's FleetPools",
    )


def _planned_offline(fleet: FleetBed) -> dict[str, object]:
    """`workergateway.plan` over each member's InstanceTypes and ClusterQueues, as `kubectl get
    instancetypes,clusterqueues -o json` there gives them, and the manager's
    `MultiKueueCluster`s (`--clusters`)."""
    members = {
        name: [
            *member.kube.list(WORKER_API, INSTANCE_TYPE),
            *member.kube.list(KUEUE_API, CLUSTER_QUEUE),
        ]
        for name, member in fleet.members.items()
    }
    clusters = fleet.manager.kube.list(KUEUE_API, MULTIKUEUE_CLUSTER)
    return {name: pool.render() for name, pool in plan_fleet(members, clusters).pools.items()}


def _written(fleet: FleetBed) -> dict[str, object]:
    """The `FleetPool` specs the gateway wrote on the manager."""
    pools = fleet.manager.kube.list(FLEET_POOL_API, FLEET_POOL)
    return {pool["metadata"]["name"]: pool["spec"] for pool in pools}


def _workload_of(kube: Kube, job: str) -> Obj | None:
    for workload in kube.list(KUEUE_API, "Workload", NAMESPACE):
        owners = workload["metadata"].get("ownerReferences") or []
        if any(owner.get("kind") == "Job" and owner.get("name") == job for owner in owners):
            return workload
    return None


def _dispatched_to(kube: Kube, job: str, pool: str) -> str | None:
    """The member the manager's Workload of `job` was admitted on, once its MultiKueue check
    is Ready."""
    workload = _workload_of(kube, job) or {}
    status = workload.get("status") or {}
    checks = {c["name"]: c for c in status.get("admissionChecks") or []}
    if (checks.get(fleet_check_name(pool)) or {}).get("state") != "Ready":
        return None
    return str(status.get("clusterName") or "") or None


def _job(kube: Kube, pool: str, limits: dict[str, str]) -> str:
    name = f"fleet-{uuid.uuid4().hex[:6]}"
    kube.create(queued_job(name, NAMESPACE, local_queue_name(pool), limits, IMAGE, "true"))
    return name


def _pods_of(kube: Kube, job: str) -> list[Obj]:
    return kube.list("v1", "Pod", NAMESPACE, label_selector=f"job-name={job}")


def test_an_l4_job_runs_on_member_b_and_its_status_comes_back(fleet: FleetBed) -> None:
    manager = fleet.manager.kube
    member_b = fleet.members["member-b"].kube
    wait_for(
        lambda: manager.get(KUEUE_API, "LocalQueue", local_queue_name(L4_POOL), NAMESPACE),
        120,
        "the L4 LocalQueue on the manager",
    )
    job = _job(manager, L4_POOL, {"nvidia.com/gpu": "1"})
    where = wait_for(lambda: _dispatched_to(manager, job, L4_POOL), 180, "the L4 Job dispatched")
    assert where == "member-b"
    assert fleet.members["member-a"].kube.get("batch/v1", "Job", job, NAMESPACE) is None
    pod = wait_for(lambda: next(iter(_pods_of(member_b, job)), None), 120, "member-b's Pod")
    succeed_pod(member_b, pod)  # SIMULATED: the container "ran" and exited 0 (no kubelet here)
    # member-b's Job completes, Kueue there finishes its Workload, and MultiKueue copies the
    # Job's status to the manager's, finishes the manager's Workload, and deletes member-b's
    # copies (so member-b's Job is seen Complete for a moment at most).
    mirrored = wait_for(
        lambda: complete_job(manager, job, NAMESPACE),
        120,
        "the manager's Job Complete (its status mirrored from member-b)",
    )
    assert mirrored["status"].get("succeeded") == 1
    wait_for(
        lambda: condition(_workload_of(manager, job), "Finished") == "True",
        60,
        "the manager's Workload Finished",
    )
    wait_for(
        lambda: member_b.get("batch/v1", "Job", job, NAMESPACE) is None,
        120,
        "member-b's copy of the Job deleted once finished",
    )


def test_a_stopped_member_leaves_the_sums_and_comes_back(fleet: FleetBed) -> None:
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    manager = fleet.manager.kube
    fleet.stop_member("member-a")
    try:
        wait_for(lambda: cluster_active(manager, "member-a") == "False", 180, "member-a lost")
        # Out of every sum at once; still listed (docs/fleet.md, "A member turning inactive").
        _wait_sums(fleet, T4_POOL, ("member-b",), "1/2 member-b")
    finally:
        fleet.start_member("member-a")
    wait_for(lambda: cluster_active(manager, "member-a") == "True", 180, "member-a back")
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")


def _readable(kube: Kube, pool: str, status: str) -> Obj | None:
    """The `FleetPool`'s `MembersReadable` condition, once its status is `status`."""
    found = kube.get(FLEET_POOL_API, FLEET_POOL, pool) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") == "MembersReadable" and c["status"] == status),
        None,
    )


def _unreadable_events(kube: Kube, member: str) -> list[Obj]:
    """The gateway's Warning Events on `member`'s `MultiKueueCluster` (cluster-scoped, so its
    Events are in `default`)."""
    return [
        event
        for event in kube.list(EVENTS_API, "Event", "default")
        if event.get("reason") == "MemberUnreadable"
        and (event.get("regarding") or {}).get("name") == member
    ]


def test_a_member_whose_gateway_token_is_revoked_leaves_the_sums_and_comes_back(
    fleet: FleetBed,
) -> None:
    """member-a's admin revokes the gateway's token (deletes its Secret, which the API server's
    token check looks up on every request): the gateway can no longer vouch for member-a's
    views, so member-a leaves every sum within a pass and the fleet says why, while Kueue, whose
    own credentials still work, keeps it Active. A new token (the shipped Secret applied again,
    its token put in the manager's Secret as docs/fleet.md, "Rotating the gateway's token",
    says) brings it back."""
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    manager = fleet.manager.kube
    member_a = fleet.members["member-a"].kube
    member_a.delete("v1", "Secret", GATEWAY_TOKEN, SYSTEM_NAMESPACE)
    revoked_at = time.monotonic()
    try:
        _wait_sums(fleet, T4_POOL, ("member-b",), "1/2 member-b")
        print(f"\nmember-a out of the sums {time.monotonic() - revoked_at:.0f} s after revoking")
        said = wait_for(
            lambda: _readable(manager, T4_POOL, "False"), 60, "MembersReadable False on T4"
        )
        assert said["reason"] == "MemberUnreadable"
        assert "member member-a: 401" in said["message"], said
        assert "secrets/gpustack-gateway-member-a" in said["message"], said
        wait_for(lambda: _unreadable_events(manager, "member-a"), 60, "a MemberUnreadable Event")
        assert cluster_active(manager, "member-a") == "True"  # Kueue's credentials are not these
    finally:
        (secret,) = [
            doc
            for doc in yaml.safe_load_all(MEMBER_RBAC.read_text())
            if doc and doc["kind"] == "Secret"
        ]
        member_a.apply(secret)
        fleet.join("member-a")  # the new token into gpustack-gateway-member-a on the manager
    rotated_at = time.monotonic()
    # The gateway watches the members' Secrets: the new one wakes a pass (no resync waited for).
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    print(f"member-a back in the sums {time.monotonic() - rotated_at:.1f} s after its new token")
    wait_for(lambda: _readable(manager, T4_POOL, "True"), 60, "MembersReadable True again")


def _copies(
    fleet: FleetBed, workload: str, members: tuple[str, ...] = tuple(MEMBERS)
) -> dict[str, int]:
    """Per member, its copies of the manager's Workload `workload` (MultiKueue gives each copy
    the manager's name)."""
    return {
        name: int(
            fleet.members[name].kube.get(KUEUE_API, "Workload", workload, NAMESPACE) is not None
        )
        for name in members
    }


def _dispatched_t4_job(fleet: FleetBed) -> tuple[str, str, str, str]:
    """A one-card T4 Job on the manager, once its Workload has one copy, on the member that
    admitted it: the Job's name, the Workload's, that member and the other."""
    manager = fleet.manager.kube
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    job = _job(manager, T4_POOL, {"nvidia.com/gpu": "1"})
    first = wait_for(lambda: _dispatched_to(manager, job, T4_POOL), 180, "the T4 Job dispatched")
    other = next(name for name in MEMBERS if name != first)
    local = (_workload_of(manager, job) or {})["metadata"]["name"]
    wait_for(lambda: _copies(fleet, local) == {first: 1, other: 0}, 60, f"one copy, on {first}")
    return job, local, first, other


def _redispatched(
    fleet: FleetBed, job: str, local: str, other: str, said: str, since: float
) -> None:
    """Kueue dispatches `job`'s Workload `local` again, to `other`, one copy there; `said` is
    printed with the seconds since `since` in its `{}`."""
    wait_for(
        lambda: _dispatched_to(fleet.manager.kube, job, T4_POOL) == other,
        fleet.worker_lost_timeout + 180,
        f"the Workload dispatched again, to {other}",
    )
    print(said.format(f"{time.monotonic() - since:.0f}"))
    assert _copies(fleet, local, (other,)) == {other: 1}


def _one_copy_left(fleet: FleetBed, local: str) -> None:
    """The member that held Workload `local` is back: Kueue sees both copies and keeps one, and
    a second look 5 s later finds one still."""
    wait_for(lambda: sum(_copies(fleet, local).values()) == 1, 120, "one copy in the fleet")
    time.sleep(5)
    assert sum(_copies(fleet, local).values()) == 1, _copies(fleet, local)


def test_a_lost_member_stays_listed_and_its_workload_runs_once(fleet: FleetBed) -> None:
    """The member holding a Workload is lost: it stays in the pool's MultiKueueConfig (the
    gateway's note on it), Kueue dispatches the Workload again after `workerLostTimeout`, to
    the other member, once; and when the lost member comes back within the grace, Kueue still
    follows it, so one copy of the Workload is left in the fleet, not two."""
    manager = fleet.manager.kube
    job, local, first, other = _dispatched_t4_job(fleet)
    fleet.stop_member(first)
    try:
        wait_for(lambda: cluster_active(manager, first) == "False", 180, f"{first} lost")
        lost_at = time.monotonic()
        # Listed still, with the gateway's note, while Kueue waits for the lost worker.
        config = wait_for(
            lambda: _noted_config(manager), 120, "the lost member's note on the MultiKueueConfig"
        )
        assert config["spec"]["clusters"] == [other, first]
        assert first in config["metadata"]["annotations"][MEMBERS_LOST_SINCE]
        _redispatched(
            fleet,
            job,
            local,
            other,
            f"\nre-dispatched to {other} {{}} s after {first} lost",
            lost_at,
        )
        config = manager.get(KUEUE_API, "MultiKueueConfig", T4_POOL) or {}
        assert config["spec"]["clusters"] == [other, first]  # the grace has not passed
    finally:
        fleet.start_member(first)
    wait_for(lambda: cluster_active(manager, first) == "True", 180, f"{first} back")
    # Back within the grace, still listed: Kueue sees both copies and keeps one.
    _one_copy_left(fleet, local)
    config = manager.get(KUEUE_API, "MultiKueueConfig", T4_POOL) or {}
    assert MEMBERS_LOST_SINCE not in (config["metadata"].get("annotations") or {})


def _noted_config(kube: Kube) -> Obj | None:
    found = kube.get(KUEUE_API, "MultiKueueConfig", T4_POOL) or {}
    annotations = (found.get("metadata") or {}).get("annotations") or {}
    return found if MEMBERS_LOST_SINCE in annotations else None


def test_gate_one_folds_a_sliced_job_on_the_manager(fleet: FleetBed) -> None:
    manager = fleet.manager.kube
    name = f"sliced-{uuid.uuid4().hex[:6]}"
    created = manager.create(
        sliced_job(name, NAMESPACE, local_queue_name(T4_POOL), IMAGE, 20, "true")
    )
    limits = created["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "320k"  # 20 % of 1,600,000
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"  # defaulted
    workload = wait_for(lambda: _workload_of(manager, name), 60, "the manager's Workload")
    template = workload["spec"]["podSets"][0]["template"]["spec"]
    assert template["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"] == "320k"
    # Pinned by the manager's Workload webhook to nodes whose fit labels show room for the
    # slice: the manager has no nodes, but MultiKueue copies the pin to the members, whose
    # agents write the same labels (the bed writes them as the agent would).
    terms = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expression,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expression == {
        "key": "sliced-max-free-units.fit.gpustack.ai/nvidia-tesla-t4",
        "operator": "Gt",
        "values": ["319999"],
    }
    where = wait_for(lambda: _dispatched_to(manager, name, T4_POOL), 180, "the sliced Job")
    assert where in MEMBERS


def test_a_member_whose_kueue_token_is_revoked_is_lost_once_its_secret_goes(
    fleet: FleetBed,
) -> None:
    """The member running a Workload revokes MultiKueue's token (deletes the token Secret of
    Kueue's account there). Kueue's watches on it stay open, so Kueue keeps it Active; the test
    prints what it sees meanwhile. The manager's admin then does what docs/fleet.md ("Kueue's
    credentials revoked") says: deletes MultiKueue's Secret for that member. Kueue marks it
    inactive at once, it leaves every sum, the Workload is dispatched again to the other member
    after `workerLostTimeout`, and a Job submitted meanwhile runs there too. A new token brings
    the member back, and each Workload has one copy in the fleet."""
    manager = fleet.manager.kube
    job, local, first, other = _dispatched_t4_job(fleet)
    revoked = fleet.members[first].kube
    revoked.delete("v1", "Secret", KUEUE_ACCOUNT, KUEUE_NAMESPACE)
    revoked_at = time.monotonic()
    try:
        wait_for(
            lambda: revoked.get("v1", "Secret", KUEUE_ACCOUNT, KUEUE_NAMESPACE) is None,
            30,
            f"{first}'s MultiKueue token Secret gone",
        )
        # The API server caches a token's review for 10 s; past that the member refuses it.
        time.sleep(11)
        later = _job(manager, T4_POOL, {"nvidia.com/gpu": "1"})
        time.sleep(5)
        # Upstream's behaviour, recorded, not asserted: Kueue learns of a refused token only
        # when it connects again, and meanwhile reads every Workload of the member's pools
        # there first, so none is dispatched (docs/fleet.md, "Kueue's credentials revoked").
        print(
            f"\n{time.monotonic() - revoked_at:.0f} s after revoking on {first}: Kueue's Active "
            f"{cluster_active(manager, first)}, a Job submitted since dispatched to "
            f"{_dispatched_to(manager, later, T4_POOL)}"
        )
        manager.delete("v1", "Secret", multikueue_secret(first), KUEUE_NAMESPACE)
        removed_at = time.monotonic()
        wait_for(lambda: cluster_active(manager, first) == "False", 60, f"{first} inactive")
        print(f"{first} inactive {time.monotonic() - removed_at:.1f} s after its Secret went")
        _wait_sums(fleet, T4_POOL, (other,), f"1/2 {other}")
        wait_for(
            lambda: _dispatched_to(manager, later, T4_POOL) == other,
            fleet.worker_lost_timeout + 120,
            f"the Job submitted meanwhile dispatched to {other}",
        )
        _redispatched(
            fleet,
            job,
            local,
            other,
            f"re-dispatched to {other} {{}} s after the Secret",
            removed_at,
        )
    finally:
        revoked.apply(kueue_token_secret())
        fleet.join(first)  # new tokens into the manager's Secrets
    wait_for(lambda: cluster_active(manager, first) == "True", 120, f"{first} back")
    _wait_sums(fleet, T4_POOL, ("member-a", "member-b"), "2/2 member-a,member-b")
    # Back within the gateway's grace: Kueue sees both copies of the first Workload and keeps one.
    _one_copy_left(fleet, local)
