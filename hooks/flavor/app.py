"""The flavor hook's HTTP shell: `gunicorn hooks.flavor.app:app`.

Routes: POST /node/sync, /node/customize (Node decorator), /flavors/sync, /flavors/finalize,
/flavors/customize (pools decorator on the Settings singleton); GET /healthz.
"""

from __future__ import annotations

from hooks.flavor import node, pools
from hooks.transport import customize_route, decorator_route, make_app, shallow_route

app = make_app(
    "flavor",
    {
        "/node/sync": decorator_route(node.sync),
        "/node/customize": customize_route(node.customize),
        # The pools request relates every node's summary: parsed shallow (`parse_shallow`).
        "/flavors/sync": shallow_route(pools.sync),
        "/flavors/finalize": shallow_route(pools.sync),
        "/flavors/customize": customize_route(pools.customize),
    },
    # The pools decorator's hook timeout is 30 s (manifests/controllers/flavor-pools.yaml): its
    # request relates every node's summary.
    deadlines={"/flavors/sync": 29.0, "/flavors/finalize": 29.0},
)
