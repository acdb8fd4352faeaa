"""Focused checks of the pieces the fixtures exercise only indirectly."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from builders.cluster import CPU_MODELS, node_request, served_node, settings_object
from chain.keys import CpuKey
from chain.settings import Settings
from hooks.flavor import node
from hooks.flavor.objects import as_observed, cpu_detail
from hooks.flavor.summary import scan, summary_levels
from hooks.readers import read_settings
from hooks.request import BadRequest, DecoratorRequest, parse_shallow

G = "general.feature.gpustack.ai/"


def test_read_settings_names_the_full_path() -> None:
    with pytest.raises(BadRequest) as caught:
        read_settings({"spec": {"node-management-manual": 3}}, "$.object")
    assert caught.value.field == "$.object.spec.node-management-manual"
    with pytest.raises(BadRequest) as caught:
        read_settings({"spec": ["not", "a", "map"]}, "$.object")
    assert caught.value.field == "$.object.spec"
    assert read_settings(None, "$.object") == Settings()
    assert read_settings({"metadata": {"name": "default"}}, "$.object") == Settings()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"object": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}}, "related": 3},
            "$.related",
        ),
        (
            {
                "object": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}},
                "related": {"G.v1": {"a": {"kind": "G", "metadata": {"name": "a"}}}},
            },
            "$.related['G.v1']['a'].apiVersion",
        ),
        (
            {
                "object": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}},
                "attachments": {"G.v1": {"a": "text"}},
            },
            "$.attachments['G.v1']['a']",
        ),
        *(
            (
                {
                    "object": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}},
                    "related": {
                        "G.v1": {
                            "ok": {"apiVersion": "v1", "kind": "G", "metadata": {"name": "ok"}},
                            "a": {"apiVersion": "v1", "kind": "G", **bad},
                        }
                    },
                },
                f"$.related['G.v1']['a']{field}",
            )
            for bad, field in (
                ({"kind": ""}, ".kind"),
                ({"metadata": ["a"]}, ".metadata"),
                ({"metadata": {}}, ".metadata.name"),
                ({"metadata": {"name": 7}}, ".metadata.name"),
            )
        ),
    ],
)
def test_parse_lean_names_the_bad_entry(body: object, field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_shallow(body)
    assert caught.value.field == field


def test_parse_lean_accepts_null_groups() -> None:
    body = {
        "object": {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}},
        "related": {"G.v1": None},
    }
    assert parse_shallow(body).related.of("G", "v1") == ()


def test_node_labels_never_replace_an_admin_value() -> None:
    cpu = CpuKey("amd", "amd-25-1")
    for manual in (False, True):
        for value in ("true", "false", "maybe"):
            answer = node.node_labels(
                {"gpustack.ai/managed": value}, cpu, Fraction(4), Settings(manual)
            )
            assert answer["gpustack.ai/managed"] == value


def test_node_labels_ceil_fractional_cpu() -> None:
    answer = node.node_labels({}, CpuKey("amd", "amd-25-1"), Fraction(31, 2), Settings())
    assert answer[G + "amd-25-1.count"] == "16"


def test_acceleratable_true_is_never_touched() -> None:
    cpu = CpuKey("amd", "amd")
    answer = node.node_labels(
        {"feature.gpustack.ai/acceleratable": "true"}, cpu, Fraction(4), Settings()
    )
    assert "feature.gpustack.ai/acceleratable" not in answer


def test_node_without_os_feeds_nothing() -> None:
    obj = served_node("n", CPU_MODELS[0])
    del obj["metadata"]["labels"]["kubernetes.io/os"]
    assert node.sync(DecoratorRequest.parse(node_request(obj)))["attachments"] == []


def test_missing_settings_object_means_defaults() -> None:
    with_defaults = node.sync(
        DecoratorRequest.parse(node_request(served_node("n", CPU_MODELS[0]), settings_object()))
    )
    without = node.sync(DecoratorRequest.parse(node_request(served_node("n", CPU_MODELS[0]))))
    assert with_defaults == without


def test_cpu_detail_is_compact_sorted_json() -> None:
    cpu = {"manufacturer": "amd", "cacheL2": "1", "stepping": "2", "product": "P"}
    assert cpu_detail(cpu, with_identity=False) == '{"cache":{"l2":"1"},"stepping":"2"}'
    assert cpu_detail(cpu, with_identity=True) == (
        '{"cache":{"l2":"1"},"manufacturer":"amd","product":"P","stepping":"2"}'
    )
    assert cpu_detail({}, with_identity=False) == "{}"


def test_as_observed_strips_server_fields() -> None:
    served = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {
            "name": "t",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"l": "v"},
            "ownerReferences": [{"uid": "o"}],
            "managedFields": [],
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"metacontroller.k8s.io/decorator-controller": "x"},
        },
        "spec": {"displayName": "d"},
        "status": {"phase": "Active"},
    }
    assert as_observed(served) == {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "t", "labels": {"l": "v"}},
        "spec": {"displayName": "d"},
    }


def _summary(levels: object = None, count: object = 8, name: str | None = None) -> dict[str, Any]:
    entry = {"generalKey": "amd-epyc-7763", "os": "linux", "arch": "amd64", "count": count}
    entry["name"] = name or "gpustack--amd-epyc-7763-linux-amd64-8c"
    spec: dict[str, Any] = {"node": "n", "flavors": [entry]}
    if levels is not None:
        spec["levels"] = levels
    return {"apiVersion": "gpustack.ai/v1alpha1", "kind": "NodeFlavors", "spec": spec}


RACK_LEVELS = ["cloud.provider.com/topology-rack", "kubernetes.io/hostname"]


@pytest.mark.parametrize(
    "levels",
    [
        [True, "kubernetes.io/hostname"],  # True == 1, never equal to a remembered string
        [{"rack": 1}, "kubernetes.io/hostname"],  # unhashable: not looked up at all
        ["kubernetes.io/hostname", "cloud.provider.com/topology-rack"],  # hostname not last
        "cloud.provider.com/topology-rack",
    ],
)
def test_remembered_levels_refuse_what_the_check_refuses(levels: object) -> None:
    """Levels are checked once per distinct list; a list that is not one accepted before is
    still refused, naming its field, before and after an accepted one is remembered."""
    for _ in range(2):
        with pytest.raises(BadRequest) as caught:
            summary_levels(_summary(levels), "$.s")
        assert caught.value.field.startswith("$.s.spec.levels")
        assert summary_levels(_summary(RACK_LEVELS), "$.s") == tuple(RACK_LEVELS)


@pytest.mark.parametrize("count", [True, 8.0, "8", 0])
def test_remembered_flavor_names_refuse_a_count_of_another_type(count: object) -> None:
    """A flavor name is computed once per identity, and an entry equal to one accepted in the
    same sync is not checked again; `True == 1` and `8.0 == 8` must let neither accept an
    entry whose count is no integer."""
    for accepted in (None, {}):
        assert scan(_summary(count=8), "$.s", accepted)[3][0]["count"] == 8
        name = "gpustack--amd-epyc-7763-linux-amd64-1c" if count is True else None
        if count is True:
            assert scan(_summary(count=1, name=name), "$.s", accepted)[3][0]["count"] == 1
        with pytest.raises(BadRequest) as caught:
            scan(_summary(count=count, name=name), "$.s", accepted)
        assert caught.value.field == "$.s.spec.flavors[0].count"


def test_an_entry_equal_to_an_accepted_one_passes_and_any_other_is_checked() -> None:
    accepted: dict[Any, Any] = {}
    first = _summary()
    assert scan(first, "$.s", accepted)[3] == first["spec"]["flavors"]
    again = _summary()
    assert scan(again, "$.s", accepted)[3] is again["spec"]["flavors"]
    odd = _summary()
    odd["spec"]["flavors"][0]["product"] = 7
    with pytest.raises(BadRequest) as caught:
        scan(odd, "$.s", accepted)
    assert caught.value.field == "$.s.spec.flavors[0].product"


def test_flavor_name_still_checked_against_its_fields() -> None:
    with pytest.raises(BadRequest) as caught:
        scan(_summary(name="gpustack--amd-epyc-7763-linux-amd64-16c"), "$.s")
    assert caught.value.field == "$.s.spec.flavors[0].name"
