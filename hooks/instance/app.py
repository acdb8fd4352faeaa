"""gunicorn hooks.instance.app:app: the Instance controller's sync and customize endpoints."""

from __future__ import annotations

from chain.manufacturers import default_manufacturers
from hooks.instance.sync import customize, sync
from hooks.shell import Obj, make_app

TABLE = default_manufacturers()


def _sync(body: Obj) -> Obj:
    return sync(body, TABLE)


app = make_app("instance", {"/sync": _sync, "/customize": customize})
