"""Smoke tests: each real component of the testbed works with us."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kubeapi import Kube, Obj, wait_for
from testbed.harness import Testbed
from testbed.nodes import node_object, register_node
from testbed.workloads import condition, now, release_quota

KUEUE = "kueue.x-k8s.io/v1beta2"
CHECK_MANAGER = "gpustack-smoke-check"


@pytest.fixture
def namespace(testbed: Testbed) -> Iterator[str]:
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    testbed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    testbed.kube.delete("v1", "Namespace", name)


# -- Metacontroller -------------------------------------------------------------------------


def test_metacontroller_decorator_calls_gunicorn_hook(testbed: Testbed, namespace: str) -> None:
    kube = testbed.kube
    url = testbed.serve("echo-hook", "tests.e2e.apps.echo_hook:app")
    controller = {
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": f"echo-{namespace}"},
        "spec": {
            "resources": [
                {
                    "apiVersion": "v1",
                    "resource": "configmaps",
                    "labelSelector": {"matchLabels": {"smoke.gpustack.ai/ns": namespace}},
                }
            ],
            "attachments": [
                {
                    "apiVersion": "v1",
                    "resource": "configmaps",
                    "updateStrategy": {"method": "InPlace"},
                }
            ],
            "hooks": {"sync": {"version": "v2", "webhook": {"url": f"{url}/sync"}}},
            "resyncPeriodSeconds": 5,
        },
    }
    kube.apply(controller)
    try:
        parent: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "parent",
                "namespace": namespace,
                "labels": {"smoke.gpustack.ai/ns": namespace},
            },
            "data": {"say": "hello"},
        }
        kube.apply(parent)
        echo = wait_for(
            lambda: kube.get("v1", "ConfigMap", "parent-echo", namespace),
            60,
            "the hook's attachment to appear",
        )
        assert echo["data"] == {"echo": "hello"}
        owners = echo["metadata"].get("ownerReferences", [])
        assert [o["name"] for o in owners] == ["parent"], owners
        decorated = kube.get("v1", "ConfigMap", "parent", namespace)
        assert decorated is not None
        assert decorated["metadata"]["labels"]["smoke.gpustack.ai/decorated"] == "true"

        # The hook stops returning the attachment: Metacontroller must delete it.
        parent["metadata"]["annotations"] = {"smoke.gpustack.ai/stop": "true"}
        kube.apply(parent)
        wait_for(
            lambda: kube.get("v1", "ConfigMap", "parent-echo", namespace) is None,
            60,
            "the attachment to be deleted",
        )
    finally:
        kube.delete("metacontroller.k8s.io/v1alpha1", "DecoratorController", f"echo-{namespace}")
        testbed.stop("echo-hook")


# -- Kueue ----------------------------------------------------------------------------------


def _check_state(wl: Obj | None, check: str) -> str | None:
    for entry in (wl or {}).get("status", {}).get("admissionChecks", []):
        if entry["name"] == check:
            return str(entry["state"])
    return None


def _write_check(kube: Kube, wl: Obj, check: str, state: str, message: str) -> None:
    """Apply only our own entry of status.admissionChecks, as an external controller does."""
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {
                "name": wl["metadata"]["name"],
                "namespace": wl["metadata"]["namespace"],
                "resourceVersion": wl["metadata"]["resourceVersion"],
            },
            "status": {
                "admissionChecks": [
                    {
                        "name": check,
                        "state": state,
                        "message": message,
                        "lastTransitionTime": now(),
                    }
                ]
            },
        },
        manager=CHECK_MANAGER,
        subresource="status",
    )


def test_kueue_admission_check_retry_then_ready(testbed: Testbed, namespace: str) -> None:
    kube = testbed.kube
    tag = namespace
    check = f"check-{tag}"
    kube.apply({"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": f"rf-{tag}"}})
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": "gpustack.ai/smoke"},
        }
    )
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Active",
                        "message": "smoke check is active",
                        "lastTransitionTime": now(),
                    }
                ]
            },
        },
        manager=CHECK_MANAGER,
        subresource="status",
    )
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{tag}"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {
                                "name": f"rf-{tag}",
                                "resources": [{"name": "cpu", "nominalQuota": "4"}],
                            }
                        ],
                    }
                ],
                "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
            },
        }
    )
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{tag}"},
        }
    )
    wait_for(
        lambda: condition(kube.get(KUEUE, "ClusterQueue", f"cq-{tag}"), "Active") == "True",
        60,
        "the ClusterQueue to become Active",
    )
    wait_for(
        lambda: condition(kube.get(KUEUE, "LocalQueue", "lq", namespace), "Active") == "True",
        60,
        "the LocalQueue to become Active",
    )

    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": namespace},
            "spec": {
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "busybox",
                                        "resources": {"requests": {"cpu": "2"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        }
    )

    def reserved_pending() -> Obj | None:
        wl = kube.get(KUEUE, "Workload", "wl", namespace)
        ok = condition(wl, "QuotaReserved") == "True" and _check_state(wl, check) == "Pending"
        return wl if ok else None

    wl = wait_for(reserved_pending, 60, "quota reserved with the check Pending")
    assert condition(wl, "Admitted") != "True"

    # Retry: Kueue evicts the Workload and resets the check. A bare Workload has no job to
    # suspend, so the test plays the job owner and releases the quota, as Kueue's own
    # performance runner does.
    _write_check(kube, wl, check, "Retry", "smoke: no card fits yet")
    wait_for(
        lambda: (
            (w := kube.get(KUEUE, "Workload", "wl", namespace))
            and condition(w, "Evicted") == "True"
            and w
        ),
        60,
        "the Workload to be evicted after Retry",
    )
    release_quota(kube, namespace, "wl", manager="gpustack-smoke-owner")

    # Requeued: quota is reserved again and the check is Pending again.
    def requeued() -> Obj | None:
        w = kube.get(KUEUE, "Workload", "wl", namespace)
        if not w or condition(w, "QuotaReserved") != "True" or _check_state(w, check) != "Pending":
            return None
        return w if condition(w, "Evicted") != "True" else None

    wl = wait_for(requeued, 90, "the Workload to be requeued with quota reserved again")
    retries = [e for e in wl["status"]["admissionChecks"] if e["name"] == check]
    assert retries[0].get("retryCount", 0) >= 1, retries

    _write_check(kube, wl, check, "Ready", "smoke: card found")
    admitted = wait_for(
        lambda: (
            (w := kube.get(KUEUE, "Workload", "wl", namespace))
            and condition(w, "Admitted") == "True"
            and w
        ),
        60,
        "the Workload to become Admitted after Ready",
    )
    assert admitted["status"]["admission"]["clusterQueue"] == f"cq-{tag}"

    kube.delete(KUEUE, "Workload", "wl", namespace)
    kube.delete(KUEUE, "LocalQueue", "lq", namespace)
    kube.delete(KUEUE, "ClusterQueue", f"cq-{tag}")
    kube.delete(KUEUE, "AdmissionCheck", check)
    kube.delete(KUEUE, "ResourceFlavor", f"rf-{tag}")


# -- NFD ------------------------------------------------------------------------------------


def test_nfd_master_labels_node_from_nodefeature(testbed: Testbed) -> None:
    kube = testbed.kube
    node = f"smoke-node-{uuid.uuid4().hex[:6]}"
    register_node(kube, node_object(node))
    try:
        kube.apply(
            {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeature",
                "metadata": {
                    "name": f"{node}-smoke",
                    "namespace": "node-feature-discovery",
                    "labels": {"nfd.node.kubernetes.io/node-name": node},
                },
                "spec": {"labels": {"feature.node.kubernetes.io/smoke-test": "yes"}},
            }
        )

        def labelled() -> bool:
            n = kube.get("v1", "Node", node)
            labels = (n or {}).get("metadata", {}).get("labels", {})
            return labels.get("feature.node.kubernetes.io/smoke-test") == "yes"

        wait_for(labelled, 60, "NFD master to label the Node")
    finally:
        kube.delete(
            "nfd.k8s-sigs.io/v1alpha1", "NodeFeature", f"{node}-smoke", "node-feature-discovery"
        )
        kube.delete("v1", "Node", node)
