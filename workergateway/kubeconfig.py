"""A member's kubeconfig, from its Secret on the manager, read strictly (docs/fleet.md,
"Credentials and least privilege").

For member `<name>` the gateway reads the Secret `gpustack-gateway-<name>` in `gpustack-fleet`,
key `kubeconfig`: a kubeconfig of the member-side read-only ServiceAccount, never MultiKueue's
own. One policy holds for both, so what Kueue's MultiKueue controller refuses of a kubeconfig
is refused here too, with the member and the field named: `tokenFile`,
`insecure-skip-tls-verify`, a `certificate-authority` file path (it wants
`certificate-authority-data`), and a cluster that names no server. The gateway refuses a little
more, because its Pod has nothing else to offer: file paths of a client certificate or key (no
file of the member's is mounted there), and `exec` and `auth-provider` plugins (the image has
none). What is left is everything a kubeconfig carries inline: the server, its CA, and a bearer
`token` or a client certificate and key as `*-data`.

This is not `kubeapi.credentials`, which reads whatever `kubectl` reads (files, plugins, merged
lists) through the optional `kubernetes` loader for an operator's own kubeconfig: here the
input is a Secret someone else wrote, and the rule is to refuse rather than to do one's best.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from chain import fields
from kubeapi import Kube
from workergateway.members import MemberError

SECRET_PREFIX = "gpustack-gateway-"
SECRET_KEY = "kubeconfig"
FLEET_NAMESPACE = "gpustack-fleet"

REFUSED_USER_KEYS = {
    "tokenFile": "a token file is refused (Kueue refuses it too): use token",
    "client-certificate": "a file path is refused: use client-certificate-data",
    "client-key": "a file path is refused: use client-key-data",
    "exec": "an exec plugin is refused: the gateway's image has none",
    "auth-provider": "an auth provider plugin is refused: the gateway's image has none",
}
REFUSED_CLUSTER_KEYS = {
    "insecure-skip-tls-verify": "refused (Kueue refuses it too): name the CA instead",
    "certificate-authority": "a file path is refused (Kueue refuses it too): "
    "use certificate-authority-data",
}


def secret_name(member: str) -> str:
    """The Secret holding the gateway's kubeconfig for `member`."""
    return SECRET_PREFIX + member


class KubeconfigRefused(MemberError):
    """A member's kubeconfig the gateway will not use. Its field starts with the Secret
    (`secrets/gpustack-gateway-west.kubeconfig.users[gateway].user.tokenFile`), as a member's
    malformed object starts with the object."""

    def __init__(self, member: str, field: str, message: str) -> None:
        super().__init__(member, f"secrets/{secret_name(member)}.{field}", message)


@dataclass(frozen=True)
class MemberCredentials:
    """What a member's kubeconfig says, inline only."""

    server: str
    ca: bytes | None
    """The CA bundle (PEM); None: the system's CAs."""
    token: str | None
    cert: tuple[bytes, bytes] | None
    """A client certificate and its key (PEM)."""


def _named(doc: fields.Obj, plural: str, singular: str, name: str) -> fields.Obj:
    """The `singular` of the entry of `plural` called `name` (`clusters[1].cluster`)."""
    for entry, at in fields.items(doc, plural, ""):
        if fields.string(entry, "name", at, required=True) == name:
            return fields.child(entry, singular, at, required=True)
    raise ValueError(f"{plural}: no entry named {name!r}")


def _data(obj: fields.Obj, key: str, path: str) -> bytes | None:
    text = fields.string(obj, key, path)
    if not text:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{fields.at(path, key)}: not base64") from None


def parse_kubeconfig(member: str, text: str) -> MemberCredentials:
    """The credentials of `text`'s current context, or KubeconfigRefused naming the field."""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise KubeconfigRefused(member, SECRET_KEY, f"not YAML ({err})") from None
    try:
        doc = fields.as_object(loaded, "")
        context_name = fields.string(doc, "current-context", "", required=True)
        context = _named(doc, "contexts", "context", context_name)
        cluster_name = fields.string(context, "cluster", "context", required=True)
        user_name = fields.string(context, "user", "context", required=True)
        cluster = _named(doc, "clusters", "cluster", cluster_name)
        where = f"clusters[{cluster_name}].cluster"
        for refused, why in REFUSED_CLUSTER_KEYS.items():
            if cluster.get(refused) not in (None, "", False):
                raise ValueError(f"{fields.at(where, refused)}: {why}")
        server = fields.string(cluster, "server", where, required=True)
        if not server.startswith("https://"):
            raise ValueError(f"{fields.at(where, 'server')}: expected an https:// address")
        ca = _data(cluster, "certificate-authority-data", where)
        user = _named(doc, "users", "user", user_name)
        at = f"users[{user_name}].user"
        for refused, why in REFUSED_USER_KEYS.items():
            if user.get(refused) not in (None, ""):
                raise ValueError(f"{fields.at(at, refused)}: {why}")
        token = fields.string(user, "token", at) or None
        cert = _data(user, "client-certificate-data", at)
        key = _data(user, "client-key-data", at)
        if (cert is None) != (key is None):
            raise ValueError(f"{at}: client-certificate-data and client-key-data go together")
        if token is None and cert is None:
            raise ValueError(f"{at}: names no credentials (token or client-certificate-data)")
    except ValueError as err:
        path, _, message = str(err).partition(": ")
        raise KubeconfigRefused(member, f"{SECRET_KEY}.{path}", message) from None
    return MemberCredentials(server, ca, token, (cert, key) if cert and key else None)


class MemberKube(Kube):
    """A member's client and the private directory holding its CA and client pair, if any:
    `requests` takes them as paths only, so they live as long as the client does."""

    files: Path | None = None

    def close(self) -> None:
        """Drop the connections and the files; the client is not used after this."""
        self.session.close()
        if self.files is not None:
            shutil.rmtree(self.files, ignore_errors=True)
            self.files = None


def _private(path: Path, data: bytes) -> None:
    # Owner-only from creation on, whatever the umask: a key is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def member_kube(credentials: MemberCredentials, timeout: float = 10.0) -> MemberKube:
    """A client of the member. The CA and the client pair go to files of a private directory,
    removed by the client's `close()` (`SecretClients` closes a client it replaces or drops)."""
    directory = None
    if credentials.ca is not None or credentials.cert is not None:
        directory = Path(tempfile.mkdtemp(prefix="gpustack-member-"))
    ca: Path | bool = True
    if credentials.ca is not None and directory is not None:
        ca = directory / "ca.crt"
        _private(ca, credentials.ca)
    cert = key = None
    if credentials.cert is not None and directory is not None:
        cert, key = directory / "tls.crt", directory / "tls.key"
        _private(cert, credentials.cert[0])
        _private(key, credentials.cert[1])
    token = credentials.token

    def authorization() -> str | None:
        return f"Bearer {token}" if token else None

    client = MemberKube(
        credentials.server, ca, cert, key, timeout=timeout, authorization=authorization
    )
    client.files = directory
    return client
