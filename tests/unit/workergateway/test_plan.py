"""The fleet planned offline (docs/fleet.md, "Planning a fleet offline"): `python -m
workergateway.plan` over the members' files, then `python -m hooks plan` over the manager's
snapshot with the FleetPools it printed.

The sums fixtures (`fixtures/*.json`, `test_sums.py`) are the oracle: a plan over their members'
objects must give the fleet each fixture writes out by hand, as a pass does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chain.fleet_pools import FLEET_POOL, MULTIKUEUE_CONFIG, fleet_check_name
from chain.names import local_queue_name
from chain.settings import StartupEnv
from hooks.plan import plan
from hooks.request import BadRequest
from workergateway.members import MemberError, read_cluster
from workergateway.plan import member_objects, plan_fleet, table
from workergateway.sums import Fleet

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.json"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
NOW = "2026-12-07T00:00:00Z"


def _fixture(case: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads((FIXTURES / f"{case}.json").read_text())
    return fixture


def _members(fixture: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each member's objects as a file of it holds them: its InstanceTypes and queues."""
    return {
        member["cluster"]["metadata"]["name"]: [
            *member["instanceTypes"],
            *member["clusterQueues"],
        ]
        for member in fixture["members"]
    }


def _assert_fleet(fleet: Fleet, fixture: dict[str, Any]) -> None:
    """The fleet the fixture writes out by hand, conflicts included."""
    assert {name: pool.render() for name, pool in fleet.pools.items()} == fixture["fleet"]
    conflicts = [
        {"pool": c.pool, "field": c.field, "members": list(c.members)} for c in fleet.conflicts
    ]
    assert conflicts == fixture.get("conflicts", [])


def _all_active(case: str) -> bool:
    fixture = _fixture(case)
    return "error" not in fixture and all(
        read_cluster(member["cluster"]).active for member in fixture["members"]
    )


ACTIVE_CASES = [path.stem for path in sorted(FIXTURES.glob("*.json")) if _all_active(path.stem)]


CASES = [path.stem for path in sorted(FIXTURES.glob("*.json"))]


def _clusters(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """The manager's `MultiKueueCluster`s, as `kubectl get multikueueclusters` lists them."""
    return [member["cluster"] for member in fixture["members"]]


@pytest.mark.parametrize("case", CASES)
def test_with_the_managers_clusters_a_plan_is_a_pass(case: str) -> None:
    """Every fixture, inactive members and broken objects included: the same fleet, or the
    same member and field named."""
    fixture = _fixture(case)
    if "error" in fixture:
        with pytest.raises(MemberError) as raised:
            plan_fleet(_members(fixture), _clusters(fixture))
        expected = fixture["error"]
        assert (raised.value.member, raised.value.field) == (expected["member"], expected["field"])
        return
    fleet = plan_fleet(_members(fixture), _clusters(fixture))
    _assert_fleet(fleet, fixture)


def test_a_member_without_its_cluster_is_named() -> None:
    fixture = _fixture("two-members")
    members = _members(fixture)
    with pytest.raises(ValueError, match=r"^member \S+: no MultiKueueCluster of that name$"):
        plan_fleet(members, _clusters(fixture)[:1])


def test_there_are_cases() -> None:
    assert {"two-members", "three-members", "members-disagree-on-identity"} <= set(ACTIVE_CASES)


@pytest.mark.parametrize("case", ACTIVE_CASES)
def test_a_plan_sums_as_a_pass_does(case: str) -> None:
    fixture = _fixture(case)
    fleet = plan_fleet(_members(fixture))
    _assert_fleet(fleet, fixture)


def test_leaving_out_the_members_kueue_does_not_reach_gives_the_passs_fleet() -> None:
    """Without the manager's clusters every member named counts: a plan of the Active members
    only is what a pass makes of them all (here the inactive one's view is even broken: a pass
    does not read it, and neither does a plan without it)."""
    fixture = _fixture("member-inactive")
    active = {
        member["cluster"]["metadata"]["name"]
        for member in fixture["members"]
        if read_cluster(member["cluster"]).active
    }
    members = {name: objs for name, objs in _members(fixture).items() if name in active}
    assert 0 < len(members) < len(fixture["members"])
    _assert_fleet(plan_fleet(members), fixture)
    with pytest.raises(MemberError):
        plan_fleet(_members(fixture))


def test_other_objects_and_other_queues_are_passed_over() -> None:
    fixture = _fixture("two-members")
    members = _members(fixture)
    tenant = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {"resourceGroups": "not a list"},
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}
    with_others = {name: [*objects, tenant, node] for name, objects in members.items()}
    assert plan_fleet(with_others) == plan_fleet(members)


