"""gunicorn hooks.entrance.app:app: the Namespace decorator's sync and customize endpoints."""

from __future__ import annotations

import os

from chain.settings import StartupEnv
from hooks.entrance.sync import customize, sync
from hooks.request import DecoratorRequest, Obj
from hooks.transport import customize_route, decorator_route, make_app

# Read once at start: the reserved namespaces follow the chain's own namespace.
ENV = StartupEnv.from_env(os.environ)


def _sync(request: DecoratorRequest) -> Obj:
    return sync(request, ENV)


app = make_app(
    "entrance", {"/sync": decorator_route(_sync), "/customize": customize_route(customize)}
)
