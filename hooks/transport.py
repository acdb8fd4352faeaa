"""The hooks' transport: a Flask app per hook serving each route as POST JSON -> JSON, with the
body limits, the deadlines, the error answers and the metrics every route shares.

A Metacontroller route answers what it cannot read with a 400 naming the field
(`hooks.request.BadRequest`) and an unexpected failure with a 500: either way Metacontroller
keeps what exists and retries. An admission webhook route is the other way round: the API server
reports any non-200 as its own failure ("failed calling webhook") and drops the message, so once
a review's uid can be read every answer is a 200 AdmissionReview, a refusal naming the field for
whatever cannot be read (`hooks.admissionreview.unreadable`); only a body that is no review at
all gets a 4xx.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from chain.times import timestamp
from hooks import admissionreview, metrics
from hooks.recheck import with_write_recheck
from hooks.request import (
    BadRequest,
    CompositeRequest,
    DecoratorRequest,
    Obj,
    customize_parent,
    parse_shallow,
)

Handler = Callable[[Obj], Obj]

log = logging.getLogger("hooks")

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
                    "route's timeout: see docs/benchmarks.md)",
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
