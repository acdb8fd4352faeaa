"""gunicorn hooks.entrance.app:app: the Namespace decorator's sync and customize endpoints."""

from __future__ import annotations

import os

from chain.settings import StartupEnv
from hooks.entrance.sync import customize, sync
from hooks.shell import Obj, make_app

# Read once at start: the reserved namespaces follow the chain's own namespace.
ENV = StartupEnv.from_env(os.environ)


def _sync(body: Obj) -> Obj:
    return sync(body, ENV)


app = make_app("entrance", {"/sync": _sync, "/customize": customize})
