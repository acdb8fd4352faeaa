"""A hook app with a route that never finishes, for the deadline tests under real gunicorn."""

from __future__ import annotations

import os
import time

from hooks.request import Obj
from hooks.transport import make_app


def spin(_body: Obj) -> Obj:
    """Pure-Python work for 20 s that swallows every Exception on the way (without a deadline
    the tests see its 200 and fail rather than hang)."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            sum(range(1000))
        except Exception:  # the point: a hook's own handler cannot stop a deadline
            continue
    return {"spun": True}


def worker(_body: Obj) -> Obj:
    return {"pid": os.getpid()}


app = make_app("slow", {"/spin": spin, "/worker": worker}, deadlines={"/spin": 0.5})
