"""The tenant roles on the real API server (docs/security.md, "Tenant roles"): a ServiceAccount
bound only to the built-in `edit` in its namespace runs Instances there (the chain's roles
aggregate into it), reads the InstanceTypes once the platform team binds the reader role to its
group, and gets nothing on the chain's own kinds nor on another namespace's Instances."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import pytest

from chain.apis import SETTINGS_NAME
from kubeapi import Kube, KubeError, Obj, wait_for
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.instances import SMALL, create_instance, instance
from tests.e2e.conftest import scratch_namespace
from tests.e2e.test_instancetypes import instance_type

WORKER = "worker.gpustack.ai/v1alpha1"
CHAIN = "gpustack.ai/v1alpha1"
RBAC = "rbac.authorization.k8s.io/v1"
RBAC_GROUP = "rbac.authorization.k8s.io"
READER = "gpustack-chain-instancetype-reader"
TENANT = "tenant"


@dataclass
class Scene:
    admin: Kube
    tenant: Kube
    namespace: str
    other: str
    type_name: str


def _can(kube: Kube, verb: str, resource: str, namespace: str | None) -> bool:
    attributes = {"verb": verb, "group": "worker.gpustack.ai", "resource": resource}
    if namespace:
        attributes["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = kube.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review
    )
    return bool(answer["status"].get("allowed"))


@pytest.fixture
def scene(testbed: Testbed, chain: Installed) -> Iterator[Scene]:
    admin = testbed.kube
    tag = uuid.uuid4().hex[:6]
    type_name = f"gpustack--e2e-tenant-{tag}"
    binding = f"e2e-tenants-{tag}"
    admin.create(instance_type(type_name, acceleratorGroup="nvidia-tesla-t4"))
    try:
        with (
            scratch_namespace(testbed, "tenant") as namespace,
            scratch_namespace(testbed, "other") as other,
        ):
            admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": TENANT, "namespace": namespace},
                }
            )
            # What a namespace owner does: the built-in `edit`, in the namespace only.
            admin.create(
                {
                    "apiVersion": RBAC,
                    "kind": "RoleBinding",
                    "metadata": {"name": "tenant-edit", "namespace": namespace},
                    "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "edit"},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": TENANT, "namespace": namespace}
                    ],
                }
            )
            # What the platform team does (docs/security.md): the reader role, to a group.
            admin.create(
                {
                    "apiVersion": RBAC,
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": READER},
                    "subjects": [
                        {
                            "apiGroup": RBAC_GROUP,
                            "kind": "Group",
                            "name": f"system:serviceaccounts:{namespace}",
                        }
                    ],
                }
            )
            try:
                tenant = Kube.from_kubeconfig(testbed.service_account_kubeconfig(namespace, TENANT))
                # The aggregation controller folds the chain's roles into `edit` a moment later.
                wait_for(
                    lambda: _can(tenant, "create", "instances", namespace) or None,
                    60,
                    "the tenant roles to aggregate into edit",
                )
                yield Scene(admin, tenant, namespace, other, type_name)
            finally:
                admin.delete(RBAC, "ClusterRoleBinding", binding)
    finally:
        admin.delete(WORKER, "InstanceType", type_name)


def _refused(call: Callable[[], object]) -> None:
    with pytest.raises(KubeError) as refused:
        call()
    assert refused.value.status == 403, refused.value.message


def _lab(name: str, namespace: str, type_name: str) -> Obj:
    resources = {"accelerator": "1", **SMALL}
    return instance(name, namespace, type_name, "busybox", "sleep 3600", resources=resources)


def test_an_editor_runs_instances_and_sees_only_what_tenants_may(scene: Scene) -> None:
    tenant, ns = scene.tenant, scene.namespace
    # Instances: created, read, changed and deleted in its own namespace (it may stay pending).
    create_instance(tenant, _lab("lab", ns, scene.type_name))
    assert tenant.get(WORKER, "Instance", "lab", ns) is not None
    assert [i["metadata"]["name"] for i in tenant.list(WORKER, "Instance", ns)] == ["lab"]
    tenant.merge_patch(WORKER, "Instance", "lab", {"spec": {"stop": True}}, namespace=ns)
    # The status stays the chain's.
    _refused(
        lambda: tenant.merge_patch(
            WORKER,
            "Instance",
            "lab",
            {"status": {"phase": "Running"}},
            namespace=ns,
            subresource="status",
        )
    )
    # `edit` keeps what it gave before: a batch Job.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": ns},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }
    tenant.create(job)
    # InstanceTypes: read through the reader role the platform team bound.
    names = {t["metadata"]["name"] for t in tenant.list(WORKER, "InstanceType")}
    assert scene.type_name in names
    assert tenant.get(WORKER, "InstanceType", scene.type_name) is not None
    _refused(lambda: tenant.merge_patch(WORKER, "InstanceType", scene.type_name, {"spec": {}}))
    # Nothing on the chain's own kinds.
    internal = [(WORKER, "Devices"), (WORKER, "KVCachePool")]
    internal += [(CHAIN, "NodeFlavors"), (CHAIN, "PoolCards")]
    for api, kind in internal:
        _refused(partial(tenant.list, api, kind))
    _refused(lambda: tenant.get(CHAIN, "Settings", SETTINGS_NAME))
    # Nor on another namespace's Instances.
    _refused(lambda: tenant.list(WORKER, "Instance", scene.other))
    _refused(lambda: tenant.create(_lab("lab", scene.other, scene.type_name)))
    tenant.delete(WORKER, "Instance", "lab", ns)
