"""The Pod webhook on the real API server, through the shipped webhook configuration.

The webhook learns each pool's card memory from the catalog ConfigMap the catalog decorator
writes; the testbed projects that ConfigMap into the served webhook's directory, as a kubelet
would mount it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from chain.catalog import ANNOTATIONS_HEADROOM, annotation_bytes, catalog_configmap
from chain.names import local_queue_name
from chain.requests import PoolFacts
from hooks.admission.pool_catalog import parse_catalog
from hooks.catalog_file import load_document
from kubeapi import Kube, KubeError, Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.nodes import node_object, register_node
from tests.e2e.conftest import scratch_namespace
from tests.e2e.test_pools import (
    NFD,
    NFD_NS,
    T4_POOL,
    _shape,
    device_manager_feature,
    forget_pool,
    nfd_worker_feature,
)

QUEUE = local_queue_name(T4_POOL)
CATALOG_FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "unit/hooks/instancetype/catalog_fixtures/catalog-three-pools.json"
)


def _pod(name: str, limits: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": limits, "requests": limits},
                }
            ]
        },
    }


@pytest.fixture
def namespace(testbed: Testbed, chain: Installed) -> Iterator[str]:
    with scratch_namespace(testbed, "pods") as name:
        yield name


def _decisions(testbed: Testbed, chain: Installed, rule: str) -> float:
    """The Pod webhook's own count of Pods it denied for `rule`, scraped from its /metrics."""
    base = chain.urls[("gpustack-system", "gpustack-webhook-admission")]
    text = requests.get(base + "/metrics", verify=str(testbed.certs.ca_crt), timeout=10).text
    wanted = (
        'gpustack_webhook_decisions_total{app="admission",decision="denied",'
        f'route="/mutate-pods",rule="{rule}"}} '
    )
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(wanted))


def test_slice_rules_deny_with_an_actionable_message(
    testbed: Testbed, chain: Installed, namespace: str
) -> None:
    kube = testbed.kube
    before = {rule: _decisions(testbed, chain, rule) for rule in ("slice-memory", "slice-card")}
    bad = _pod("no-memory", {"nvidia.com/gpu.sliced": "1"})
    bad["metadata"]["namespace"] = namespace
    with pytest.raises(KubeError) as denied:
        kube.create(bad)
    assert "memory-percentage" in denied.value.message and "memory-mib" in denied.value.message

    two = _pod(
        "two-cards", {"nvidia.com/gpu.sliced": "2", "nvidia.com/gpu.sliced.memory-percentage": "20"}
    )
    two["metadata"]["namespace"] = namespace
    with pytest.raises(KubeError) as denied:
        kube.create(two)
    assert "a logical slice request is always a single card" in denied.value.message
    # Each denial is counted under the rule that made it (the API server saw two HTTP 200s).
    after = {rule: _decisions(testbed, chain, rule) for rule in before}
    assert after == {rule: count + 1 for rule, count in before.items()}


def test_percentage_slice_is_folded_into_units(testbed: Testbed, namespace: str) -> None:
    kube = testbed.kube
    pod = _pod(
        "twenty-percent",
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"},
    )
    pod["metadata"]["namespace"] = namespace
    created = kube.create(pod)
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "320k"  # 20 % of 1,600,000, as Kubernetes
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"  # defaulted


CATALOG = "gpustack-admission-catalog"
NOT_KNOWN = "as far as the webhook knows"
NOT_REPORTED = "has not reported"


def _catalog_pool(kube: Kube) -> PoolFacts | None:
    """The T4 pool as the webhook will read it from the catalog ConfigMap."""
    cm = kube.get("v1", "ConfigMap", CATALOG, "gpustack-system")
    text = ((cm or {}).get("data") or {}).get("catalog.yaml")
    return parse_catalog(load_document(text)).pool(QUEUE) if text else None


