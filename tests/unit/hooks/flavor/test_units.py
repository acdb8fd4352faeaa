"""Focused checks of the pieces the fixtures exercise only indirectly."""

from __future__ import annotations

from fractions import Fraction

import pytest

from builders.cluster import CPU_MODELS, node_request, served_node, settings_object
from chain.keys import CpuKey
from chain.settings import Settings
from hooks.flavor import node
from hooks.flavor.objects import as_observed, cpu_detail
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
