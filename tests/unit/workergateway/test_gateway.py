"""The gateway's pass against clusters in memory (docs/fleet.md, "The gateway process"): the
members of the sums' fixtures behind their own fake API servers, the manager's
`MultiKueueCluster`s and `FleetPool`s in another."""

from __future__ import annotations

import copy
import gc
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from chain.apis import KUEUE_API, LOCAL_QUEUE
from chain.fleet_pools import FLEET_POOL, MEMBERS_LOST_SINCE, FleetPoolView
from chain.names import local_queue_name
from kubeapi import KubeError
from workergateway.gateway import (
    ORPHANED_SINCE,
    UNREADABLE,
    Api,
    Gateway,
    MemberUnreachable,
    collector_paused,
    orphaned_spec,
)
from workergateway.members import read_member
from workergateway.reports import (
    MEMBER_UNREADABLE,
    MEMBERS_AGREE,
    MEMBERS_READABLE,
    NAMESPACE_MISSING,
    NAMESPACES_MIRRORED,
    POOL_CONFLICT,
    QUEUES_UNREADABLE,
)
from workergateway.sums import fleet_pools

from .fakes import MemoryCluster, Recorded

FIXTURES = Path(__file__).parent / "fixtures"
START = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)


def _fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


class Fleet:
    """A manager and its members, from a sums fixture."""

    def __init__(self, fixture: str, grace: float = 0.0) -> None:
        self.fixture = _fixture(fixture)
        members = self.fixture["members"]
        self.manager = MemoryCluster(*(member["cluster"] for member in members))
        self.members = {
            member["cluster"]["metadata"]["name"]: MemoryCluster(
                *member["instanceTypes"], *member["clusterQueues"]
            )
            for member in members
        }
        self.unreachable: set[str] = set()
        self.events = Recorded()
        self.now = START
        self.gateway = Gateway(
            self.manager, self.client, self.events, grace=grace, clock=lambda: self.now
        )

    def client(self, member: str) -> Api:
        if member in self.unreachable:
            raise MemberUnreachable(member, f"secrets/gpustack-gateway-{member}: not found")
        return self.members[member]

    def set_active(self, member: str, active: bool) -> None:
        cluster = self.manager.get("", "MultiKueueCluster", member)
        assert cluster is not None
        condition = cluster["status"]["conditions"][0]
        condition["status"] = "True" if active else "False"
        condition["reason"] = "Active" if active else "ClientConnectionFailed"
        self.manager.put(cluster)

    def pools(self) -> dict[str, dict[str, Any]]:
        return {name: obj["spec"] for name, obj in self.manager.of_kind(FLEET_POOL).items()}

    def expected(self, leave_out: set[str] = frozenset()) -> dict[str, object]:
        """The sums of the members not left out, straight from the pure core."""
        read = [
            read_member(m["cluster"], m["instanceTypes"], m["clusterQueues"])
            for m in self.fixture["members"]
            if m["cluster"]["metadata"]["name"] not in leave_out
        ]
        return {name: pool.render() for name, pool in fleet_pools(read).pools.items()}


def test_a_pass_writes_the_fixtures_fleet() -> None:
    fleet = Fleet("three-members")
    report = fleet.gateway.run_pass()
    assert fleet.pools() == fleet.fixture["fleet"]
    assert report.members == ["east", "north", "west"]
    assert sorted(report.applied) == sorted(fleet.fixture["fleet"])
    # What the fleet hooks read back.
    for obj in fleet.manager.of_kind(FLEET_POOL).values():
        FleetPoolView.parse(obj)


