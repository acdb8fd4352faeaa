"""The thin shell every hook shares: decode, validate, call the pure function, encode.

A Metacontroller hook must never answer 200 to a request it did not understand: a 200 without
`attachments`/`children` makes Metacontroller delete every object the hook owns. So a malformed
request gets a 400 whose JSON names the offending field, and an unexpected failure gets a 500;
either way Metacontroller keeps what exists and retries.

An admission webhook route is the other way round: the API server reports any non-200 as its own
failure ("failed calling webhook") and drops the message, so once a review's uid can be read every
answer is a 200 AdmissionReview, a refusal naming the field for whatever cannot be read
(`hooks.admissionreview.unreadable`); only a body that is no review at all gets a 4xx.

Hooks read only the objects inside the `attachments`/`children`/`related` maps, never the map
keys: hook versions v1 and v2 differ only in those keys, so one hook serves both.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import jsonschema
from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from chain.apis import CHAIN_API, SETTINGS, SETTINGS_NAME
from chain.pools import PoolIdentity
from chain.settings import Settings
from chain.times import timestamp
from hooks import metrics

Obj = dict[str, Any]
Handler = Callable[[Obj], Obj]

log = logging.getLogger("hooks")

_OBJECT_MAP = {
    # "<Kind>.<apiVersion>" -> {"<name> or <ns>/<name>": object}
    "type": "object",
    "additionalProperties": {
        "type": ["object", "null"],
        "additionalProperties": {"$ref": "#/$defs/kubeObject"},
    },
}

DECORATOR_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["object"],
    "properties": {
        "controller": {"type": "object"},
        "object": {"$ref": "#/$defs/kubeObject"},
        "attachments": _OBJECT_MAP,
        "related": _OBJECT_MAP,
        "finalizing": {"type": "boolean"},
    },
    "$defs": {
        "kubeObject": {
            "type": "object",
            "required": ["apiVersion", "kind", "metadata"],
            "properties": {
                "apiVersion": {"type": "string", "minLength": 1},
                "kind": {"type": "string", "minLength": 1},
                "metadata": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "minLength": 1},
                        "namespace": {"type": "string"},
                        "labels": {
                            "type": ["object", "null"],
                            "additionalProperties": {"type": "string"},
                        },
                        "annotations": {
                            "type": ["object", "null"],
                            "additionalProperties": {"type": "string"},
                        },
                    },
                },
            },
        }
    },
}

COMPOSITE_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["parent"],
    "properties": {
        "controller": {"type": "object"},
        "parent": {"$ref": "#/$defs/kubeObject"},
        "children": _OBJECT_MAP,
        "related": _OBJECT_MAP,
        "finalizing": {"type": "boolean"},
    },
    "$defs": DECORATOR_REQUEST_SCHEMA["$defs"],
}

CUSTOMIZE_REQUEST_SCHEMA: Obj = {
    "type": "object",
    "required": ["parent"],
    "properties": {
        "controller": {"type": "object"},
        "parent": {"$ref": "#/$defs/kubeObject"},
    },
    "$defs": DECORATOR_REQUEST_SCHEMA["$defs"],
}


class BadRequest(Exception):
    """The request does not have the shape the hook needs; `field` is a JSON path into it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @classmethod
    def at(cls, prefix: str, err: ValueError) -> BadRequest:
        """A domain reader's `<field>: <message>` error, its field placed under `prefix`."""
        where, _, message = str(err).partition(": ")
        return cls(f"{prefix}.{where}" if prefix else where, message)


def pool_identity(obj: Obj, where: str) -> PoolIdentity:
    """The pool an InstanceType (at JSON path `where`) stands for; a field of the wrong type
    is a 400 naming it."""
    try:
        return PoolIdentity.of_spec(obj.get("spec"), "spec")
    except ValueError as err:
        raise BadRequest.at(where, err) from None