def test_a_broken_object_names_the_member_and_the_field() -> None:
    fixture = _fixture("two-members")
    members = _members(fixture)
    east = sorted(members)[0]
    broken = json.loads(json.dumps(members[east]))
    broken[0]["status"]["phase"] = "Sideways"
    with pytest.raises(MemberError) as raised:
        plan_fleet({**members, east: broken})
    assert (raised.value.member, raised.value.field) == (east, f"instancetypes/{T4}.status.phase")


def test_a_file_is_a_list_or_a_hooks_plan() -> None:
    assert member_objects({"kind": "List", "items": [{"kind": "Node"}]}, "f") == [{"kind": "Node"}]
    assert member_objects({"objects": [], "admission": []}, "f") == []
    for bad in ({"kind": "Node"}, [], {"items": ["x"]}):
        with pytest.raises(ValueError, match=r"^f: "):
            member_objects(bad, "f")


# --- the two commands, as a platform team runs them ------------------------------------------


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)


def _write_members(tmp_path: Path, fixture: dict[str, Any]) -> list[str]:
    flags = []
    for name, objects in _members(fixture).items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        flags += ["--member", f"{name}={path}"]
    return flags


def test_the_fleet_plan_feeds_the_managers_plan(tmp_path: Path) -> None:
    fixture = _fixture("two-members")
    planned = _run("workergateway.plan", *_write_members(tmp_path, fixture), "-o", "json")
    assert planned.returncode == 0, planned.stderr
    pools = json.loads(planned.stdout)
    assert pools["kind"] == "List"
    assert [(p["kind"], p["metadata"]["name"]) for p in pools["items"]] == [(FLEET_POOL, T4)]
    assert pools["items"][0]["spec"]["members"] == fixture["fleet"][T4]["members"]

    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(planned.stdout)
    manager = tmp_path / "manager.json"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    manager.write_text(json.dumps({"kind": "List", "items": [namespace]}))
    answer = _run(
        "hooks", "plan", "--cluster", str(manager), "--cluster", str(fleet_file), "-o", "json"
    )
    assert answer.returncode == 0, answer.stderr
    objects = json.loads(answer.stdout)["objects"]
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    config = by_kind[(MULTIKUEUE_CONFIG, T4)]
    assert config["spec"]["clusters"] == fixture["fleet"][T4]["members"]
    assert ("AdmissionCheck", fleet_check_name(T4)) in by_kind
    status = by_kind[("InstanceType", T4)]["status"]
    assert status["acceleratorSummary"] == fixture["fleet"][T4]["acceleratorSummary"]
    assert status["phase"] == "Pending" and "Kueue" in status["phaseMessage"]
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in local] == [
        ("team-a", local_queue_name(T4))
    ]

    shown = _run("hooks", "plan", "--cluster", str(manager), "--cluster", str(fleet_file))
    assert shown.returncode == 0, shown.stderr
    assert "MultiKueueConfigs" in shown.stdout
    assert f"{T4}  {','.join(config['spec']['clusters'])}" in shown.stdout

    clusters = tmp_path / "clusters.json"
    clusters.write_text(json.dumps({"kind": "List", "items": _clusters(fixture)}))
    with_clusters = _run(
        "workergateway.plan", *_write_members(tmp_path, fixture), "--clusters", str(clusters)
    )
    assert with_clusters.returncode == 0, with_clusters.stderr
    assert fixture["fleet"][T4]["memberSummary"] in with_clusters.stdout

    table = _run("workergateway.plan", *_write_members(tmp_path, fixture))
    assert table.returncode == 0 and T4 in table.stdout
    assert fixture["fleet"][T4]["memberSummary"] in table.stdout