def test_a_pass_runs_with_the_cycle_collector_paused_and_restores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fleet = Fleet("three-members")
    during: list[bool] = []
    read = fleet.gateway._read
    monkeypatch.setattr(fleet.gateway, "_read", lambda m: during.append(gc.isenabled()) or read(m))
    assert gc.isenabled()
    fleet.gateway.run_pass()
    assert during == [False, False, False] and gc.isenabled()
    # Back on after a pass that raises; left off where it was off.
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pass_that_changes_nothing_writes_nothing() -> None:
    fleet = Fleet("three-members")
    fleet.gateway.run_pass()
    fleet.manager.calls.clear()
    report = fleet.gateway.run_pass()
    assert report.applied == report.deleted == []
    assert [call for call in fleet.manager.calls if call[0] != "list"] == []


def test_a_member_turning_inactive_leaves_the_sums_on_the_next_pass() -> None:
    fleet = Fleet("three-members")
    fleet.gateway.run_pass()
    fleet.set_active("north", False)
    fleet.members["north"].calls.clear()
    report = fleet.gateway.run_pass()
    assert report.members == ["east", "west"]
    assert fleet.pools() == fleet.expected(leave_out={"north"})
    assert all("north" not in spec["members"] for spec in fleet.pools().values())
    assert fleet.members["north"].calls == []  # an inactive member is not even read
    fleet.set_active("north", True)
    fleet.gateway.run_pass()
    assert fleet.pools() == fleet.fixture["fleet"]


def test_a_pool_no_active_member_has_is_deleted() -> None:
    fleet = Fleet("two-members")
    fleet.gateway.run_pass()
    assert list(fleet.pools()) == ["gpustack--nvidia-tesla-t4-linux-amd64"]
    fleet.set_active("east", False)
    fleet.set_active("west", False)
    report = fleet.gateway.run_pass()
    assert report.deleted == ["gpustack--nvidia-tesla-t4-linux-amd64"]
    assert fleet.pools() == {}


def test_an_orphaned_pool_is_kept_at_zero_for_the_grace_then_deleted() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    name = "gpustack--nvidia-tesla-t4-linux-amd64"
    before = fleet.pools()[name]
    fleet.set_active("east", False)
    fleet.set_active("west", False)
    report = fleet.gateway.run_pass()
    assert report.orphaned == [name] and report.deleted == []
    obj = fleet.manager.of_kind(FLEET_POOL)[name]
    assert obj["metadata"]["annotations"] == {ORPHANED_SINCE: "2026-12-04T15:00:00Z"}
    zeroed = obj["spec"]
    assert zeroed == orphaned_spec(before)
    assert zeroed["members"] == before["members"]  # a MultiKueueConfig may not be empty
    assert {entry["nominalQuota"] for entry in zeroed["quota"]} == {"0"}
    assert zeroed["memberSummary"] == "0/2"
    assert not any(entry["counted"] for entry in zeroed["memberViews"])
    view = FleetPoolView.parse(obj)
    assert view.views.exclusive.capacity == 0 and view.cpu.capacity == 0
    fleet.now = START + timedelta(seconds=899)
    assert fleet.gateway.run_pass().deleted == []
    fleet.now = START + timedelta(seconds=900)
    assert fleet.gateway.run_pass().deleted == [name]
    assert fleet.pools() == {}


def test_a_pool_back_within_the_grace_loses_its_mark() -> None:
    fleet = Fleet("two-members", grace=900)
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    fleet.set_active("west", False)
    fleet.gateway.run_pass()
    fleet.set_active("west", True)
    fleet.gateway.run_pass()
    obj = next(iter(fleet.manager.of_kind(FLEET_POOL).values()))
    assert ORPHANED_SINCE not in (obj["metadata"].get("annotations") or {})
    # east is still lost: listed after west, counting nothing, lost since the pool was orphaned.
    expected: dict[str, Any] = fleet.expected(leave_out={"east"})
    for spec in expected.values():
        spec["members"] = ["west", "east"]
        spec["memberSummary"] = "1/2 west"
    assert fleet.pools() == expected
    assert obj["metadata"]["annotations"] == {
        MEMBERS_LOST_SINCE: '{"east": "2026-12-04T15:00:00Z"}'
    }


