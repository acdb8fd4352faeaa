"""A WSGI wrapper that records every request body a hook receives, for the e2e tests.

`gunicorn testbed.capture:app` with `CAPTURE_APP=hooks.flavor.app:app` and `CAPTURE_DIR=...`
serves the hook unchanged and writes each POST body to `<dir>/<route>-<n>.json`, so a test can
compare what the real Metacontroller sends with the hook's JSON fixtures.
"""

from __future__ import annotations

import importlib
import io
import itertools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_module, _, _attr = os.environ.get("CAPTURE_APP", "").partition(":")
if not _module or not _attr:
    raise RuntimeError("set CAPTURE_APP=module:attr to the WSGI app to record")
_wrapped: WSGIApp = getattr(importlib.import_module(_module), _attr)
_directory = Path(os.environ.get("CAPTURE_DIR", "."))
_counter = itertools.count()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(body)
        route = environ.get("PATH_INFO", "/").strip("/").replace("/", "-") or "root"
        name = f"{route}-{os.getpid()}-{next(_counter)}.json"
        _directory.mkdir(parents=True, exist_ok=True)
        (_directory / name).write_bytes(body)
    return _wrapped(environ, start_response)
