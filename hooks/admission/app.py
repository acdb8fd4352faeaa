"""`gunicorn hooks.admission.app:app`: the admission webhooks and the verdict hook.

Routes: POST /mutate-pods, /mutate-jobs, /mutate-workloads, /mutate-instances,
/validate-instances, /mutate-kvcache (AdmissionReview v1, served over TLS to the API server);
POST /judge (the per-card verdict, called by the admission driver); GET /healthz.
The pool catalog is read from the file `GPUSTACK_ADMISSION_CATALOG` names (see `catalog`), the
InstanceTypes' facts for the Instance webhooks from `GPUSTACK_INSTANCE_CATALOG` (`instances`),
the KV cache pools from `GPUSTACK_KVCACHE_CATALOG` (`kvcache`).
"""

from __future__ import annotations

from collections.abc import Callable

from flask import Flask

from chain.manufacturers import ManufacturerTable, default_manufacturers
from hooks.admission.instances import (
    Types,
    instance_catalog_from_env,
    mutate_instances,
    validate_instances,
)
from hooks.admission.judge import judge_request
from hooks.admission.kvcache import Pools, kvcache_catalog_from_env, mutate_kvcache
from hooks.admission.pods import mutate_jobs, mutate_pods
from hooks.admission.pool_catalog import Catalog, catalog_from_env
from hooks.admission.workloads import mutate_workloads
from hooks.request import Obj
from hooks.transport import make_app


def create_app(
    catalog: Callable[[], Catalog],
    table: ManufacturerTable | None = None,
    types: Callable[[], Types] | None = None,
    kvcache: Callable[[], Pools] | None = None,
) -> Flask:
    makers = default_manufacturers() if table is None else table
    instance_types: Callable[[], Types] = types or (lambda: {})
    kvcache_pools: Callable[[], Pools] = kvcache or (lambda: {})

    def pods(body: Obj) -> Obj:
        return mutate_pods(body, catalog(), makers)

    def jobs(body: Obj) -> Obj:
        return mutate_jobs(body, catalog(), makers)

    def workloads(body: Obj) -> Obj:
        return mutate_workloads(body, catalog(), makers)

    def verdict(body: Obj) -> Obj:
        return judge_request(body, makers)

    def instances_defaulted(body: Obj) -> Obj:
        return mutate_instances(body, instance_types(), makers)

    def instances_validated(body: Obj) -> Obj:
        return validate_instances(body, instance_types(), makers)

    def kvcache_injected(body: Obj) -> Obj:
        return mutate_kvcache(body, kvcache_pools())

    return make_app(
        "admission",
        {
            "/mutate-pods": pods,
            "/mutate-jobs": jobs,
            "/mutate-workloads": workloads,
            "/mutate-instances": instances_defaulted,
            "/validate-instances": instances_validated,
            "/mutate-kvcache": kvcache_injected,
            "/judge": verdict,
        },
        webhooks=frozenset(
            {
                "/mutate-pods",
                "/mutate-jobs",
                "/mutate-workloads",
                "/mutate-instances",
                "/validate-instances",
                "/mutate-kvcache",
            }
        ),
    )


app = create_app(
    catalog_from_env(), types=instance_catalog_from_env(), kvcache=kvcache_catalog_from_env()
)
