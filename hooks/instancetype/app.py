"""`gunicorn hooks.instancetype.app:app`: the InstanceType hooks.

Routes: POST /mutate, /validate (the admission webhooks, served over TLS by
manifests/hooks/instancetype-webhook.yaml); POST /sync, /customize (the status decorator) and
/catalog/sync, /catalog/customize (the admission webhook's pool catalog, see `catalog`), served
over plain http to Metacontroller by manifests/hooks/instancetype.yaml; GET /healthz.
"""

from __future__ import annotations

from hooks.instancetype import catalog
from hooks.instancetype.status import customize, sync
from hooks.instancetype.webhook import mutate, validate_review
from hooks.shell import make_app

app = make_app(
    "instancetype",
    {
        "/mutate": mutate,
        "/validate": validate_review,
        "/sync": sync,
        "/customize": customize,
        "/catalog/sync": catalog.sync,
        "/catalog/customize": catalog.customize,
    },
    webhooks=frozenset({"/mutate", "/validate"}),
)
