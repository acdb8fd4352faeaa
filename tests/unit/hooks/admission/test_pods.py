"""`POST /mutate-pods`: docs/design/vectors.md, "Pod webhook fold" and the shared card-count pin,
end to end."""

from __future__ import annotations

from typing import Any

import pytest

from chain.labels import RDMA_CAPABLE
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

SL = GPU + ".sliced"
UNITS = SL + ".units"
PCT = SL + ".memory-percentage"
MIB = SL + ".memory-mib"
CORES = SL + ".cores-percentage"
PT = GPU + ".partitioned"


def pod(*limits: dict[str, str], affinity: Any = None, init: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": f"c{i}",
                "image": "x",
                "resources": {"limits": dict(lim), "requests": dict(lim)},
            }
            for i, lim in enumerate(limits)
        ]
    }
    if affinity is not None:
        spec["affinity"] = affinity
    if init is not None:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
        },
        "spec": spec,
    }


def mutate(obj: Any, source: Catalog = CATALOG, operation: str = "CREATE") -> dict[str, Any]:
    status, answer = post(client(source), "/mutate-pods", review(obj, operation))
    assert status == 200, answer
    response: dict[str, Any] = answer["response"]
    assert response["uid"] == "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    return response


def resources(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True, response
    out: dict[str, Any] = patched(obj, response)["spec"]["containers"][0]["resources"]
    assert out["requests"] == out["limits"]
    return dict(out["limits"])


def denial(obj: Any, source: Catalog = CATALOG) -> tuple[int, str]:
    response = mutate(obj, source)
    assert response["allowed"] is False, response
    return response["status"]["code"], response["status"]["message"]


def test_memory_percentage_folds_and_cores_default() -> None:
    obj = pod({SL: "1", PCT: "20"})
    assert resources(obj, mutate(obj)) == {SL: "1", PCT: "20", UNITS: "320000", CORES: "100"}


def test_memory_mib_folds_over_the_catalog_card() -> None:
    obj = pod({SL: "1", MIB: "4096"})
    assert resources(obj, mutate(obj))[UNITS] == "160000"


def test_explicit_cores_kept() -> None:
    obj = pod({SL: "1", PCT: "20", CORES: "50"})
    assert resources(obj, mutate(obj))[CORES] == "50"


def test_a_percentage_slice_needs_no_catalog() -> None:
    obj = pod({SL: "1", PCT: "20"})
    assert resources(obj, mutate(obj, Catalog()))[UNITS] == "320000"


def test_partition_of_96_gib_on_a_96_gib_card() -> None:
    source = catalog(instance_type(memory="96Gi", profiles={"7g.96gb": 98304}))
    obj = pod({PT: "1", PT + ".mig-7g.96gb": "1"})
    assert resources(obj, mutate(obj, source))[PT + ".units"] == "1600000"


def test_whole_cards_pass_unchanged() -> None:
    response = mutate(pod({GPU: "2"}))
    assert response == {"uid": response["uid"], "allowed": True}


def test_memory_mib_without_card_memory_is_refused_for_now() -> None:
    code, message = denial(pod({SL: "1", MIB: "4096"}), Catalog())
    assert code == 503
    assert f'no InstanceType fronts the queue "{QUEUE}"' in message
    assert message.endswith(f"retry shortly, or ask for {PCT} instead")
    code, message = denial(pod({SL: "1", MIB: "4096"}), catalog(instance_type(memory=None)))
    assert code == 503 and "has not reported its card memory" in message


@pytest.mark.parametrize(
    ("limits", "text"),
    [
        ({SL: "1", PCT: "200"}, 'Invalid value: "200": must be greater than 0 and at most 100'),
        ({SL: "1", MIB: "81920"}, 'Invalid value: "81920": exceeds the 40960 MiB of one card'),
        ({SL: "1"}, f"Required value: a {SL} request must set {PCT} or {MIB}"),
        ({SL: "1", UNITS: "320000"}, f"Required value: a {SL} request must set"),
        ({UNITS: "320000", PCT: "10"}, f"Required value: a sliced request must set {SL}"),
        ({SL: "1", PCT: "20", MIB: "10"}, f"Forbidden: cannot set both {PCT} and {MIB}"),
        ({SL: "1", PCT: "0"}, 'Invalid value: "0": must be greater than 0'),
        ({GPU: "1", GPU + ".shared": "1"}, "may request only one accelerator family"),
        ({PT: "1", PT + ".mig-9g.99gb": "1"}, 'partition profile "9g.99gb" is not offered'),
    ],
)
def test_refused_with_a_message(limits: dict[str, str], text: str) -> None:
    code, message = denial(pod(limits))
    assert code == 422
    assert text in message, message


def test_all_problems_are_listed() -> None:
    _, message = denial(pod({SL: "2"}))
    assert message.count("spec.containers[0].resources.limits") == 2


# --- the shared card-count pin ------------------------------------------------------------------

COUNT = "acceleratable.feature.gpustack.ai/nvidia-t4.count"


def pin(value: int) -> dict[str, Any]:
    return {"key": COUNT, "operator": "Gt", "values": [str(value)]}


def affinity_of(obj: dict[str, Any], source: Catalog = CATALOG) -> Any:
    response = mutate(obj, source)
    assert response["allowed"] is True, response
    return patched(obj, response)["spec"].get("affinity")


def test_shared_two_pins_to_nodes_with_two_cards() -> None:
    assert affinity_of(pod({GPU + ".shared": "2"})) == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [pin(1)]}]
            }
        }
    }


