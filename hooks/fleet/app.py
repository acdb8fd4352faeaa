"""`gunicorn hooks.fleet.app:app`: the fleet hooks, on a fleet's manager cluster only.

Routes: POST /sync (the `FleetPool` decorator: its ClusterQueue, AdmissionCheck,
MultiKueueConfig and fleet InstanceType), POST /status/sync and /status/customize (the fleet
InstanceType's status decorator); GET /healthz.
"""

from __future__ import annotations

from hooks import transport
from hooks.fleet import children, status
from hooks.request import DecoratorRequest, Obj
from hooks.transport import customize_route, decorator_route, make_app


def _status(request: DecoratorRequest) -> Obj:
    return status.sync(request, transport.now())


app = make_app(
    "fleet",
    {
        "/sync": decorator_route(children.sync),
        "/status/sync": decorator_route(_status),
        "/status/customize": customize_route(status.customize),
    },
)