def validate(body: Any, schema: Obj) -> Obj:
    """Check `body` against `schema`; raise BadRequest naming the first bad field."""
    if not isinstance(body, dict):
        raise BadRequest("$", "the request body must be a JSON object")
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(body))
    if error is not None:
        raise BadRequest(error.json_path, error.message)
    return body


def _group_key(obj: Obj) -> str:
    return f"{obj.get('kind', '')}.{obj.get('apiVersion', '')}"


@dataclass(frozen=True)
class ObjectMap:
    """The objects of one request map, grouped by `<Kind>.<apiVersion>`, keys forgotten."""

    groups: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ObjectMap:
        groups: dict[str, tuple[Obj, ...]] = {}
        for group, objects in (raw or {}).items():
            groups[group] = tuple((objects or {}).values())
        return cls(groups)

    def of(self, kind: str, api_version: str) -> tuple[Obj, ...]:
        return self.groups.get(f"{kind}.{api_version}", ())

    def __iter__(self) -> Iterator[Obj]:
        for objects in self.groups.values():
            yield from objects


@dataclass(frozen=True)
class DecoratorRequest:
    object: Obj
    attachments: ObjectMap
    related: ObjectMap
    finalizing: bool

    @classmethod
    def parse(cls, body: Any) -> DecoratorRequest:
        valid = validate(body, DECORATOR_REQUEST_SCHEMA)
        return cls(
            object=valid["object"],
            attachments=ObjectMap.parse(valid.get("attachments")),
            related=ObjectMap.parse(valid.get("related")),
            finalizing=bool(valid.get("finalizing", False)),
        )


@dataclass(frozen=True)
class CompositeRequest:
    """A CompositeController's sync request: the parent, the children it owns, its related
    objects."""

    parent: Obj
    children: ObjectMap
    related: ObjectMap
    finalizing: bool

    @classmethod
    def parse(cls, body: Any) -> CompositeRequest:
        valid = validate(body, COMPOSITE_REQUEST_SCHEMA)
        return cls(
            parent=valid["parent"],
            children=ObjectMap.parse(valid.get("children")),
            related=ObjectMap.parse(valid.get("related")),
            finalizing=bool(valid.get("finalizing", False)),
        )


def object_path(map_name: str, obj: Obj) -> str:
    """JSON path of an object inside a request map, built from the object itself.

    The map keys differ between hook versions v1 and v2 (`name` vs `ns/name`); naming the
    object by its group key and name reads the same under both.
    """
    meta = obj.get("metadata") or {}
    return f"$.{map_name}['{_group_key(obj)}']['{meta.get('name', '')}']"


def read_settings(obj: Obj | None, path: str) -> Settings:
    """Settings from a Settings object's spec (defaults when there is no object).

    `Settings.from_spec` names the bad field as `spec.<name>: ...`; that becomes a BadRequest
    whose field is the full path into the request, so the 400 says exactly what to fix.
    """
    if obj is None:
        return Settings()
    try:
        return Settings.from_spec(obj.get("spec"))
    except ValueError as err:
        field, _, message = str(err).partition(": ")
        raise BadRequest(f"{path}.{field}", message) from err


def parent_settings(request: DecoratorRequest) -> Settings | None:
    """The settings of a controller whose parent is the Settings singleton; None when the parent
    is another Settings object (only the singleton carries the chain's settings, and any other
    owns nothing). BadRequest when the parent is not a Settings at all."""
    parent = request.object
    if parent["kind"] != SETTINGS or parent["apiVersion"] != CHAIN_API:
        raise BadRequest("$.object.kind", f"expected a {CHAIN_API} Settings, got {parent['kind']}")
    if parent["metadata"]["name"] != SETTINGS_NAME:
        return None
    return read_settings(parent, "$.object")


def related_settings(request: DecoratorRequest) -> Settings:
    """The chain settings among the related objects; defaults when the singleton is absent."""
    for obj in request.related.of(SETTINGS, CHAIN_API):
        if obj["metadata"]["name"] == SETTINGS_NAME:
            return read_settings(obj, object_path("related", obj))
    return Settings()


