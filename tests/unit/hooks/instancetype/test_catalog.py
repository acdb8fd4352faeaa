"""The catalog decorator: fixtures through the app, the webhook reading what it writes, size."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from chain.catalog import annotation_bytes, catalog_configmap, render_catalog
from chain.instances import (
    INSTANCE_CATALOG_CONFIGMAP,
    INSTANCE_CATALOG_KEY,
    instance_catalog,
    parse_instance_catalog,
)
from chain.names import local_queue_name
from chain.requests import PoolFacts
from chain.settings import Settings
from hooks.admission.pool_catalog import parse_catalog
from hooks.catalog_file import load_document
from hooks.instancetype.app import app
from hooks.instancetype.catalog_decorator import CATALOG_BUDGET
from hooks.instancetype.catalog_decorator import sync as sync_parsed
from hooks.request import parse_shallow
from tests.unit.hooks.fixture_runner import GeneratedFixtures, fixture_tests
from tests.unit.hooks.instancetype.catalog_cases import (
    A100_TYPE,
    CASES,
    ENTRANCE,
    GENERIC_TYPE,
    SINGLETON,
    T4_TYPE,
    request,
)
from tests.unit.hooks.instancetype.catalog_fixtures import DIRECTORY

Obj = dict[str, Any]

(
    test_a_file_for_every_case,
    test_fixture_file_is_current,
    test_fixture,
    test_every_route_has_a_fixture,
) = fixture_tests(
    GeneratedFixtures(
        app,
        DIRECTORY,
        CASES,
        "attachments",
        frozenset({"/catalog/sync", "/catalog/customize"}),
        "tests.unit.hooks.instancetype.catalog_fixtures",
    )
)


def sync(body: Obj) -> Obj:
    """The decorator's sync as its route calls it: the request parsed shallow first."""
    return sync_parsed(parse_shallow(body))


@pytest.fixture(scope="module")
def client() -> Iterator[FlaskClient]:
    yield app.test_client()


def _catalog_text(answer: Obj) -> str:
    configmap, _instances, _kvcache = answer["attachments"]
    text: str = configmap["data"]["catalog.yaml"]
    return text


def test_the_webhook_reads_the_same_pools_from_the_catalog_as_from_the_types() -> None:
    types = [A100_TYPE, T4_TYPE, GENERIC_TYPE]
    read = parse_catalog(load_document(_catalog_text(sync(request(SINGLETON, types)))))
    assert read.settings == Settings(workload_fit_affinity=False)
    expected = {t["metadata"]["labels"][ENTRANCE]: PoolFacts.from_instance_type(t) for t in types}
    assert read.pools == expected
    a100 = read.pools[local_queue_name(A100_TYPE["metadata"]["name"])]
    assert (a100.card_memory_mib, dict(a100.profiles)) == (
        81920,
        {"1g.10gb": 9728, "3g.40gb": 40192},
    )


def test_the_catalogs_go_to_the_namespace_the_hook_runs_in() -> None:
    """Installed by Helm into another namespace, the webhook Pods mount the catalogs there."""
    assert {c["metadata"]["namespace"] for c in sync(request(SINGLETON, []))["attachments"]} == {
        "gpustack-system"
    }
    answer = sync_parsed(parse_shallow(request(SINGLETON, [A100_TYPE])), "infra")
    assert {c["metadata"]["namespace"] for c in answer["attachments"]} == {"infra"}


def test_a_malformed_type_is_left_to_the_reader_and_does_not_block_the_others() -> None:
    broken = copy.deepcopy(T4_TYPE)
    broken["status"]["detail"]["memory"] = "lots"
    answer = sync(request(SINGLETON, [A100_TYPE, broken]))
    read = parse_catalog(load_document(_catalog_text(answer)))
    assert list(read.pools) == [A100_TYPE["metadata"]["labels"][ENTRANCE]]


def test_the_catalog_changes_only_with_the_pools_facts() -> None:
    busy = copy.deepcopy(T4_TYPE)
    busy["status"]["accelerator"] = {"onceMaxRequest": "0", "remaining": "0", "capacity": "4"}
    busy["metadata"]["resourceVersion"] = "99999"
    before = sync(request(SINGLETON, [A100_TYPE, T4_TYPE]))
    assert sync(request(SINGLETON, [busy, A100_TYPE])) == before


def _pool(number: int, profiles: int) -> Obj:
    """A CPU-aware card pool as served (long names, full views), `profiles` partition sizes."""
    name = f"gpustack--amd-epyc-9654-{number:04d}--nvidia-h100-80gb-hbm3-linux-amd64"
    pool = copy.deepcopy(A100_TYPE)
    pool["metadata"]["name"] = name
    pool["metadata"]["labels"][ENTRANCE] = local_queue_name(name)
    pool["spec"]["acceleratorGroup"] = "nvidia-h100-80gb-hbm3"
    physical = pool["status"]["detail"]["slicedDetail"]["physical"]
    physical["profiles"] = [
        {"name": f"{k}g.{10 * k}gb", "count": 7 // k, "memoryMib": 9856 * k}
        for k in range(1, profiles + 1)
    ]
    return pool


def _annotation_bytes(answer: Obj) -> int:
    """Measured the way Metacontroller stores the desired ConfigMap (Go's json.Marshal)."""
    configmap, _instances, _kvcache = answer["attachments"]
    return len(json.dumps(configmap, separators=(",", ":")).encode())


def test_five_hundred_pools_fit_what_kubernetes_stores() -> None:
    """500 card pools with long CPU-aware names: the file is far under a ConfigMap's 1 MiB, and
    Metacontroller's copy of it (an annotation, 256 KiB for all of them) still fits."""
    answer = sync(request(SINGLETON, [_pool(i, profiles=0) for i in range(500)]))
    text = _catalog_text(answer)
    assert len(text.encode()) < 256 * 1024
    assert _annotation_bytes(answer) < CATALOG_BUDGET
    assert len(parse_catalog(load_document(text)).pools) == 500


def test_a_catalog_beyond_the_budget_is_a_500_and_the_last_one_stays(client: FlaskClient) -> None:
    """500 pools with 7 partition profiles each do not fit: the hook answers 500 (never a 200
    without attachments, which would delete the ConfigMap), saying how large it is."""
    body = request(SINGLETON, [_pool(i, profiles=7) for i in range(500)])
    reply = client.post("/catalog/sync", json=body)
    assert reply.status_code == 500
    answer = reply.get_json()
    assert "attachments" not in answer
    assert "the catalog of 500 InstanceTypes takes" in answer["error"]


def test_the_instance_catalog_of_five_hundred_pools_fits_too() -> None:
    """Each InstanceType's row of the instance catalog (its own ConfigMap, so its own budget)
    for 500 long-named card pools of 7 partition profiles each, read back whole."""
    pools = [_pool(i, profiles=7) for i in range(500)]
    text = render_catalog(instance_catalog(pools))
    configmap = catalog_configmap(text, INSTANCE_CATALOG_CONFIGMAP, INSTANCE_CATALOG_KEY)
    assert annotation_bytes(configmap) < CATALOG_BUDGET
    types = parse_instance_catalog(json.loads(text))
    assert len(types) == 500
    first = types[pools[0]["metadata"]["name"]]
    assert first.group == "nvidia-h100-80gb-hbm3" and len(first.profiles) == 7