def test_a_lost_write_converges_on_the_next_pass() -> None:
    fleet = Fleet("three-members")
    fleet.manager.refusing.add("gpustack--generic-linux-amd64")
    report = fleet.gateway.run_pass()
    assert list(report.failed_writes) == ["gpustack--generic-linux-amd64"]
    assert list(fleet.pools()) == ["gpustack--nvidia-a100-sxm4-80gb-linux-amd64"]
    fleet.gateway.run_pass()
    assert fleet.pools() == fleet.fixture["fleet"]


def test_a_write_undone_behind_the_gateway_is_made_again() -> None:
    fleet = Fleet("three-members")
    fleet.gateway.run_pass()
    name = "gpustack--generic-linux-amd64"
    stale = copy.deepcopy(fleet.manager.of_kind(FLEET_POOL)[name])
    stale["spec"]["members"] = ["east"]
    fleet.manager.put(stale)
    assert fleet.gateway.run_pass().applied == [name]
    assert fleet.pools() == fleet.fixture["fleet"]


def test_a_failed_delete_is_made_again() -> None:
    fleet = Fleet("two-members")
    fleet.gateway.run_pass()
    fleet.set_active("east", False)
    fleet.set_active("west", False)
    fleet.manager.refusing.add("gpustack--nvidia-tesla-t4-linux-amd64")
    assert fleet.gateway.run_pass().deleted == []
    assert fleet.gateway.run_pass().deleted == ["gpustack--nvidia-tesla-t4-linux-amd64"]


@pytest.mark.parametrize("how", ["no-secret", "malformed", "malformed-cluster"])
def test_an_unreadable_member_is_reported_and_the_others_still_sum(how: str) -> None:
    fleet = Fleet("three-members")
    if how == "no-secret":
        fleet.unreachable.add("north")
    elif how == "malformed-cluster":
        cluster = fleet.manager.get("", "MultiKueueCluster", "north")
        assert cluster is not None
        del cluster["status"]["conditions"][0]["status"]
        fleet.manager.put(cluster)
    else:
        member = fleet.members["north"]
        broken = next(iter(member.of_kind("InstanceType").values()))
        del broken["status"]["cpu"]
    report = fleet.gateway.run_pass()
    assert list(report.unreadable) == ["north"]
    assert report.members == ["east", "west"]
    assert fleet.pools() == fleet.expected(leave_out={"north"})
    [(regarding, type_, reason, note)] = fleet.events.events
    assert (regarding, type_, reason) == ("MultiKueueCluster/north", "Warning", UNREADABLE)
    assert note.startswith("member north: ")
    if how == "malformed":
        assert "status.cpu: required" in note


def test_a_conflicting_pool_keeps_its_last_fleet_pool() -> None:
    fleet = Fleet("two-members")
    fleet.gateway.run_pass()
    before = fleet.pools()
    member = fleet.members["west"]
    its = next(iter(member.of_kind("InstanceType").values()))
    its["spec"]["arch"] = "arm64"
    report = fleet.gateway.run_pass()
    assert report.conflicts == ["gpustack--nvidia-tesla-t4-linux-amd64"]
    assert report.deleted == report.applied == []
    assert fleet.pools() == before
    [(regarding, type_, reason, _)] = fleet.events.events
    assert (regarding, type_, reason) == (
        "FleetPool/gpustack--nvidia-tesla-t4-linux-amd64",
        "Warning",
        "PoolConflict",
    )