_SHALLOW_SCHEMA: Obj = {
    **DECORATOR_REQUEST_SCHEMA,
    "properties": {
        **DECORATOR_REQUEST_SCHEMA["properties"],
        "attachments": {"type": "object"},
        "related": {"type": "object"},
    },
}


def _check_map(body: Mapping[str, Any], map_name: str) -> None:
    groups = body.get(map_name)
    if groups is None:
        return
    for group, objects in groups.items():
        group_path = f"$.{map_name}['{group}']"
        if objects is None:
            continue
        if not isinstance(objects, dict):
            raise BadRequest(group_path, "expected a map of objects")
        for key, obj in objects.items():
            path = f"{group_path}['{key}']"
            if not isinstance(obj, dict):
                raise BadRequest(path, "expected an object")
            for key_field in ("apiVersion", "kind"):
                value = obj.get(key_field)
                if not isinstance(value, str) or not value:
                    raise BadRequest(f"{path}.{key_field}", "expected a non-empty string")
            meta = obj.get("metadata")
            if not isinstance(meta, dict):
                raise BadRequest(f"{path}.metadata", "expected an object")
            name = meta.get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest(f"{path}.metadata.name", "expected a non-empty string")


def parse_shallow(body: Any) -> DecoratorRequest:
    """A `DecoratorRequest` checked deeply for the parent and shallowly for the map entries.

    `DecoratorRequest.parse` runs the JSON schema over every object of every map. A hook that
    relates thousands of objects (the pools hook relates one summary per node) would spend
    about nine times the `json.loads` of the body there; this checks each map entry's
    apiVersion, kind and metadata.name by hand instead, and leaves the objects' own fields to
    the code that reads them.
    """
    valid = validate(body, _SHALLOW_SCHEMA)
    _check_map(valid, "attachments")
    _check_map(valid, "related")
    return DecoratorRequest(
        object=valid["object"],
        attachments=ObjectMap.parse(valid.get("attachments")),
        related=ObjectMap.parse(valid.get("related")),
        finalizing=bool(valid.get("finalizing", False)),
    )


def customize_parent(body: Any) -> Obj:
    """A customize request's parent (checked against the customize schema)."""
    parent: Obj = validate(body, CUSTOMIZE_REQUEST_SCHEMA)["parent"]
    return parent


# Routes: the shell parses a request (deep, or shallow for hooks that relate thousands of
# objects) and hands the pure function the typed view it reads.


def decorator_route(sync: Callable[[DecoratorRequest], Obj]) -> Handler:
    return lambda body: sync(DecoratorRequest.parse(body))


def shallow_route(sync: Callable[[DecoratorRequest], Obj]) -> Handler:
    return lambda body: sync(parse_shallow(body))


def composite_route(sync: Callable[[CompositeRequest], Obj]) -> Handler:
    return lambda body: sync(CompositeRequest.parse(body))


def customize_route(customize: Callable[[Obj], Obj]) -> Handler:
    return lambda body: customize(customize_parent(body))


def now() -> str:
    """The shell's clock for the pure hooks: the transition time of a condition an answer flips
    (`chain.conditions`). Tests that compare whole answers stop it (tests/unit/hooks/conftest.py).
    """
    return timestamp(time.time())


def _error(status: int, message: str, field: str | None = None) -> tuple[Response, int]:
    payload: Obj = {"error": message}
    if field is not None:
        payload["field"] = field
    return jsonify(payload), status


# The largest body a hook reads. Metacontroller's requests grow with the cluster (every related
# Devices of a pool: about 36 MiB at 5,000 nodes); an AdmissionReview holds at most two objects of
# etcd's 1.5 MiB. Past the limit: a 413 naming it, before anything is parsed.
HOOK_BODY_LIMIT = 64 * 2**20
WEBHOOK_BODY_LIMIT = 8 * 2**20

# How long a route may work on one request: a second under the timeout its caller gives up at
# (Metacontroller's hook `timeout`, the API server's `timeoutSeconds`: 10 s in manifests/ unless a
# route says otherwise), so a request nobody waits for any more stops holding a worker. A test
# reads both sides from the manifests.
DEADLINE = 9.0


