"""The fleet's views from the members' own objects (docs/fleet.md, "How the views sum").

Each fixture in `fixtures/` holds the members as the gateway would read them (the manager's
`MultiKueueCluster`, the member's InstanceTypes and ClusterQueues) and either the fleet it
must make, written out by hand from the members' views, or the error it must raise (which
member, which field). Properties beside them check the rules on random members."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chain.ledger import ProfileCount
from chain.pools import PoolIdentity
from chain.views import AcceleratorViews, PartitionView, View
from workergateway.members import MemberError, MemberPool, MemberState, UnitSpec, read_member
from workergateway.sums import Fleet, fleet_pools, sum_views

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(path.stem for path in FIXTURES.glob("*.json"))


def _read(members: list[dict[str, Any]]) -> Fleet:
    return fleet_pools(
        read_member(member["cluster"], member["instanceTypes"], member["clusterQueues"])
        for member in members
    )


def _rendered(fleet: Fleet) -> dict[str, dict[str, object]]:
    return {name: pool.render() for name, pool in fleet.pools.items()}


def test_there_are_fixtures() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    fixture = json.loads((FIXTURES / f"{case}.json").read_text())
    assert fixture["description"]
    if "error" in fixture:
        expected = fixture["error"]
        with pytest.raises(MemberError) as raised:
            _read(fixture["members"])
        err = raised.value
        assert (err.member, err.field) == (expected["member"], expected["field"])
        assert str(err).startswith(f"member {err.member}: {err.field}: ")
        return
    fleet = _read(fixture["members"])
    assert _rendered(fleet) == fixture["fleet"]
    conflicts = [
        {"pool": c.pool, "field": c.field, "members": list(c.members)} for c in fleet.conflicts
    ]
    assert conflicts == fixture.get("conflicts", [])
    assert all(c.pool in str(c) and all(m in str(c) for m in c.members) for c in fleet.conflicts)


def test_a_member_listed_twice_is_refused() -> None:
    fixture = json.loads((FIXTURES / "two-members.json").read_text())
    twice = [fixture["members"][0], fixture["members"][0]]
    with pytest.raises(ValueError, match="member west: listed twice"):
        _read(twice)


# --- properties -----------------------------------------------------------------------------

POOL = "gpustack--nvidia-tesla-t4-linux-amd64"
IDENTITY = PoolIdentity(True, "generic", "nvidia-tesla-t4", "linux", "amd64")
amounts = st.one_of(
    st.integers(min_value=0, max_value=10_000),
    st.fractions(min_value=0, max_value=10_000, max_denominator=1000),
)
views = st.builds(View, amounts, amounts, amounts)
profiles = st.lists(
    st.builds(ProfileCount, st.sampled_from(["1g.10gb", "2g.20gb", "7g.80gb"]), st.integers(0, 7)),
    max_size=3,
    unique_by=lambda entry: entry.name,
)
partitions = st.builds(PartitionView, views, profiles, profiles)
accelerators = st.builds(AcceleratorViews, views, views, views, partitions)


@st.composite
def members(draw: st.DrawFn) -> list[tuple[MemberState, tuple[MemberPool, ...]]]:
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    found: list[tuple[MemberState, tuple[MemberPool, ...]]] = []
    for name in names:
        active = draw(st.booleans())
        pool = MemberPool(
            name,
            POOL,
            IDENTITY,
            UnitSpec(),
            draw(st.sampled_from(["Active", "Active", "Pending", "Inactive"])),
            draw(accelerators),
            draw(views),
            (("credits.gpustack.ai/nvidia", Fraction(draw(st.integers(0, 64)) * 1_600_000)),),
        )
        found.append((MemberState(name, active, "Active" if active else "X", ""), (pool,)))
    return found


def _counted(fleet: list[tuple[MemberState, tuple[MemberPool, ...]]]) -> list[MemberPool]:
    return [pool for state, pools in fleet if state.active for pool in pools if pool.counted]


# No deadline: an example's time says nothing about the sums, and on a loaded machine a
# deadline fails the test for no fault of theirs (as in the project's other properties).
@settings(max_examples=40, deadline=None)
@given(members())
def test_sums_and_maxima_follow_the_counted_members(fleet: Any) -> None:
    pools = fleet_pools(fleet).pools
    counted = _counted(fleet)
    if not any(state.active for state, _ in fleet):
        assert pools == {}
        return
    pool = pools[POOL]
    for attribute in ("exclusive", "shared", "sliced"):
        theirs = [getattr(member.views, attribute) for member in counted]
        ours = getattr(pool.views, attribute)
        assert ours.remaining == sum(view.remaining for view in theirs)
        assert ours.capacity == sum(view.capacity for view in theirs)
        assert ours.once_max_request == max((v.once_max_request for v in theirs), default=0)
    assert pool.cpu == sum_views(member.cpu for member in counted)
    offered: dict[str, int] = {}
    for member in counted:
        for entry in member.views.partitioned.remaining_profiles:
            offered[entry.name] = offered.get(entry.name, 0) + entry.count
    assert {e.name: e.count for e in pool.views.partitioned.remaining_profiles} == offered
    assert [name for name, _ in pool.quota] == ["credits.gpustack.ai/nvidia"]
    assert sum(amount for _, amount in pool.quota) == sum(
        amount for member in counted for _, amount in member.quota
    )
    assert list(pool.members) == sorted(state.name for state, _ in fleet if state.active)


@settings(max_examples=40, deadline=None)
@given(members(), st.randoms())
def test_the_order_members_arrive_in_changes_nothing(fleet: Any, random: Any) -> None:
    shuffled = list(fleet)
    random.shuffle(shuffled)
    assert _rendered(fleet_pools(shuffled)) == _rendered(fleet_pools(fleet))


@settings(max_examples=40, deadline=None)
@given(members())
def test_an_inactive_member_is_as_good_as_absent(fleet: Any) -> None:
    present = [(state, pools) for state, pools in fleet if state.active]
    assert _rendered(fleet_pools(fleet)) == _rendered(fleet_pools(present))


def _typed_only(*texts: str) -> UnitSpec:
    raise ValueError("the typed readers only")


def _without_fast_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    from workergateway import members

    monkeypatch.setattr(members, "_fast_views", lambda status: None)
    monkeypatch.setattr(members, "_fast_quota", lambda queue: None)
    monkeypatch.setattr(members, "_unit_of", _typed_only)


def _assert_both_readers_agree(members: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The members read with the fast readers, then with the typed ones only: the same value,
    or the same error."""

    def read() -> object:
        try:
            return _rendered(_read(members))
        except MemberError as err:
            return str(err)

    fast = read()
    _without_fast_readers(monkeypatch)
    assert read() == fast


