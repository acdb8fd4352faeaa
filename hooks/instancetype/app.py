"""`gunicorn hooks.instancetype.app:app`: the InstanceType hooks.

Routes: POST /mutate, /validate (the admission webhooks, served over TLS by
manifests/hooks/instancetype-webhook.yaml); POST /sync, /customize (the status decorator) and
/catalog/sync, /catalog/customize (the admission webhook's pool catalog, see `catalog`), served
over plain http to Metacontroller by manifests/hooks/instancetype.yaml; GET /healthz.
The settings `/mutate` follows are read from the catalog file `GPUSTACK_ADMISSION_CATALOG` names.
"""

from __future__ import annotations

import os
from typing import Any

from chain.settings import Settings, StartupEnv
from hooks import transport
from hooks.catalog_file import catalog_settings, catalog_source
from hooks.instancetype import catalog_decorator as catalog
from hooks.instancetype.status import customize, sync
from hooks.instancetype.webhook import mutate, validate_review
from hooks.request import DecoratorRequest, Obj
from hooks.transport import customize_route, make_app, shallow_route

settings = catalog_source(catalog_settings, Settings())
# Read once at start: the catalogs go to the chain's own namespace (the Pod's).
ENV = StartupEnv.from_env(os.environ)


def _mutate(body: Any) -> Obj:
    return mutate(body, settings())


def _sync(request: DecoratorRequest) -> Obj:
    return sync(request, transport.now())


def _catalog_sync(request: DecoratorRequest) -> Obj:
    return catalog.sync(request, ENV.system_namespace)


app = make_app(
    "instancetype",
    {
        "/mutate": _mutate,
        "/validate": validate_review,
        # Both decorators relate many objects: parsed shallow (`parse_shallow`).
        "/sync": shallow_route(_sync),
        "/customize": customize_route(customize),
        "/catalog/sync": shallow_route(_catalog_sync),
        "/catalog/customize": customize_route(catalog.customize),
    },
    webhooks=frozenset({"/mutate", "/validate"}),
)
