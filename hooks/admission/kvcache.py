"""The KV cache injection webhook (`/mutate-kvcache`): a Pod labelled
`kvcache.gpustack.ai/inject: "true"` gets its engine's connector arguments and client
configuration (`chain.kvcache`), or a refusal saying what to change. It sits outside the five
gates: its own entry in the chain's mutating configuration, selecting on its own label, reading
no `.sliced.*` or `.partitioned.*` value and writing none, never touching `resources`.

The pools' facts come from the KV cache catalog (`GPUSTACK_KVCACHE_CATALOG`: the ConfigMap
`gpustack-kvcache-catalog` the catalog decorator writes from every `KVCachePool`); a pool it does
not show yet answers 503 (retry shortly). Every refusal happens before anything is written: a
Pod is injected whole or left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chain import fields
from chain.kvcache import (
    CLIENT_CONFIG_ANNOTATION,
    CONTAINER_ANNOTATION,
    ENGINE_ANNOTATION,
    ENGINES,
    FORWARDED_ANNOTATION,
    INJECT_LABEL,
    INJECTED_ANNOTATION,
    POOL_ANNOTATION,
    ROLE_ANNOTATION,
    KvCachePoolFacts,
    Refused,
    launch,
    parse_kvcache_catalog,
    record,
    render,
    transport,
)
from hooks.admissionreview import allow, deny, parse_review
from hooks.catalog_file import catalog_source
from hooks.request import BadRequest, Obj

KVCACHE_CATALOG_ENV = "GPUSTACK_KVCACHE_CATALOG"
Pools = Mapping[str, KvCachePoolFacts]


def kvcache_catalog_from_env(env: Mapping[str, str] | None = None) -> Callable[[], Pools]:
    empty: Pools = {}
    return catalog_source(parse_kvcache_catalog, empty, env, KVCACHE_CATALOG_ENV)


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _target(pod: Obj, annotations: Mapping[str, str]) -> int:
    containers = (pod.get("spec") or {}).get("containers") or []
    names = [str(c.get("name", "")) for c in containers]
    named = annotations.get(CONTAINER_ANNOTATION, "")
    if named:
        if named not in names:
            raise Refused(f"{CONTAINER_ANNOTATION}: the Pod has no container {named!r} ({names})")
        return names.index(named)
    if len(names) == 1:
        return 0
    if not names:
        raise Refused("the Pod has no containers to inject into")
    raise Refused(
        f"the Pod has {len(names)} containers ({', '.join(names)}), so {CONTAINER_ANNOTATION} "
        "must name the one running the engine; this webhook never picks the first"
    )


def _listed(field: str, current: object, items: list[Any]) -> list[Obj]:
    """JSONPatch adding `items` to the list at `field` (made when absent)."""
    if not items:
        return []
    if isinstance(current, list):
        return [{"op": "add", "path": f"{field}/-", "value": item} for item in items]
    return [{"op": "add", "path": field, "value": items}]


def _injection(pod: Obj, pools: Pools) -> tuple[list[Obj], str]:
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    for own in (INJECTED_ANNOTATION, CLIENT_CONFIG_ANNOTATION):
        if own in annotations:
            raise Refused(f"annotation {own} is written by this webhook and may not be set")
    engine = annotations.get(ENGINE_ANNOTATION, "")
    if engine not in ENGINES:
        raise Refused(
            f"annotation {ENGINE_ANNOTATION} must name the engine the Pod runs, one of "
            f"{', '.join(ENGINES)} (got {engine!r}); it is never guessed from the image"
        )
    name = annotations.get(POOL_ANNOTATION, "")
    if not name:
        raise Refused(f"annotation {POOL_ANNOTATION} is required: it names the KVCachePool to use")
    pool = pools.get(name)
    if pool is None:
        raise LookupError(name)
    if not pool.endpoint:
        raise Refused(f"KVCachePool {name!r} publishes no client endpoint (spec.endpoint)")
    index = _target(pod, annotations)
    container: Obj = pod["spec"]["containers"][index]
    forwarded = annotations.get(FORWARDED_ANNOTATION, "") == "true"
    launched = launch(container, engine, forwarded)
    protocol = transport(engine, pool.transports)
    args, env, volume, mount, notes = render(
        container, engine, annotations.get(ROLE_ANNOTATION, ""), pool, protocol
    )
    at = f"/spec/containers/{index}"
    patch = _listed(f"{at}/args", container.get("args"), args)
    patch += _listed(f"{at}/env", container.get("env"), env)
    if mount is not None:
        patch += _listed(f"{at}/volumeMounts", container.get("volumeMounts"), [mount])
    if volume is not None:
        patch += _listed("/spec/volumes", (pod.get("spec") or {}).get("volumes"), [volume])
    written = {**notes, INJECTED_ANNOTATION: record(name, engine, launched)}
    if not isinstance(meta.get("annotations"), dict):
        patch.append({"op": "add", "path": "/metadata/annotations", "value": written})
    else:
        patch += [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
            for key, value in sorted(written.items())
        ]
    return patch, engine


def _check_shape(pod: Obj) -> None:
    """Every field the injection reads or patches has the type Kubernetes gives it; ValueError
    naming the first that has not. Mutation runs before the API server checks the Pod, so a
    review may hold anything, and a patch is never built on a value this webhook cannot read."""
    fields.string_map(fields.child(pod, "metadata", ""), "annotations", "metadata")
    spec = fields.child(pod, "spec", "")
    for container, where in fields.items(spec, "containers", "spec"):
        fields.string(container, "name", where)
        fields.strings(container, "command", where)
        fields.strings(container, "args", where)
        for key in ("env", "volumeMounts"):
            list(fields.items(container, key, where))  # read for the check: lists of objects
    list(fields.items(spec, "volumes", "spec"))


def mutate_kvcache(body: Any, pools: Pools) -> Obj:
    review = parse_review(body)
    pod = review.object
    if review.operation != "CREATE" or not isinstance(pod, dict):
        return allow(review.uid)
    try:
        labels = fields.string_map(fields.child(pod, "metadata", ""), "labels", "metadata")
        if labels.get(INJECT_LABEL) != "true":  # the selector's own rule, kept if it is widened
            return allow(review.uid)
        _check_shape(pod)
    except ValueError as err:
        raise BadRequest.at("$.request.object", err) from None
    try:
        patch, _engine = _injection(pod, pools)
    except LookupError as unknown:
        return deny(
            review.uid,
            f"KVCachePool {unknown.args[0]!r} is not known to the webhook yet (it learns pools "
            "from the KV cache catalog within moments); retry shortly, or check the name with "
            "`kubectl get kvcachepools`",
            retryable=True,
            rules=("kvcache-pool-unknown",),
        )
    except Refused as refused:
        return deny(review.uid, str(refused), rules=("kvcache",))
    return allow(review.uid, patch)
