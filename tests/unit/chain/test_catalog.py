"""The pool catalog's wire form: what is kept of each object, the order, the size measure."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chain.catalog import (
    annotation_bytes,
    catalog_configmap,
    catalog_document,
    catalog_item,
    catalog_items,
    render_catalog,
)

WORKER = "worker.gpustack.ai/v1alpha1"
ENTRANCE = "schedule.gpustack.ai/queue-entrance"


def _type(name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": {"name": name, "uid": "u", "labels": {ENTRANCE: f"q-{name}", "other": "x"}},
        "spec": {"acceleratorGroup": "nvidia-t4", "os": "linux"},
        "status": {"phase": "Active", **status},
    }


def test_an_instance_type_keeps_only_what_the_fold_reads() -> None:
    detail = {
        "manufacturer": "nvidia",
        "product": "Tesla-T4",
        "memory": "15Gi",
        "slicedDetail": {
            "logical": {"count": 128},
            "physical": {
                "count": 7,
                "profiles": [{"name": "1g.5gb", "count": 7, "memoryMib": 4864}],
            },
        },
    }
    assert catalog_item(_type("t4", detail=detail)) == {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": {"name": "t4", "labels": {ENTRANCE: "q-t4"}},
        "spec": {"acceleratorGroup": "nvidia-t4"},
        "status": {
            "detail": {
                "manufacturer": "nvidia",
                "memory": "15Gi",
                "slicedDetail": {"physical": {"profiles": [{"name": "1g.5gb", "memoryMib": 4864}]}},
            }
        },
    }


def test_a_field_of_the_wrong_type_is_kept_for_the_reader_to_name() -> None:
    item = catalog_item(_type("t4", detail={"memory": 15, "slicedDetail": {"physical": "x"}}))
    assert item is not None
    assert item["status"]["detail"] == {"memory": 15, "slicedDetail": {"physical": "x"}}
    assert catalog_item({**_type("t4"), "metadata": ["t4"]})["metadata"] == ["t4"]  # type: ignore[index]


def test_only_instance_types_and_the_settings_singleton_are_items() -> None:
    settings = {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {"name": "default", "uid": "u"},
        "spec": {"workload-fit-affinity": False},
    }
    assert catalog_item(settings) == {**settings, "metadata": {"name": "default"}}
    assert catalog_item({**settings, "metadata": {"name": "staging"}}) is None
    assert (
        catalog_item({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}) is None
    )
    assert catalog_item("text") is None
    document = catalog_document([_type("b"), settings, _type("a"), {"kind": "Pod"}])
    assert [i["metadata"]["name"] for i in document["items"]] == ["default", "a", "b"]
    assert catalog_items({"items": [_type("a"), 3]}) == [catalog_item(_type("a")), None]
    with pytest.raises(ValueError, match="Kubernetes List"):
        catalog_items({"kind": "List"})


def test_the_text_is_one_per_document_and_the_size_counts_the_annotation_copy() -> None:
    one = render_catalog(catalog_document([_type("a"), _type("b")]))
    assert one == render_catalog(catalog_document([_type("b"), _type("a")]))
    assert json.loads(one)["kind"] == "List"
    configmap = catalog_configmap(one)
    # Every quote of the text is escaped once more inside the JSON of the whole object.
    assert annotation_bytes(configmap) > len(one) + one.count('"')
