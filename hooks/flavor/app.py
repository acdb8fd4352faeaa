"""The flavor hook's HTTP shell: `gunicorn hooks.flavor.app:app`.

Routes: POST /node/sync, /node/customize (Node decorator), /flavors/sync, /flavors/finalize,
/flavors/customize (pools decorator on the Settings singleton); GET /healthz.
"""

from __future__ import annotations

from hooks.flavor import node, pools
from hooks.shell import make_app

app = make_app(
    "flavor",
    {
        "/node/sync": node.sync,
        "/node/customize": node.customize,
        "/flavors/sync": pools.sync,
        "/flavors/finalize": pools.sync,
        "/flavors/customize": pools.customize,
    },
    # The pools decorator's hook timeout is 30 s (manifests/controllers/flavor-pools.yaml): its
    # request relates every node's summary.
    deadlines={"/flavors/sync": 29.0, "/flavors/finalize": 29.0},
)
