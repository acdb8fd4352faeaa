"""gunicorn hooks.instancetype.app:app: the InstanceType webhooks (served over TLS only)."""

from __future__ import annotations

from hooks.instancetype.webhook import mutate, validate_review
from hooks.shell import make_app

app = make_app("instancetype", {"/mutate": mutate, "/validate": validate_review})
