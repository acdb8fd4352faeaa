"""The Instance webhooks: every refusal the seed lists, with the message a user acts on, the
defaults from the InstanceType's unit spec, the deletion guard, and a type not known yet."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from chain.instances import InstanceFacts, parse_instance_catalog
from hooks.admission.app import create_app
from hooks.admission.pool_catalog import Catalog
from tests.unit.hooks.admission.helpers import TABLE, post, review

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A100 = "gpustack--nvidia-a100-sxm4-80gb-linux-amd64"
AMD = "gpustack--amd-instinct-mi300x-linux-amd64"
CPU = "gpustack--generic-linux-amd64"
TYPES = parse_instance_catalog(
    {
        "types": {
            T4: ["nvidia-tesla-t4", "8", "32Gi", "100Gi", 4, "64", 512, [], True],
            A100: ["nvidia-a100-sxm4-80gb", "16", "128Gi", "1Ti", 8, "256", 0, ["1g.10gb"], True],
            AMD: ["amd-instinct-mi300x", "16", "128Gi", "1Ti", 8, "256", 128, [], True],
            CPU: ["", "1", "2Gi", "100Gi", 0, "96", 0, [], True],
        }
    }
)


def web() -> Any:
    return create_app(lambda: Catalog(), TABLE, types=lambda: TYPES).test_client()


def instance(type_name: str = T4, **resources: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "lab", "namespace": "team-a"},
        "spec": {"instanceType": type_name, "image": "x", "resources": resources},
    }


def validated(obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    body = review(obj, operation, old or obj, "instances")
    status, answer = post(web(), "/validate-instances", body)
    assert status == 200, answer
    response: dict[str, Any] = answer["response"]
    return response


def refusal(obj: Any) -> str:
    response = validated(obj)
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


def test_whole_cards_a_slice_and_a_partition_within_the_pool_are_admitted() -> None:
    assert validated(instance(accelerator="4", ram="128Gi", localStorage="100Gi"))["allowed"]
    slice_ = instance(accelerator="1", acceleratorSlicedMemoryPercentage=40)
    assert validated(slice_)["allowed"]
    partition = instance(A100, accelerator="1", acceleratorPartitionedProfile="1g.10gb")
    assert validated(partition)["allowed"]
    assert validated(instance(CPU, cpu="96", ram="2Gi"))["allowed"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            instance(A100, accelerator="1", acceleratorPartitionedProfile="3g.40gb"),
            'spec.resources.acceleratorPartitionedProfile: "3g.40gb" is not offered by '
            f'InstanceType "{A100}" (offered: 1g.10gb)',
        ),
        (
            instance(AMD, accelerator="1", acceleratorPartitionedProfile="1g.10gb"),
            f'spec.resources.acceleratorPartitionedProfile: the cards of InstanceType "{AMD}" '
            "cannot be partitioned; ask for whole cards or a slice",
        ),
        (
            instance(
                A100,
                accelerator="1",
                acceleratorPartitionedProfile="1g.10gb",
                acceleratorSlicedMemoryPercentage=20,
            ),
            "spec.resources: a hardware partition and a logical slice percentage are mutually "
            "exclusive; keep acceleratorPartitionedProfile or acceleratorSlicedMemoryPercentage",
        ),
        (
            instance(accelerator="2", acceleratorSlicedMemoryPercentage=20),
            'spec.resources.accelerator: "2": a slice or a partition is exactly one card; set '
            'accelerator "1"',
        ),
        (
            instance(accelerator="5"),
            f'spec.resources.accelerator: "5" exceeds the 4 cards of the pool of InstanceType '
            f'"{T4}"',
        ),
        (
            instance(A100, accelerator="1", acceleratorSlicedMemoryPercentage=20),
            f"spec.resources.acceleratorSlicedMemoryPercentage: the pool of InstanceType "
            f'"{A100}" offers no logical slices; ask for whole cards or a partition',
        ),
        (
            instance(accelerator="2", ram="65Gi"),
            f'spec.resources.ram: "65Gi" exceeds 64Gi (the unit RAM 32Gi of InstanceType '
            f'"{T4}" x 2)',
        ),
        (
            instance(accelerator="1", localStorage="200Gi"),
            f'spec.resources.localStorage: "200Gi" exceeds the 100Gi of InstanceType "{T4}"',
        ),
        (
            instance(CPU, cpu="97"),
            f'spec.resources.cpu: "97" exceeds the 96 cores of the pool of InstanceType "{CPU}" '
            "(its capacity, not what is free now)",
        ),
        (
            instance(CPU, accelerator="1"),
            f'spec.resources: the InstanceType "{CPU}" serves no accelerator; ask for CPU and '
            "RAM only, or pick an accelerated InstanceType",
        ),
    ],
    ids=[
        "profile-not-offered",
        "profile-on-unpartitionable-cards",
        "profile-and-slice",
        "slice-of-two-cards",
        "cards-beyond-the-pool",
        "slice-without-logical-slicing",
        "ram-beyond-units",
        "storage-beyond-the-type",
        "cpu-beyond-capacity",
        "cards-of-a-cpu-pool",
    ],
)
def test_each_refusal_says_what_to_change(obj: Any, message: str) -> None:
    assert refusal(obj).startswith(message)  # first: a request may break more than one rule


def test_an_unknown_type_is_a_refusal_that_goes_away() -> None:
    response = validated(instance("gpustack--nowhere-linux-amd64", accelerator="1"))
    assert response["status"]["code"] == 503
    assert "is not known to the webhook yet" in response["status"]["message"]


def test_the_deletion_guard_skips_an_update_while_deleting() -> None:
    deleting = instance(accelerator="99")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-02T09:00:00Z"
    assert validated(deleting, "UPDATE", instance(accelerator="1"))["allowed"]
    assert (
        validated(instance(accelerator="99"), "UPDATE", instance(accelerator="1"))["allowed"]
        is False
    )


def test_an_update_leaving_type_and_resources_alone_needs_no_facts() -> None:
    """A stop on a replica whose catalog does not show the type yet, or of an Instance its pool
    could no longer admit: allowed, nothing to check."""
    unknown = instance("gpustack--nowhere-linux-amd64", accelerator="1")
    stopped = instance("gpustack--nowhere-linux-amd64", accelerator="1")
    stopped["spec"]["stop"] = True
    assert validated(stopped, "UPDATE", unknown)["allowed"]
    beyond = instance(accelerator="99")
    assert validated({**beyond, "spec": {**beyond["spec"], "stop": True}}, "UPDATE", beyond)[
        "allowed"
    ]
    # A changed request is checked again, against the type it now names.
    moved = instance("gpustack--nowhere-linux-amd64", accelerator="1")
    assert validated(moved, "UPDATE", instance(accelerator="1"))["status"]["code"] == 503


def test_defaults_come_from_the_unit_spec_times_the_cards() -> None:
    obj = instance(accelerator="2")
    status, answer = post(web(), "/mutate-instances", review(obj, "CREATE", None, "instances"))
    assert status == 200
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert patch == [
        {"op": "add", "path": "/spec/resources/cpu", "value": "16"},
        {"op": "add", "path": "/spec/resources/localStorage", "value": "100Gi"},
        {"op": "add", "path": "/spec/resources/ram", "value": "64Gi"},
    ]
    complete = instance(accelerator="1", cpu="2", ram="8Gi", localStorage="10Gi")
    status, answer = post(web(), "/mutate-instances", review(complete, "CREATE", None, "instances"))
    assert "patch" not in answer["response"]


def test_the_catalog_row_round_trips() -> None:
    facts = TYPES[T4]
    assert InstanceFacts.from_row(T4, facts.row()) == facts
    assert (facts.manufacturer, facts.acceleratable) == ("nvidia", True)
    assert not TYPES[CPU].acceleratable
