"""Instances on the testbed, driven by the real Metacontroller through the shipped
CompositeController: the Instance webhooks default what it leaves out from its InstanceType's
unit spec and refuse what its pool cannot serve (reading the instance catalog the decorator
writes); an Instance becomes one Pod labelled for its pool's LocalQueue and asking for its cards
in the shape the Pod webhook takes (the webhook admits it on the way); `kubectl get instances`
shows its type, accelerator and phase; its conditions say why it waits (`kubectl wait`);
`spec.stop` deletes the Pod and clearing it makes it again; its pool set to HoldAndDrain stops
it (running-instance stop)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from chain.names import local_queue_name
from kubeapi import KubeError, wait_for
from testbed.drivers import running_lifecycle_keeper
from testbed.harness import Testbed
from testbed.install import MANIFESTS, Installed
from testbed.instances import create_instance, instance
from testbed.kubectl import condition_of, kubectl, wait_condition
from tests.e2e.conftest import scratch_namespace
from tests.e2e.test_instancetypes import instance_type

WORKER = "worker.gpustack.ai/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def pool(testbed: Testbed, chain: Installed) -> Iterator[tuple[str, str]]:
    """An InstanceType of its own (its pool's queue made by the chain) and a namespace."""
    kube = testbed.kube
    name = f"gpustack--e2e-inst-{uuid.uuid4().hex[:6]}"
    kube.create(instance_type(name, acceleratorGroup="nvidia-tesla-t4"))
    try:
        with scratch_namespace(testbed, "inst") as namespace:
            yield name, namespace
    finally:
        kube.delete(WORKER, "InstanceType", name)


def _instance(name: str, type_name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """No kubelet here: the image never runs."""
    resources = spec.pop("resources", {"accelerator": "1", "cpu": "1", "ram": "1Gi"})
    return instance(
        name, namespace, type_name, "busybox", "sleep 3600", resources=resources, **spec
    )


def test_the_webhooks_default_and_refuse_what_the_pool_cannot_serve(
    testbed: Testbed, pool: tuple[str, str]
) -> None:
    type_name, namespace = pool
    plain = _instance("defaults", type_name, namespace, resources={"accelerator": "2"})
    created = create_instance(testbed.kube, plain)
    assert created["spec"]["resources"] == {
        "accelerator": "2",
        "cpu": "16",  # the unit's 8 cores x 2 cards
        "ram": "64Gi",
        "localStorage": "100Gi",
    }
    greedy = _instance(
        "greedy", type_name, namespace, resources={"accelerator": "1", "ram": "64Gi"}
    )
    with pytest.raises(KubeError) as refused:
        testbed.kube.create(greedy)
    assert 'spec.resources.ram: "64Gi" exceeds 32Gi' in refused.value.message


def test_an_instance_runs_as_one_pod_and_stops_and_starts(
    testbed: Testbed, pool: tuple[str, str]
) -> None:
    kube = testbed.kube
    type_name, namespace = pool
    create_instance(testbed.kube, _instance("lab", type_name, namespace))
    pod = wait_for(lambda: kube.get("v1", "Pod", "lab", namespace), 60, "the Instance's Pod")
    labels = pod["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == local_queue_name(type_name)
    assert labels["worker.gpustack.ai/instance"] == "lab"
    (main,) = pod["spec"]["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner.get("controller")) == ("Instance", "lab", True)

    def phase() -> str | None:
        found = kube.get(WORKER, "Instance", "lab", namespace) or {}
        return (found.get("status") or {}).get("phase")

    wait_for(lambda: phase() == "Pending" or None, 60, "the Instance's status")
    table = kubectl(testbed, "get", "instances", "-n", namespace, "--no-headers")
    assert table.split()[:4] == ["lab", type_name, "1", "Pending"]

    # Its pool has no node: the InstanceType says it can host nothing (`kubectl wait`, as a
    # user waits); the Instance's Pod is not held by Kueue here (the testbed's Kueue manages
    # Jobs only) but no scheduler runs, so it is Admitted and not Ready, saying why.
    wait_condition(testbed, f"instancetype/{type_name}", "Ready=false")

    def pool_says(type_: str) -> str:
        return str(condition_of(kube.get(WORKER, "InstanceType", type_name), type_).get("reason"))

    # Pending until Kueue reports on the queue, then what the pool lacks.
    wait_for(lambda: pool_says("Ready") == "NoCapacity" or None, 60, "Ready=False NoCapacity")
    assert pool_says("Available") == "NoCapacity"
    wait_condition(testbed, "instance/lab", "Admitted", namespace)
    wait_condition(testbed, "instance/lab", "Ready=false", namespace)
    found = kube.get(WORKER, "Instance", "lab", namespace)
    ready = condition_of(found, "Ready")
    assert (ready["reason"], ready["message"]) == (
        "WaitingForNode",
        "its Pod waits for the scheduler",
    )
    assert ready["observedGeneration"] == (found or {})["metadata"]["generation"]

    kube.merge_patch(WORKER, "Instance", "lab", {"spec": {"stop": True}}, namespace)
    wait_for(lambda: kube.get("v1", "Pod", "lab", namespace) is None, 60, "the Pod to go")
    wait_for(lambda: phase() == "Stopped" or None, 60, "the Instance to say Stopped")
    stopped = condition_of(kube.get(WORKER, "Instance", "lab", namespace), "Ready")
    assert (stopped["reason"], stopped["message"]) == ("Stopped", "stopped (spec.stop)")
    assert stopped["lastTransitionTime"] == ready["lastTransitionTime"]  # False all along
    table = kubectl(testbed, "get", "instances", "-n", namespace, "--no-headers")
    assert table.split()[:5] == ["lab", type_name, "1", "Stopped", "False"]  # READY (no NODE)
    kube.merge_patch(WORKER, "Instance", "lab", {"spec": {"stop": None}}, namespace)
    wait_for(lambda: kube.get("v1", "Pod", "lab", namespace), 60, "the Pod to come back")


def test_a_draining_pool_stops_its_instances(testbed: Testbed, pool: tuple[str, str]) -> None:
    """Running-instance stop: the hook takes the Pod away at once, and the lifecycle keeper (as
    the verdict driver runs it, under its ServiceAccount) writes `spec.stop`, so the Instance
    stays stopped once the pool opens again."""
    kube = testbed.kube
    type_name, namespace = pool
    create_instance(testbed.kube, _instance("job", type_name, namespace))
    wait_for(lambda: kube.get("v1", "Pod", "job", namespace), 60, "the Instance's Pod")
    wait_for(lambda: kube.get(KUEUE, "ClusterQueue", type_name), 60, "the pool's ClusterQueue")

    def instance_spec() -> dict[str, Any]:
        return dict((kube.get(WORKER, "Instance", "job", namespace) or {}).get("spec") or {})

    with running_lifecycle_keeper(testbed):
        patch = {"spec": {"stopPolicy": "HoldAndDrain"}}
        kube.merge_patch(KUEUE, "ClusterQueue", type_name, patch)
        wait_for(lambda: kube.get("v1", "Pod", "job", namespace) is None, 90, "the Pod to go")
        wait_for(lambda: instance_spec().get("stop") is True, 60, "spec.stop from the keeper")
    found = kube.get(WORKER, "Instance", "job", namespace) or {}
    assert found["status"]["phase"] == "Stopped"
    assert "is draining" in found["status"]["message"]


def _explained_fields(text: str) -> dict[str, str]:
    """`kubectl explain`'s FIELDS section: each field's description, its wrapping undone."""
    fields: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.partition("\nFIELDS:\n")[2].splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            current = fields.setdefault(line.split()[0], [])
        elif line.strip():
            current.append(line.strip())
    return {name: " ".join(words) for name, words in fields.items()}


def test_kubectl_explain_teaches_every_spec_field(testbed: Testbed, chain: Installed) -> None:
    """`kubectl explain instance.spec` prints the CRD's description of every spec field, as the
    API server publishes them in its OpenAPI (#34)."""
    (crd,) = [
        doc
        for doc in yaml.safe_load_all((MANIFESTS / "crds" / "instances.yaml").read_text())
        if doc and doc["kind"] == "CustomResourceDefinition"
    ]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    explained = _explained_fields(kubectl(testbed, "explain", "instance.spec"))
    assert explained == {
        name: " ".join(field["description"].split()) for name, field in spec["properties"].items()
    }