def test_shared_pin_takes_the_largest_container() -> None:
    obj = pod({GPU + ".shared": "2"}, {GPU + ".shared": "3"})
    terms = affinity_of(obj)["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchExpressions": [pin(2)]}]}


def test_shared_pin_joins_existing_terms() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    host = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchFields": [host]}, {}]}
    existing = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    found = affinity_of(pod({GPU + ".shared": "2"}, affinity=existing))
    assert found["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [zone, pin(1)]},
            {"matchFields": [host], "matchExpressions": [pin(1)]},
            {},
        ]
    }
    again = pod({GPU + ".shared": "2"}, affinity=found)
    assert mutate(again) == {"uid": mutate(again)["uid"], "allowed": True}


def test_a_tenants_rdma_request_is_kept_when_the_pod_is_pinned() -> None:
    """docs/topology.md, "Asking for RDMA": the node selector is the tenant's and stays as
    written; a required RDMA expression is ANDed with the pin, never replaced."""
    rdma = {"key": RDMA_CAPABLE, "operator": "In", "values": ["true"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [rdma]}]}
    obj = pod(
        {GPU + ".shared": "2"},
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}},
    )
    obj["spec"]["nodeSelector"] = {RDMA_CAPABLE: "true"}
    response = mutate(obj)
    assert response["allowed"] is True, response
    spec = patched(obj, response)["spec"]
    assert spec["nodeSelector"] == {RDMA_CAPABLE: "true"}
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [rdma, pin(1)]}]
    }


def test_shared_one_is_not_pinned() -> None:
    assert affinity_of(pod({GPU + ".shared": "1"})) is None


def test_shared_pin_without_a_pool_is_refused() -> None:
    code, message = denial(pod({GPU + ".shared": "2"}), Catalog())
    assert code == 503
    assert message.startswith(
        "spec: Internal error: a shared request of 2 cards must be pinned to nodes with at "
        "least 2 cards"
    )
    code, message = denial(pod({GPU + ".shared": "2"}), catalog(instance_type(group="")))
    assert "names no accelerator group" in message


# --- envelope -----------------------------------------------------------------------------------


def test_only_create_is_judged() -> None:
    response = mutate(pod({SL: "5"}), operation="UPDATE")
    assert response["allowed"] is True and "patch" not in response


def test_a_body_that_is_no_review_is_a_400_naming_the_field() -> None:
    status, answer = post(client(), "/mutate-pods", {"kind": "AdmissionReview"})
    assert status == 400 and answer["field"] == "$", answer


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (pod({GPU: "1"}) | {"spec": {"containers": "x"}}, "spec.containers: expected a list"),
        (
            pod({GPU: "1"}) | {"spec": {"containers": [{"resources": {"limits": {GPU: "x"}}}]}},
            'spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "x"',
        ),
    ],
)
def test_unreadable_reviews_are_denied_naming_the_field(obj: Any, field: str) -> None:
    """A review is answered as one whatever its object holds: a 4xx would reach the user as
    the API server's "failed calling webhook", without the field."""
    status, answer = post(client(), "/mutate-pods", review(obj))
    assert status == 200, answer
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(field), answer


def job(*limits: dict[str, str]) -> dict[str, Any]:
    """A batch/v1 Job entering the pool's queue, its template shaped like `pod(...)`'s spec."""
    template = pod(*limits)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "team-a", "labels": template["metadata"]["labels"]},
        "spec": {"template": {"spec": template["spec"]}},
    }


def mutate_job(obj: Any) -> dict[str, Any]:
    status, answer = post(client(CATALOG), "/mutate-jobs", review(obj, "CREATE"))
    assert status == 200, answer
    response: dict[str, Any] = answer["response"]
    return response


def test_a_jobs_template_is_folded_so_its_workload_carries_units() -> None:
    obj = job({SL: "1", PCT: "50"})
    response = mutate_job(obj)
    assert response["allowed"] is True, response
    template = patched(obj, response)["spec"]["template"]["spec"]
    limits = template["containers"][0]["resources"]["limits"]
    assert limits == {SL: "1", PCT: "50", UNITS: "800000", CORES: "100"}


def test_a_jobs_template_breaking_a_rule_is_denied_naming_the_template_field() -> None:
    response = mutate_job(job({SL: "2", PCT: "20"}))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "a logical slice request is always a single card" in message
    assert "spec.template.spec" in message


def test_a_job_without_a_template_is_denied_naming_the_field() -> None:
    body = review({"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": {}}, "CREATE")
    status, answer = post(client(CATALOG), "/mutate-jobs", body)
    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith("spec.template.spec: expected")


@pytest.mark.parametrize("key", [GPU, GPU + ".shared"])
def test_two_containers_may_each_hold_cards_of_one_resource(key: str) -> None:
    """The reading this project takes (docs/nodeagent.md, "Two containers of one Pod asking the same
    card resource"): the newer upstream allocator keys reservations on (Pod, container) and records
    each container in the annotation, "so two containers of one group each holding a live claim are
    both recorded and both charged"; the agent does so
    (tests/unit/nodeagent/plugin/test_restart.py). The older text that called the shape unsupported
    predates that."""
    assert mutate(pod({key: "1"}, {key: "1"}))["allowed"] is True