WRITE_RECHECK_SECONDS = 5.0
"""How soon a parent is synced again while the answer asks to change it. Metacontroller v4
gives up on a 409 from the parent's update (labels, annotations, status) without an error or a
requeue, and with `ignoreStatusChanges` it may hear of nothing else for a whole resync period;
the resync a hook asks for is queued before those writes, so a lost one is tried again within
seconds. Once the parent shows what the hook wants, no recheck is asked for."""


def parent_write_outstanding(parent: Obj, answer: Obj, composite: bool = False) -> bool:
    """Does the answer ask Metacontroller to change the parent (a label, an annotation, or a
    status that differs from what the request shows)? A null value means "remove".

    A CompositeController (`composite`) writes the parent's `metadata.generation` into the
    status it is given as `observedGeneration`, and the CRD keeps it: the status it will write
    is compared, or a settled parent would look outstanding on every sync. (An answer without
    a status, a customize answer among them, claims no status write.)"""
    meta = parent.get("metadata") or {}
    for field_name in ("labels", "annotations"):
        desired = answer.get(field_name) or {}
        have = meta.get(field_name) or {}
        if any(have.get(key) != value for key, value in desired.items()):
            return True
    status = answer.get("status")
    if composite and isinstance(status, dict):
        status = {**status, "observedGeneration": meta.get("generation", 0)}
    return status is not None and status != parent.get("status")


def with_write_recheck(body: Obj, answer: Obj) -> Obj:
    """The answer, with a resync within WRITE_RECHECK_SECONDS while a parent write is
    outstanding (a longer resync the hook asked for is shortened, a shorter one kept)."""
    # A decorator's request holds its parent as `object`, a composite's as `parent`.
    composite = body.get("object") is None
    parent = body.get("parent") if composite else body.get("object")
    if not isinstance(parent, dict) or not parent_write_outstanding(parent, answer, composite):
        return answer
    asked = float(answer.get("resyncAfterSeconds") or 0)
    recheck = min(asked, WRITE_RECHECK_SECONDS) if asked > 0 else WRITE_RECHECK_SECONDS
    return {**answer, "resyncAfterSeconds": recheck}


