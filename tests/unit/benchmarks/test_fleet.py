"""The fleet benchmark's short profile (issue #32): a small fleet made the way the long profile
makes ten members of a thousand nodes, its objects checked against the CRDs, and the pass's sums
checked against the members' own InstanceTypes and queues, not against the gateway's code. Only
invariants are asserted, never a time (the times are the benchmark's printout)."""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from benchmarks.fleet import Lag, _kubeconfig, aggregation, member, pure_pass
from chain.quantity import parse_quantity
from workergateway.kubeconfig import parse_kubeconfig

REPO = Path(__file__).resolve().parents[3]
VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu")


def _schema(path: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / path).read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_short_profile_sums_what_the_members_say() -> None:
    members = [member(index, 60) for index in range(3)]
    # What the chain writes, as its CRD takes it.
    schema = _schema("manifests/crds/instancetypes.yaml")
    for one in members:
        assert one.instance_types and len(one.cluster_queues) == len(one.instance_types)
        for obj in one.instance_types:
            jsonschema.validate(obj, schema)
    pools = {
        obj["metadata"]["name"]: obj["spec"]
        for obj in pure_pass([(m.name, m.instance_types, m.cluster_queues) for m in members])
    }
    # The members' own words, summed here by hand.
    remaining: dict[tuple[str, str], int] = defaultdict(int)
    quota: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    having: dict[str, list[str]] = defaultdict(list)
    for one in members:
        for obj in one.instance_types:
            name = obj["metadata"]["name"]
            having[name].append(one.name)
            for view in VIEWS:
                remaining[name, view] += int(obj["status"][view]["remaining"])
        for queue in one.cluster_queues:
            for group in queue["spec"].get("resourceGroups") or []:
                for flavor in group["flavors"]:
                    for resource in flavor["resources"]:
                        key = queue["metadata"]["name"], resource["name"]
                        quota[key] += parse_quantity(str(resource["nominalQuota"]))
    assert set(pools) == set(having)
    for name, spec in pools.items():
        assert spec["members"] == having[name]
        for view in VIEWS:
            assert int(spec[view]["remaining"]) == remaining[name, view], (name, view)
        for entry in spec["quota"]:
            assert parse_quantity(entry["nominalQuota"]) == quota[name, entry["name"]]
    fleet_schema = _schema("manifests/fleet/crds/fleetpools.yaml")
    for obj in pure_pass([(m.name, m.instance_types, m.cluster_queues) for m in members]):
        jsonschema.validate(obj, fleet_schema)


def test_the_short_profile_measures_side_by_side() -> None:
    found = aggregation(members=2, nodes=40, repeats=2)
    printed = "\n".join(found.lines())
    assert found.pools > 0, printed
    assert len(found.decoded) == len(found.decoded_all) == len(found.summed) == 2, printed
    assert all(sample > 0 for sample in (*found.decoded, *found.summed)), printed
    assert "ratio to the InstanceType lists" in printed


def test_the_lag_benchmarks_secret_is_one_the_gateway_takes() -> None:
    text = _kubeconfig("https://127.0.0.1:6443", b"ca", b"cert", b"key")
    credentials = parse_kubeconfig("member-00", text)
    assert credentials.server == "https://127.0.0.1:6443"
    assert credentials.ca == b"ca"
    assert json.loads(text)["current-context"] == "member"


def test_the_lag_figures() -> None:
    lines = Lag(2, lags=[0.2, 0.3, 0.4], events=[0.01, 0.02, 0.05]).lines()
    assert lines[0] == "3 changes, 2 members on one API server"
    assert "lag beyond the watch event p50 / p99: 0.280 / 0.350 s" in lines[3]
