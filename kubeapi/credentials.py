"""Where the API server is and how to prove who we are.

A kubeconfig is read by the `kubernetes` client's own loader, so every shape `kubectl` reads
works the same here: `current-context` (or a named context), certificate authorities and client
pairs as files or embedded `*-data`, `token` and `tokenFile`, exec plugins (EKS, GKE, AKS) and
OIDC with their refresh, `insecure-skip-tls-verify`, `proxy-url`, and `KUBECONFIG` lists of
files merged in order. Only the loader is used: requests still go through this package's own
light transport (`kubeapi.client`). Inside a Pod the mounted service account is read directly:
no loader, and the token file is read again on every request (projected tokens rotate on disk).
The loader is optional (`pip install 'gpustack-chain[kubeconfig]'`): the image has only the
service account path, and a kubeconfig read without it is a `CredentialsError` saying so.

A kubeconfig that cannot name a server (missing, unreadable, not YAML, no current context, no
server) is a `CredentialsError` whose message names the file and what is wrong in one line: the
processes print it and exit 3 (`chain.cli`), where the loader's own exceptions would end in a
traceback, or not at all (a cluster without `server` loads as the server '').
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chain.cli import ConfigurationError, unreadable

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

NO_LOADER = (
    "reading a kubeconfig needs the kubernetes package: pip install 'gpustack-chain[kubeconfig]'"
)
"""The `kubernetes` package is the `kubeconfig` extra: the image leaves it out (no Pod reads a
kubeconfig), so a process there given one says what to install instead of a traceback."""


class CredentialsError(ConfigurationError):
    """The kubeconfig or the service account cannot tell where the API server is or who we
    are, or the server refuses what they say."""


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
    try:
        from kubernetes.client import Configuration
        from kubernetes.config import kube_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise CredentialsError(NO_LOADER) from None

    files = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
    current = _current_context(files, fallback=not (path or os.environ.get("KUBECONFIG")))
    chosen = context or current
    if not chosen:
        raise CredentialsError(
            f"kubeconfig {files}: no current context (kubectl config use-context NAME sets one)"
        )
    config = Configuration()
    try:
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=files, context=context, client_configuration=config, persist_config=False
        )
    except ConfigException as err:
        reason = (
            str(err)
            .removeprefix("Invalid kube-config file. ")
            .removeprefix("Invalid kube-config. ")
        )
        raise CredentialsError(f"kubeconfig {files}: {reason}") from None
    except (TypeError, AttributeError, KeyError) as err:
        # What the loader raises on a well-formed YAML of the wrong shape (`clusters: 5`).
        raise CredentialsError(
            f"kubeconfig {files}: malformed ({type(err).__name__}: {err})"
        ) from None
    if not config.host:
        raise CredentialsError(f"kubeconfig {files}: context {chosen} names no server")

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


def _current_context(files: str, fallback: bool) -> str:
    """The context `files` (a `KUBECONFIG`-style list) makes current ('' if none), checking on
    the way what the loader would report badly or not at all. Like `kubectl`, a file of a list
    that does not exist is skipped, but the list must name one that does; the first
    `current-context` set wins. `fallback`: `files` is the default `~/.kube/config`, tried
    for want of anything else."""
    names = [os.path.expanduser(name) for name in files.split(os.pathsep) if name]
    existing = [name for name in names if os.path.exists(name)]
    if not existing:
        what = "no such file" if len(names) == 1 else "none of these files exists"
        if fallback:
            what += " (and neither $KUBECONFIG nor a Pod's service account to use instead)"
        raise CredentialsError(f"kubeconfig {files}: {what}")
    documents: list[dict[str, Any]] = []
    for name in existing:
        try:
            loaded = yaml.safe_load(Path(name).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            raise CredentialsError(f"kubeconfig {unreadable(name, err)}") from None
        if loaded is None:  # an empty file: kubectl reads it as an empty config
            continue
        if not isinstance(loaded, dict):
            kind = type(loaded).__name__
            raise CredentialsError(f"kubeconfig {name}: not a kubeconfig (a YAML {kind})")
        documents.append(loaded)
    if not documents:
        raise CredentialsError(f"kubeconfig {files}: empty")
    current = (doc.get("current-context") for doc in documents)
    return next((str(name) for name in current if name), "")


def in_cluster(secrets: Path = SERVICE_ACCOUNT) -> Credentials:
    """Inside a Pod: the API server from the environment, the mounted token and CA."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    token = secrets / "token"
    if not token.is_file():
        # Read on every request; missing at start it is a Pod that mounts no token
        # (`automountServiceAccountToken: false`), not a rotation in progress.
        raise CredentialsError(f"service account {secrets}: no token to read (none mounted?)")

    def authorization() -> str | None:
        return f"Bearer {token.read_text().strip()}"

    return Credentials(f"https://{host}:{port}", str(secrets / "ca.crt"), None, authorization)