@pytest.mark.parametrize("case", CASES)
def test_the_fast_readers_read_what_the_typed_readers_read(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass reads the usual object through fast readers (docs/benchmarks.md, "Fleet"); they
    answer exactly what the typed readers answer, and leave every error to them."""
    members = json.loads((FIXTURES / f"{case}.json").read_text())["members"]
    _assert_both_readers_agree(members, monkeypatch)


@pytest.mark.parametrize(
    ("amount", "quota"),
    [("500m", "1500m"), ("16Gi", "2Ki"), (7, 3), ("1e3", "12")],
)
def test_amounts_the_fast_readers_leave_are_read_as_before(
    amount: object, quota: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = json.loads((FIXTURES / "two-members.json").read_text())["members"]
    for member in members:
        for obj in member["instanceTypes"]:
            obj["status"]["acceleratorSliced"]["remaining"] = amount
        for queue in member["clusterQueues"]:
            for group in queue["spec"].get("resourceGroups") or []:
                for flavor in group["flavors"]:
                    for resource in flavor["resources"]:
                        resource["nominalQuota"] = quota
    fast = _rendered(_read(members))
    _without_fast_readers(monkeypatch)
    assert _rendered(_read(members)) == fast


def _one_resource(resource: object) -> dict[str, object]:
    return {"resourceGroups": [{"flavors": [{"resources": [resource]}]}]}


@pytest.mark.parametrize(
    "spec",
    [
        {"resourceGroups": {"flavors": []}},  # a map where a list belongs
        {"resourceGroups": "abc"},
        {"resourceGroups": None},
        {"resourceGroups": [{"flavors": {"resources": []}}]},
        _one_resource(["cpu", "1"]),
        _one_resource({"name": "cpu"}),
        _one_resource({"name": 7, "nominalQuota": "1"}),
        _one_resource({"name": "c", "nominalQuota": True}),
        _one_resource({"name": "c", "nominalQuota": "\u0661"}),  # a digit, not an ASCII one
        {"resourceGroups": [{"flavors": [{"name": "f"}]}]},  # no resources: none to count
        {"resourceGroups": [{}]},
        [],
    ],
)
def test_an_unusual_queue_is_left_to_the_typed_reader(
    spec: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast reader takes the usual shape for granted; on anything else it answers None, and
    the pass reads what the typed reader reads: the same value, or the same error."""
    from workergateway import members as module

    queue = {"spec": spec}
    assert module._fast_quota(queue) is None
    members = json.loads((FIXTURES / "two-members.json").read_text())["members"]
    members[0]["clusterQueues"][0]["spec"] = spec
    _assert_both_readers_agree(members, monkeypatch)


def test_a_read_is_remembered_by_version_and_made_again_when_the_object_changes() -> None:
    """Between two passes few members' objects change: what was read of an object is kept by
    its uid and version (`members.Remembered`), and a new version is read again."""
    members = json.loads((FIXTURES / "two-members.json").read_text())["members"]
    east = members[0]
    for number, obj in enumerate([*east["instanceTypes"], *east["clusterQueues"]]):
        obj["metadata"].update(uid=f"uid-{number}", resourceVersion="7", generation=1)
    first = _rendered(_read(members))
    obj = east["instanceTypes"][0]
    obj["status"]["acceleratorSliced"]["remaining"] = "99"
    # The same version: what the API server would never serve changed, so it is not re-read.
    assert _rendered(_read(members)) == first
    obj["metadata"]["resourceVersion"] = "8"
    changed = _rendered(_read(members))
    assert changed != first
    west = members[1]["instanceTypes"][0]["status"]["acceleratorSliced"]["remaining"]
    pool = next(iter(changed.values()))
    assert pool["acceleratorSliced"]["remaining"] == str(99 + int(west))
    # A queue is read again when its spec's generation moves, not for a status write.
    queue = east["clusterQueues"][0]
    resource = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    resource["nominalQuota"] = "1"
    queue["metadata"]["resourceVersion"] = "9"
    assert _rendered(_read(members)) == changed
    queue["metadata"]["generation"] = 2
    assert _rendered(_read(members)) != changed


def test_what_is_remembered_is_one_entry_per_object_and_bounded() -> None:
    from workergateway.members import Remembered

    made: list[str] = []

    def make(obj: dict[str, Any]) -> str:
        made.append(obj["metadata"]["resourceVersion"])
        return str(obj["metadata"]["resourceVersion"])

    def obj(uid: str, version: str) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "resourceVersion": version}}

    remembered: Remembered[str] = Remembered("resourceVersion", make, kept=2)
    for version in ("1", "2", "3"):
        assert remembered.read("east", obj("a", version)) == version
    assert remembered.read("east", obj("a", "3")) == "3"
    assert made == ["1", "2", "3"]  # each version read once, the last one kept
    assert remembered.read("west", obj("a", "3")) == "3"  # another member's: read
    remembered.read("east", obj("b", "1"))  # a third object: the oldest entry goes
    remembered.read("west", obj("a", "3"))
    remembered.read("east", obj("a", "3"))
    assert made == ["1", "2", "3", "3", "1", "3"]
    assert remembered.read("east", {"metadata": {"resourceVersion": "3"}}) == "3"
    assert made[-1] == "3" and len(made) == 7  # no uid: read every time
