"""The pool catalog the webhooks read instead of the API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chain.requests import PoolFacts
from hooks.admission.pool_catalog import FileCatalog, catalog_from_env, parse_catalog
from hooks.catalog_file import CATALOG_ENV, load_document
from tests.unit.hooks.admission.helpers import QUEUE, T4, catalog, instance_type


def test_instance_types_are_found_by_their_entrance_label() -> None:
    found = catalog(instance_type(), {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {}})
    assert found.pool(QUEUE) == PoolFacts(T4, "nvidia-t4", True, 40960, {})
    assert found.pool("gpustack-fnv64-0000000000000000") is None
    assert found.settings.workload_fit_affinity


def test_ambiguous_and_broken_entries_resolve_to_none() -> None:
    twin = instance_type(name="twin")
    twin["metadata"]["labels"] = instance_type()["metadata"]["labels"]
    assert catalog(instance_type(), twin).pools == {}
    assert catalog(instance_type(memory="lots")).pools == {}
    bad_settings = {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {"name": "default"},
        "spec": {"no-such-setting": True},
    }
    assert catalog(instance_type(), bad_settings).pool(QUEUE) is not None


def test_a_document_that_is_not_a_list_is_refused() -> None:
    with pytest.raises(ValueError, match="Kubernetes List"):
        parse_catalog([])


def test_file_catalog_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    source = FileCatalog(str(path))
    assert source().pools == {}
    path.write_text(json.dumps({"items": [instance_type()]}))
    assert source().pool(QUEUE) is not None
    path.write_text("items: [")
    os.utime(path, ns=(1, 1))
    assert source().pools == {}
    path.unlink()
    assert source().pools == {}


def test_catalog_from_env(tmp_path: Path) -> None:
    assert catalog_from_env({})().pools == {}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"items": [instance_type()]}))
    assert catalog_from_env({CATALOG_ENV: str(path)})().pool(QUEUE) is not None


def test_the_file_is_read_as_json_first_then_as_yaml(tmp_path: Path) -> None:
    # The writer's compact JSON may carry characters YAML 1.1 refuses in a stream (U+0080).
    named = instance_type()
    named["spec"]["displayName"] = "T4 \x80"
    path = tmp_path / "catalog.yaml"
    path.write_text(json.dumps({"items": [named]}, ensure_ascii=False), encoding="utf-8")
    assert FileCatalog(str(path))().pool(QUEUE) is not None
    assert load_document("items: []\nkind: List\n") == {"items": [], "kind": "List"}
