"""Where the API server is and how to prove who we are.

A kubeconfig is read by the `kubernetes` client's own loader, so every shape `kubectl` reads
works the same here: `current-context` (or a named context), certificate authorities and client
pairs as files or embedded `*-data`, `token` and `tokenFile`, exec plugins (EKS, GKE, AKS) and
OIDC with their refresh, `insecure-skip-tls-verify`, `proxy-url`, and `KUBECONFIG` lists of
files merged in order. Only the loader is used: requests still go through this package's own
light transport (`kubeapi.client`). Inside a Pod the mounted service account is read directly:
no loader, and the token file is read again on every request (projected tokens rotate on disk).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _no_token() -> str | None:
    return None


@dataclass(frozen=True)
class Credentials:
    server: str
    verify: str | bool
    """A CA bundle file, True (the system's CAs) or False (`insecure-skip-tls-verify`)."""
    cert: tuple[str, str] | None = None
    """A client certificate and key, as files."""
    authorization: Callable[[], str | None] = field(default=_no_token)
    """The Authorization header's value for the next request (refreshed when it expires)."""
    proxy: str | None = None
    """The kubeconfig's `proxy-url`; None: the environment's proxies for the server, if any."""


def from_kubeconfig(path: str | None = None, context: str | None = None) -> Credentials:
    """`path` (default `$KUBECONFIG`, then `~/.kube/config`; `a:b` lists are merged) at
    `context` (default its `current-context`)."""
    from kubernetes.client import Configuration
    from kubernetes.config import kube_config

    files = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
    config = Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=files, context=context, client_configuration=config, persist_config=False
    )

    def authorization() -> str | None:
        if config.refresh_api_key_hook is not None:
            config.refresh_api_key_hook(config)
        value = config.api_key.get("BearerToken") or config.api_key.get("authorization")
        return str(value) if value else None

    verify: str | bool = bool(config.verify_ssl)
    if verify and config.ssl_ca_cert:
        verify = str(config.ssl_ca_cert)
    cert = (str(config.cert_file), str(config.key_file)) if config.cert_file else None
    return Credentials(str(config.host), verify, cert, authorization, config.proxy or None)


def in_cluster(secrets: Path = SERVICE_ACCOUNT) -> Credentials:
    """Inside a Pod: the API server from the environment, the mounted token and CA."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    token = secrets / "token"

    def authorization() -> str | None:
        return f"Bearer {token.read_text().strip()}"

    return Credentials(f"https://{host}:{port}", str(secrets / "ca.crt"), None, authorization)
