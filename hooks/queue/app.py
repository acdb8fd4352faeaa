"""The queue hook's HTTP shell: `gunicorn hooks.queue.app:app`.

Routes: POST /sync, /finalize (the InstanceType decorator; both take the same body, and
/finalize always finalizes), /customize; GET /healthz.
"""

from __future__ import annotations

from chain.manufacturers import default_manufacturers
from hooks.queue import queue
from hooks.request import DecoratorRequest, Obj
from hooks.transport import customize_route, make_app

# Read once at start, like every `GPUSTACK_<MFR>_*` override.
TABLE = default_manufacturers()


def _sync(body: Obj) -> Obj:
    return queue.sync(DecoratorRequest.parse(body), TABLE)


def _finalize(body: Obj) -> Obj:
    if isinstance(body, dict):
        # Metacontroller calls this route only for a target being finalized; trust the route
        # over a body that forgot to say so.
        body = {**body, "finalizing": True}
    return queue.sync(DecoratorRequest.parse(body), TABLE)


app = make_app(
    "queue",
    {"/sync": _sync, "/finalize": _finalize, "/customize": customize_route(queue.customize)},
)