class DeadlineExceeded(BaseException):
    """A route ran past its deadline. A BaseException, so no `except Exception` in a hook's own
    code can swallow it."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise DeadlineExceeded in this thread once `seconds` of wall time pass inside the block.

    A real-time timer's SIGALRM interrupts pure-Python work anywhere; gunicorn's sync workers
    serve each request on the main thread, the only one a signal reaches, and never use SIGALRM
    themselves. Off the main thread (a threaded server) there is no limit.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise DeadlineExceeded

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# JSON may carry a lone UTF-16 surrogate (`"\ud800"`); no Kubernetes name, label or value can,
# and it cannot be encoded into one.
SURROGATE = "a string of the request holds a lone UTF-16 surrogate"


def make_app(
    name: str,
    routes: Mapping[str, Handler],
    webhooks: frozenset[str] = frozenset(),
    deadlines: Mapping[str, float] | None = None,
) -> Flask:
    """A Flask app serving each route as POST JSON -> JSON, plus GET /healthz. Routes named in
    `webhooks` take AdmissionReviews and the smaller body limit; `deadlines` overrides DEADLINE
    per route (`app.config["ROUTE_DEADLINES"]` lists every route's)."""
    # Imported here, not at the top: `hooks.admissionreview` builds on this module (`validate`,
    # `Obj`), so a top-level import would be circular; by the time an app is made both are loaded.
    from hooks import admissionreview

    app = Flask(name)
    app.config["MAX_CONTENT_LENGTH"] = HOOK_BODY_LIMIT
    limits = {path: (deadlines or {}).get(path, DEADLINE) for path in routes}
    app.config["ROUTE_DEADLINES"] = limits

    def endpoint(
        handler: Handler, limit: int, seconds: float, webhook: bool
    ) -> Callable[[], tuple[Response, int]]:
        def serve() -> tuple[Response, int]:
            try:
                with deadline(seconds):
                    return answer(handler, limit, webhook)
            except DeadlineExceeded:
                log.warning("%s %s: gave up after %g s", name, request.path, seconds)
                return _error(
                    503,
                    f"the hook gave up after {seconds:g} s, just before its caller's timeout; "
                    "the caller retries (a request this slow means the cluster outgrew the "
                    "route's timeout: see the README's benchmarks)",
                )

        return serve

    def answer(handler: Handler, limit: int, webhook: bool) -> tuple[Response, int]:
        too_large = _error(413, f"the request body is larger than {limit} bytes")
        if (request.content_length or 0) > limit:
            return too_large
        try:
            body = request.get_json(silent=True)
        except RequestEntityTooLarge:
            return too_large
        except RecursionError:
            return _error(400, "the request body is nested too deeply to be a Kubernetes object")
        if body is None:
            return _error(400, "the request body must be JSON (Content-Type: application/json)")
        if webhook:
            return review(handler, body)
        try:
            return jsonify(with_write_recheck(body, handler(body))), 200
        except BadRequest as err:
            log.warning("%s %s: bad request: %s", name, request.path, err)
            return _error(400, err.message, err.field)
        except UnicodeError:
            return _error(400, SURROGATE)
        except Exception as err:  # a 5xx keeps Metacontroller from deleting anything
            log.exception("%s %s failed", name, request.path)
            return _error(500, f"{type(err).__name__}: {err}")

    def review(handler: Handler, body: Any) -> tuple[Response, int]:
        """An AdmissionReview route: once the review's uid can be read, every answer is a 200
        review (see `hooks.admissionreview`); only a body that is no review at all is a 400."""
        uid = admissionreview.review_uid(body)
        try:
            result = handler(body)
        except BadRequest as err:
            log.warning("%s %s: unreadable review: %s", name, request.path, err)
            if uid is None:
                return _error(400, err.message, err.field)
            result = admissionreview.unreadable(uid, err.field, err.message)
        except UnicodeError:
            if uid is None:
                return _error(400, SURROGATE)
            result = admissionreview.unreadable(uid, "$", SURROGATE)
        except ValueError as err:
            # A domain reader's `<field>: <message>` that no hook wrapped: it names its field.
            log.warning("%s %s: unreadable review: %s", name, request.path, err)
            if uid is None:
                return _error(400, str(err))
            result = admissionreview.unreadable(uid, "", str(err))
        except Exception as err:
            log.exception("%s %s failed", name, request.path)
            if uid is None:
                return _error(500, f"{type(err).__name__}: {err}")
            result = admissionreview.failed(uid, err)
        metrics.decided(name, request.path, result)
        return jsonify(result), 200

    for path, handler in routes.items():
        limit = WEBHOOK_BODY_LIMIT if path in webhooks else HOOK_BODY_LIMIT
        view = endpoint(handler, limit, limits[path], path in webhooks)
        app.add_url_rule(path, endpoint=path, view_func=view, methods=["POST"])
    app.add_url_rule("/healthz", endpoint="healthz", view_func=lambda: ("ok", 200))
    app.add_url_rule("/metrics", endpoint="metrics", view_func=_metrics)

    @app.before_request
    def started() -> None:
        g.started = time.monotonic()

    @app.after_request
    def measured(response: Response) -> Response:
        if request.path in routes:  # not the probes and scrapes: they would drown the rest
            seconds = time.monotonic() - g.get("started", time.monotonic())
            size = request.content_length or 0
            metrics.observe(name, request.path, response.status_code, seconds, size)
        return response

    return app


def _metrics() -> Response:
    return Response(metrics.exposition(), mimetype="text/plain; version=0.0.4")


def of_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    """The objects of one kind, in their order (the planners read snapshots this way)."""
    return [o for o in objects if o.get("kind") == kind]