def test_every_fleet_pool_a_pass_writes_fits_the_crd() -> None:
    """Whole or orphaned (zeroed, annotated), so the API server neither refuses nor prunes it."""
    path = Path(__file__).parents[3] / "manifests" / "fleet" / "crds" / "fleetpools.yaml"
    version = yaml.safe_load(path.read_text())["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    fleet = Fleet("three-members", grace=900)
    fleet.gateway.run_pass()
    written = list(fleet.manager.of_kind(FLEET_POOL).values())
    for member in fleet.members:
        fleet.set_active(member, False)
    assert len(fleet.gateway.run_pass().orphaned) == len(written)
    written += fleet.manager.of_kind(FLEET_POOL).values()
    for obj in written:
        jsonschema.validate(obj, schema)


POOL = "gpustack--generic-linux-amd64"


def _local_queue(namespace: str, pool: str = POOL) -> dict[str, Any]:
    """The LocalQueue an entrance hook makes for `pool` in `namespace`."""
    return {
        "apiVersion": KUEUE_API,
        "kind": LOCAL_QUEUE,
        "metadata": {"name": local_queue_name(pool), "namespace": namespace},
        "spec": {"clusterQueue": pool},
    }


def _conditions(fleet: Fleet, pool: str = POOL) -> dict[str, dict[str, Any]]:
    obj = fleet.manager.of_kind(FLEET_POOL)[pool]
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_a_namespace_a_member_lacks_is_a_condition_and_an_event_on_the_pool() -> None:
    """docs/fleet.md, "Namespaces": the manager has the pool's LocalQueue in team-a and team-b;
    west lacks team-b, so a team-b Workload MultiKueue sends there would wait unexplained."""
    fleet = Fleet("three-members")
    # The fleet namespace (member credentials) gets the manager's entrance queues too, and no
    # member is asked to have it.
    fleet.manager.put(_local_queue("gpustack-fleet"))
    for namespace in ("team-a", "team-b"):
        fleet.manager.put(_local_queue(namespace))
        for member in ("east", "north"):
            fleet.members[member].put(_local_queue(namespace))
    fleet.members["west"].put(_local_queue("team-a"))
    # Another pool's queue in team-b does not stand in for this one's.
    fleet.members["west"].put(_local_queue("team-b", "gpustack--nvidia-a100-sxm4-80gb-linux-amd64"))
    report = fleet.gateway.run_pass()
    assert fleet.pools() == fleet.fixture["fleet"]  # the sums are not held up
    condition = _conditions(fleet)[NAMESPACES_MIRRORED]
    assert (condition["status"], condition["reason"]) == ("False", NAMESPACE_MISSING)
    assert condition["message"].startswith("member west lacks namespace team-b (or the LocalQueue")
    assert report.unmirrored == {POOL: condition["message"]}
    assert ("FleetPool/" + POOL, "Warning", NAMESPACE_MISSING, condition["message"]) in (
        fleet.events.events
    )
    # The other pool has no LocalQueue on the manager: nothing to mirror.
    other = _conditions(fleet, "gpustack--nvidia-a100-sxm4-80gb-linux-amd64")
    assert other[NAMESPACES_MIRRORED]["status"] == "True"
    fleet.members["west"].put(_local_queue("team-b"))
    fleet.now = START + timedelta(minutes=1)
    assert fleet.gateway.run_pass().unmirrored == {}
    condition = _conditions(fleet)[NAMESPACES_MIRRORED]
    assert (condition["status"], condition["reason"]) == ("True", "Mirrored")
    assert condition["lastTransitionTime"] == "2026-12-04T15:01:00Z"


class NoLocalQueues(MemoryCluster):
    """A member whose role predates the namespace report: listing LocalQueues is forbidden."""

    def list(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        if kind == LOCAL_QUEUE:
            raise KubeError(403, "localqueues.kueue.x-k8s.io is forbidden")
        return super().list(api_version, kind)


def test_a_member_whose_local_queues_cannot_be_listed_still_sums_and_is_unknown() -> None:
    fleet = Fleet("three-members")
    fleet.manager.put(_local_queue("team-a"))
    for member in ("east", "north"):
        fleet.members[member].put(_local_queue("team-a"))
    west = NoLocalQueues()
    west.objects = fleet.members["west"].objects
    fleet.members["west"] = west
    report = fleet.gateway.run_pass()
    assert report.unreadable == {}
    assert fleet.pools() == fleet.fixture["fleet"]
    condition = _conditions(fleet)[NAMESPACES_MIRRORED]
    assert (condition["status"], condition["reason"]) == ("Unknown", QUEUES_UNREADABLE)
    assert "member west: its LocalQueues could not be listed" in condition["message"]
    assert not [e for e in fleet.events.events if e[2] == NAMESPACE_MISSING]


def test_an_unreadable_member_is_a_condition_on_every_pool_until_it_is_read() -> None:
    fleet = Fleet("three-members")
    fleet.gateway.run_pass()
    for pool in fleet.pools():
        assert _conditions(fleet, pool)[MEMBERS_READABLE]["status"] == "True"
    fleet.unreachable.add("north")
    fleet.gateway.run_pass()
    for pool in fleet.pools():
        condition = _conditions(fleet, pool)[MEMBERS_READABLE]
        assert (condition["status"], condition["reason"]) == ("False", MEMBER_UNREADABLE)
        assert "member north: secrets/gpustack-gateway-north: not found" in condition["message"]
    fleet.unreachable.clear()
    fleet.gateway.run_pass()
    for pool in fleet.pools():
        assert _conditions(fleet, pool)[MEMBERS_READABLE]["status"] == "True"


class TokenRevoked(MemoryCluster):
    """A member whose API server no longer accepts the gateway's token (its Secret deleted)."""

    def list(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        raise KubeError(401, "Unauthorized")


def test_a_member_that_refuses_the_token_is_named_with_the_secret_to_fix() -> None:
    """The pool's condition gathers every unread member's reason: a refusal names the member
    and the Secret whose credentials it refused (the e2e saw a bare "401: Unauthorized")."""
    fleet = Fleet("three-members")
    fleet.members["west"] = TokenRevoked()
    fleet.unreachable.add("north")
    report = fleet.gateway.run_pass()
    assert sorted(report.unreadable) == ["north", "west"]
    for pool in fleet.pools():
        message = _conditions(fleet, pool)[MEMBERS_READABLE]["message"]
        assert "member north: secrets/gpustack-gateway-north: not found" in message
        assert (
            "member west: 401: Unauthorized (the credentials in secrets/gpustack-gateway-west"
            " were refused" in message
        )
    assert ("MultiKueueCluster/west", "Warning", MEMBER_UNREADABLE) in {
        e[:3] for e in fleet.events.events
    }


def test_a_conflicting_pool_says_so_on_its_status() -> None:
    fleet = Fleet("two-members")
    fleet.gateway.run_pass()
    name = "gpustack--nvidia-tesla-t4-linux-amd64"
    assert _conditions(fleet, name)[MEMBERS_AGREE]["status"] == "True"
    its = next(iter(fleet.members["west"].of_kind("InstanceType").values()))
    its["spec"]["arch"] = "arm64"
    fleet.gateway.run_pass()
    condition = _conditions(fleet, name)[MEMBERS_AGREE]
    assert (condition["status"], condition["reason"]) == ("False", POOL_CONFLICT)
    assert "members disagree on spec.arch" in condition["message"]


def test_a_settled_fleet_writes_no_status_again() -> None:
    fleet = Fleet("three-members")
    fleet.manager.put(_local_queue("team-a"))
    fleet.gateway.run_pass()
    fleet.manager.calls.clear()
    fleet.now = START + timedelta(minutes=5)
    fleet.gateway.run_pass()
    assert [call for call in fleet.manager.calls if call[0] != "list"] == []


def test_every_status_a_pass_writes_fits_the_crd() -> None:
    path = Path(__file__).parents[3] / "manifests" / "fleet" / "crds" / "fleetpools.yaml"
    version = yaml.safe_load(path.read_text())["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    fleet = Fleet("two-members")
    fleet.manager.put(_local_queue("team-a", "gpustack--nvidia-tesla-t4-linux-amd64"))
    fleet.unreachable.add("east")
    fleet.gateway.run_pass()
    for obj in fleet.manager.of_kind(FLEET_POOL).values():
        jsonschema.validate(obj, schema)
        assert len(obj["status"]["conditions"]) == 3
