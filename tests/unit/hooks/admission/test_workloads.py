"""`POST /mutate-workloads`: docs/design/vectors.md, "Workload fit pin (group nvidia-t4)"."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hooks.admission.pool_catalog import Catalog
from tests.unit.hooks.admission.helpers import (
    CATALOG,
    GPU,
    QUEUE,
    catalog,
    client,
    instance_type,
    patched,
    post,
    review,
)

SLICED_FIT = "sliced-max-free-units.fit.gpustack.ai/nvidia-t4"
SHARED_FIT = "shared-free-cards.fit.gpustack.ai/nvidia-t4"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def gt(key: str, value: int) -> dict[str, Any]:
    return {"key": key, "operator": "Gt", "values": [str(value)]}


def workload(
    *limits: dict[str, str], queue: str = QUEUE, affinity: Any = None, reserved: bool = False
) -> dict[str, Any]:
    podsets = []
    for number, lim in enumerate(limits):
        spec: dict[str, Any] = {
            "containers": [{"name": "main", "resources": {"requests": dict(lim)}}]
        }
        if affinity is not None:
            spec["affinity"] = copy.deepcopy(affinity)
        podsets.append({"name": f"ps{number}", "count": 1, "template": {"spec": spec}})
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-a", "namespace": "team-a"},
        "spec": {"queueName": queue, "podSets": podsets},
    }
    if reserved:
        obj["status"] = {"conditions": [{"type": "QuotaReserved", "status": "True"}]}
    return obj


def pinned(
    obj: dict[str, Any], source: Catalog = CATALOG, operation: str = "CREATE", old: Any = None
) -> list[Any]:
    """The affinity of each PodSet after the webhook (None where it has none)."""
    status, answer = post(
        client(source), "/mutate-workloads", review(obj, operation, old, "workloads")
    )
    assert status == 200, answer
    response = answer["response"]
    assert response["allowed"] is True
    after = patched(obj, response)
    return [ps["template"]["spec"].get("affinity") for ps in after["spec"]["podSets"]]


def single(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}
    }


def test_slice_pins_to_a_card_with_the_units() -> None:
    found = pinned(workload({GPU + ".sliced": "1", GPU + ".sliced.units": "800000"}))
    assert found == [single(gt(SLICED_FIT, 799999))]


def test_shared_two_pins_to_two_cards_with_a_free_share() -> None:
    assert pinned(workload({GPU + ".shared": "2"})) == [single(gt(SHARED_FIT, 1))]


@pytest.mark.parametrize(
    "limits",
    [
        {GPU + ".shared": "1"},
        {GPU: "2"},
        {GPU + ".partitioned": "1", GPU + ".partitioned.mig-1g.10gb": "1"},
        {"cpu": "4"},
    ],
)
def test_no_pin(limits: dict[str, str]) -> None:
    assert pinned(workload(limits)) == [None]


def test_each_podset_gets_its_own_pin() -> None:
    found = pinned(workload({GPU + ".shared": "3"}, {"cpu": "1"}))
    assert found == [single(gt(SHARED_FIT, 2)), None]


def test_existing_terms_are_anded() -> None:
    count = {
        "key": "acceleratable.feature.gpustack.ai/nvidia-t4.count",
        "operator": "Gt",
        "values": ["1"],
    }
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [count]}, {"matchExpressions": [zone]}]
            }
        }
    }
    (found,) = pinned(workload({GPU + ".shared": "2"}, affinity=affinity))
    assert found["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchExpressions": [count, gt(SHARED_FIT, 1)]},
        {"matchExpressions": [zone, gt(SHARED_FIT, 1)]},
    ]
    again = workload({GPU + ".shared": "2"}, affinity=found)
    assert pinned(again) == [found]


def test_empty_terms_and_an_empty_selector_are_left_alone() -> None:
    empty_selector = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}
    assert pinned(workload({GPU + ".shared": "2"}, affinity=empty_selector)) == [empty_selector]
    preferred_only = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    (found,) = pinned(workload({GPU + ".shared": "2"}, affinity=preferred_only))
    assert found["nodeAffinity"][REQUIRED] == single(gt(SHARED_FIT, 1))["nodeAffinity"][REQUIRED]


@pytest.mark.parametrize(
    ("obj", "source"),
    [
        (workload({GPU + ".shared": "2"}, queue="team-queue"), CATALOG),
        (workload({GPU + ".shared": "2"}, queue="gpustack-fnv64-0000000000000000"), CATALOG),
        (workload({GPU + ".shared": "2"}), Catalog()),
        (workload({GPU + ".shared": "2"}), catalog(instance_type(group=""))),
        (workload({GPU + ".shared": "2"}), catalog(instance_type(group="bad key!"))),
    ],
    ids=["foreign-queue", "unknown-queue", "no-instance-type", "no-group", "invalid-group"],
)
def test_unchanged_outside_the_chain(obj: dict[str, Any], source: Catalog) -> None:
    assert pinned(obj, source) == [None]


def test_setting_off_leaves_it_unchanged() -> None:
    settings = {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {"name": "default"},
        "spec": {"workload-fit-affinity": False},
    }
    assert pinned(workload({GPU + ".shared": "2"}), catalog(instance_type(), settings)) == [None]


def test_update_is_pinned_only_before_quota_is_reserved() -> None:
    obj = workload({GPU + ".shared": "2"})
    held = workload({GPU + ".shared": "2"}, reserved=True)
    assert pinned(obj, operation="UPDATE", old=held) == [None]
    free = workload({GPU + ".shared": "2"})
    assert pinned(obj, operation="UPDATE", old=free) == [single(gt(SHARED_FIT, 1))]


def test_a_created_workload_it_cannot_read_is_denied_naming_the_field() -> None:
    """An UPDATE is left unchanged instead: refusing one could keep Kueue from removing the
    finalizer of a Workload stored before the rule."""
    broken = workload({GPU + ".shared": "2"})
    broken["spec"]["podSets"][0]["template"] = {}
    odd = workload({GPU + ".shared": "2"}, affinity={"nodeAffinity": "x"})
    for obj, field in (
        (broken, "spec.podSets[0].template.spec: expected an object"),
        (odd, "spec.podSets[0].template.spec.affinity.nodeAffinity: expected an object"),
    ):
        body = review(obj, resource="workloads")
        status, answer = post(client(), "/mutate-workloads", body)
        assert status == 200 and answer["response"]["allowed"] is False
        assert answer["response"]["status"]["message"].startswith(field), answer
        body = review(obj, "UPDATE", obj, resource="workloads")
        status, answer = post(client(), "/mutate-workloads", body)
        assert status == 200
        assert answer["response"] == {"uid": answer["response"]["uid"], "allowed": True}
