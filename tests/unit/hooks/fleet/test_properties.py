"""The fleet hooks against what the gateway writes, and against any edit of it.

- Every pool of every gateway fixture reads back whole (`FleetPoolView.parse` of
  `FleetPool.object()`): the writer and the reader of the shared shape agree.
- Whatever edit a `FleetPool` takes, the pool decorator answers either a 400 naming a field of
  the object, or all four children with a config Kueue accepts (1 to 20 members, each once) and a
  queue whose flavor covers exactly its resources: never a 200 with fewer children, which would
  have Metacontroller delete the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from chain.fleet_pools import FleetPoolView, fleet_check_name
from hooks.fleet.app import app
from tests.unit.hooks.fleet.cases import CASES, gateway_pool, pool_request
from tests.unit.hooks.test_fuzz import mutated
from tests.unit.test_crds import description_problems
from workergateway.members import read_member
from workergateway.sums import FleetPool, fleet_pools

GATEWAY_FIXTURES = Path(__file__).parents[2] / "workergateway" / "fixtures"
MANIFESTS = Path(__file__).parents[4] / "manifests"


def _gateway_pools() -> list[FleetPool]:
    pools = []
    for path in sorted(GATEWAY_FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text())
        if "error" in fixture:
            continue
        fleet = fleet_pools(
            read_member(m["cluster"], m["instanceTypes"], m["clusterQueues"])
            for m in fixture["members"]
        )
        pools += fleet.pools.values()
    return pools


POOLS = _gateway_pools()


def test_there_are_gateway_pools() -> None:
    assert len(POOLS) >= 10


@pytest.mark.parametrize("pool", POOLS, ids=lambda pool: pool.name)
def test_what_the_gateway_writes_reads_back(pool: FleetPool) -> None:
    view = FleetPoolView.parse(pool.object())
    assert (view.name, view.members, view.views, view.cpu) == (
        pool.name,
        pool.members,
        pool.views,
        pool.cpu,
    )
    assert dict(view.instance_type) == pool.spec
    assert [(q.name, q.amount) for q in view.quota] == list(pool.quota)
    assert view.member_summary == pool.member_summary()
    assert [m.render() for m in view.member_views] == pool.render()["memberViews"]


def _check_children(answer: dict[str, Any]) -> None:
    queue, check, config, instance_type = answer["attachments"]
    name = queue["metadata"]["name"]
    clusters = config["spec"]["clusters"]
    assert 1 <= len(clusters) <= 20 and len(set(clusters)) == len(clusters)
    assert check["metadata"]["name"] == fleet_check_name(name)
    assert check["spec"]["parameters"]["name"] == config["metadata"]["name"] == name
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": fleet_check_name(name)}]
    }
    for group in queue["spec"].get("resourceGroups", []):
        [flavor] = group["flavors"]
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    assert instance_type["metadata"]["name"] == name


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_an_edited_pool_is_a_400_or_every_child(data: st.DataObject) -> None:
    base = pool_request(data.draw(st.sampled_from(POOLS)).object())
    body = data.draw(mutated(base, avoid=(("controller",),)))
    try:
        raw = json.dumps(body)
    except UnicodeEncodeError:
        return
    reply = app.test_client().post("/sync", data=raw, content_type="application/json")
    answer = reply.get_json()
    assert reply.status_code in (200, 400), answer
    if reply.status_code == 400:
        assert "attachments" not in answer and answer["field"].startswith("$"), answer
        return
    _check_children(answer)


def test_the_property_sees_a_refusal_and_an_answer() -> None:
    """The property's two branches are both reached by the shipped pool and a spoiled one."""
    good = pool_request(gateway_pool("two-members"))
    reply = app.test_client().post("/sync", json=good)
    assert reply.status_code == 200
    _check_children(reply.get_json())
    bad = json.loads(json.dumps(good))
    bad["object"]["spec"]["members"] = "east"
    reply = app.test_client().post("/sync", json=bad)
    assert (reply.status_code, reply.get_json()["field"]) == (400, "$.object.spec.members")


def _crd_schema() -> dict[str, Any]:
    path = MANIFESTS / "fleet" / "crds" / "fleetpools.yaml"
    schema: dict[str, Any] = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    return schema


@pytest.mark.parametrize("pool", POOLS, ids=lambda pool: pool.name)
def test_what_the_gateway_writes_fits_the_crd(pool: FleetPool) -> None:
    """The CRD's schema (its OpenAPI keywords, which JSON Schema reads alike) takes every pool the
    gateway writes, so the API server neither refuses nor prunes it."""
    jsonschema.validate(pool.object(), _crd_schema())
    declared = _crd_schema()["properties"]["spec"]["properties"]
    assert set(pool.render()) <= set(declared)
    for member in pool.render()["memberViews"]:
        assert set(member) <= set(declared["memberViews"]["items"]["properties"])
    assert set(pool.spec) <= set(declared["instanceType"]["properties"])


def _patched_instance_type_crd() -> dict[str, Any]:
    """The InstanceType CRD as the manager gets it: the shipped one with manifests/fleet's
    JSON patch applied (its operations are all `add`, to a map key or the end of a list)."""
    crd: dict[str, Any] = yaml.safe_load((MANIFESTS / "crds" / "instancetypes.yaml").read_text())
    ops = yaml.safe_load((MANIFESTS / "fleet" / "instancetypes-fleet-status.yaml").read_text())
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = op["path"].strip("/").split("/")
        node: Any = crd
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if last == "-":
            node.append(op["value"])
        else:
            assert last not in node, f"{op['path']} is there already"
            node[last] = op["value"]
    return crd


STATUS_ANSWERS = [
    (name, case["response"]["status"])
    for name, case in sorted(CASES.items())
    if case["path"] == "/status/sync" and "response" in case
]


@pytest.mark.parametrize(("name", "status"), STATUS_ANSWERS, ids=[n for n, _ in STATUS_ANSWERS])
def test_the_fleet_status_fits_the_managers_instancetype_crd(
    name: str, status: dict[str, Any]
) -> None:
    """Every field the status hook answers is declared by the patched CRD (none pruned), and
    the answer is valid under it."""
    crd = _patched_instance_type_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert set(status) <= set(schema["properties"])
    jsonschema.validate(status, schema)


def test_the_patch_describes_what_it_adds_and_adds_the_members_column() -> None:
    crd = _patched_instance_type_crd()
    assert description_problems([crd]) == []
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert {"name": "Members", "jsonPath": ".status.memberSummary"}.items() <= columns[-1].items()
