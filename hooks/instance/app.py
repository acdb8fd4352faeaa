"""gunicorn hooks.instance.app:app: the Instance controller's sync and customize endpoints.

`GPUSTACK_SSH_SIDECAR_IMAGE` names the image SSH-enabled Instances' `sshd` sidecar runs: the
chain's own image (the Deployment sets it, Helm from `image`; unset, this release's image). Set
empty, SSH is off: an SSH-enabled Instance gets no Pod and a `Failed` status saying so.
"""

from __future__ import annotations

import os

from chain.manufacturers import default_manufacturers
from chain.release import CHAIN_IMAGE
from hooks import transport
from hooks.instance.sync import customize, sync
from hooks.request import CompositeRequest, Obj
from hooks.transport import composite_route, customize_route, make_app

TABLE = default_manufacturers()
SIDECAR_IMAGE_ENV = "GPUSTACK_SSH_SIDECAR_IMAGE"
SIDECAR_IMAGE = os.environ.get(SIDECAR_IMAGE_ENV, CHAIN_IMAGE)


def _sync(request: CompositeRequest) -> Obj:
    return sync(request, TABLE, SIDECAR_IMAGE, transport.now())


app = make_app(
    "instance", {"/sync": composite_route(_sync), "/customize": customize_route(customize)}
)