def test_the_managers_queue_keeps_kueues_word() -> None:
    """A snapshot of the manager with its queue: the fleet type's phase is Kueue's, as on a
    member (the fleet status decorator)."""
    fleet = plan_fleet(_members(_fixture("two-members")))
    pool = fleet.pools[T4].object()
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": T4},
        "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]},
    }
    objects = plan([pool, queue], {}, StartupEnv(), NOW)
    [fleet_type] = [o for o in objects if o["kind"] == "InstanceType"]
    assert fleet_type["status"]["phase"] == "Active"
    [planned_queue] = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert planned_queue["status"] == queue["status"]


def test_a_members_hooks_plan_is_a_member_file(tmp_path: Path) -> None:
    """`python -m hooks plan -o json` of a member's snapshot: its pools as the chain would make
    them, each Pending until Kueue reports, so listed and not counted."""
    member_plan = _run("hooks", "plan", "--cluster", str(SAMPLE), "-o", "json")
    assert member_plan.returncode == 0, member_plan.stderr
    path = tmp_path / "east.json"
    path.write_text(member_plan.stdout)
    planned = _run("workergateway.plan", "--member", f"east={path}", "-o", "json")
    assert planned.returncode == 0, planned.stderr
    specs = {p["metadata"]["name"]: p["spec"] for p in json.loads(planned.stdout)["items"]}
    assert T4 in specs
    assert specs[T4]["members"] == ["east"] and specs[T4]["memberSummary"] == "0/1"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([], "name at least one member: --member NAME=FILE"),
        (["--member", "east"], "--member 'east': expected NAME=FILE"),
        (["--member", "east=/nonexistent.json"], "/nonexistent.json: No such file"),
    ],
)
def test_a_bad_member_flag_is_a_usage_error(argv: list[str], said: str) -> None:
    answer = _run("workergateway.plan", *argv)
    assert answer.returncode == 2
    assert said in answer.stderr and answer.stderr.count("\n") == 1, answer.stderr


def test_a_member_named_twice_or_unreadable_is_a_usage_error(tmp_path: Path) -> None:
    flags = _write_members(tmp_path, _fixture("two-members"))
    twice = _run("workergateway.plan", *flags[:2], *flags[:2])
    assert twice.returncode == 2 and "named twice" in twice.stderr
    none = tmp_path / "no-clusters.json"
    none.write_text('{"kind": "List", "items": []}')
    unknown = _run("workergateway.plan", *flags, "--clusters", str(none))
    assert unknown.returncode == 2 and "no MultiKueueCluster of that name" in unknown.stderr
    path = tmp_path / "broken.json"
    objects = _members(_fixture("two-members"))
    name = sorted(objects)[0]
    broken = json.loads(json.dumps(objects[name]))
    broken[0]["status"]["phase"] = "Sideways"
    path.write_text(json.dumps({"kind": "List", "items": broken}))
    answer = _run("workergateway.plan", "--member", f"{name}={path}")
    assert answer.returncode == 2
    assert f"member {name}: instancetypes/{T4}.status.phase: expected one of" in answer.stderr


def test_the_table_names_each_pool_and_each_conflict() -> None:
    fixture = _fixture("members-disagree-on-identity")
    fleet = plan_fleet(_members(fixture))
    shown = table(fleet)
    assert shown.startswith("POOL ")
    assert fleet.conflicts and all(f"conflict: {c}" in shown for c in fleet.conflicts)
    assert all(name in shown for name in fleet.pools)


def test_a_fleetpool_the_hooks_cannot_read_is_named() -> None:
    pool = plan_fleet(_members(_fixture("two-members"))).pools[T4].object()
    pool["spec"]["members"] = []
    with pytest.raises(BadRequest, match=r"spec\.members"):
        plan([pool], {}, StartupEnv(), NOW)