def _projected_pool(chain: Installed) -> PoolFacts | None:
    """The T4 pool in the file the served Pod webhook reads (the testbed's projected volume;
    the InstanceType webhook mounts the same ConfigMap for the settings)."""
    (projection,) = (
        p
        for p in chain.projections
        if p.volume.configmap == CATALOG and "gpustack-webhook-admission" in str(p.directory)
    )
    path = projection.directory / "catalog.yaml"
    return parse_catalog(load_document(path.read_text())).pool(QUEUE) if path.exists() else None


def _create_or_none(kube: Kube, pod: Obj) -> Obj | None:
    """The created Pod; None while the webhook has yet to read the pool's card memory."""
    try:
        return kube.create(pod)
    except KubeError as err:
        if NOT_KNOWN not in err.message and NOT_REPORTED not in err.message:
            raise
        return None


def test_memory_slice_is_folded_once_the_pool_is_in_the_catalog(
    testbed: Testbed, chain: Installed, namespace: str
) -> None:
    kube = testbed.kube
    forget_pool(kube, T4_POOL)
    wait_for(lambda: _projected_pool(chain) is None, 60, "the webhook's catalog without T4")
    pod = _pod(
        "three-gib",
        {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "3072"},
    )
    pod["metadata"]["namespace"] = namespace
    # No pool, no card memory: refused, with a message saying the webhook does not know it.
    with pytest.raises(KubeError) as denied:
        kube.create(pod)
    assert NOT_KNOWN in denied.value.message

    node = f"catalog-{uuid.uuid4().hex[:6]}"
    register_node(kube, node_object(node, cpu="16"))
    kube.apply(nfd_worker_feature(node))
    kube.apply(device_manager_feature(node, 2))
    try:
        # The pool's derived InstanceType reports the T4's 15Gi; the decorator attaches the
        # catalog (a namespaced ConfigMap) to the cluster-scoped Settings singleton.
        facts = wait_for(
            lambda: p if (p := _catalog_pool(kube)) and p.card_memory_mib else None,
            120,
            "the T4 pool's card memory in the catalog",
        )
        assert (facts.instance_type, facts.card_memory_mib) == (T4_POOL, 15360)
        cm = kube.get("v1", "ConfigMap", CATALOG, "gpustack-system")
        assert cm is not None
        owner = cm["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Settings", "default")
        # With its three-way-merge apply (v1.5.20, and v4's default) Metacontroller keeps a copy
        # in an annotation (256 KiB for all of them): the hook's size measure is that copy's
        # size, less the annotations Metacontroller adds. Under v4's server-side apply there is
        # no copy, and the budget is only conservative: the catalog stays far under 1 MiB.
        measured = annotation_bytes(catalog_configmap(cm["data"]["catalog.yaml"]))
        annotations = cm["metadata"].get("annotations") or {}
        kept = annotations.get("metacontroller.k8s.io/last-applied-configuration")
        if kept is not None:
            assert json.loads(kept)["data"] == cm["data"]
            assert 0 <= len(kept.encode()) - measured < ANNOTATIONS_HEADROOM
        assert measured < 1024 * 1024
        # The catalog fixtures are shaped like what the real Metacontroller sent.
        captured = testbed.root / "captured" / "hook-gpustack-hook-instancetype"
        real = {
            json.dumps(_shape(json.loads(f.read_bytes())))
            for f in captured.glob("catalog-sync-*.json")
        }
        fixture = json.loads(CATALOG_FIXTURE.read_text())["request"]
        assert json.dumps(_shape(fixture)) in real, real

        # Admitted, folded: 3072 MiB of a 15360 MiB card is 20 % of 1,600,000 units.
        created = wait_for(
            lambda: _create_or_none(kube, pod),
            30,
            "the webhook to read the projected catalog",
        )
        limits = created["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu.sliced.units"] == "320k"
        assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"
    finally:
        kube.delete(NFD, "NodeFeature", node, NFD_NS)
        kube.delete(NFD, "NodeFeature", f"{node}-gpustack-device-manager", NFD_NS)
        kube.delete("v1", "Node", node)
        forget_pool(kube, T4_POOL, (node,))
