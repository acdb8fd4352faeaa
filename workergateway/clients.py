"""The members' clients, each from its Secret on the manager (docs/fleet.md, "Which kubeconfig
the gateway uses").

The Secret is read again on every pass (one GET per member), so a rotated kubeconfig is used
from the next pass on and a deleted one stops the member's reads at once; the client is made
anew only when the Secret's `resourceVersion` changed, so its connections are kept between
passes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from workergateway.gateway import Api, MemberUnreachable, Obj
from workergateway.kubeconfig import (
    FLEET_NAMESPACE,
    SECRET_KEY,
    KubeconfigRefused,
    MemberCredentials,
    member_kube,
    parse_kubeconfig,
    secret_name,
)


class SecretReader(Protocol):
    """What `SecretClients` asks of the manager (`kubeapi.Kube` has it)."""

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> Obj | None: ...


@runtime_checkable
class Closing(Protocol):
    """A client holding something to give back (`MemberKube`: its connections and files)."""

    def close(self) -> None: ...


def _release(client: Api) -> None:
    if isinstance(client, Closing):
        client.close()


class SecretClients:
    """`MemberClients` over the `gpustack-gateway-<member>` Secrets of one namespace."""

    def __init__(
        self,
        manager: SecretReader,
        namespace: str = FLEET_NAMESPACE,
        connect: Callable[[MemberCredentials], Api] = member_kube,
    ) -> None:
        self.manager = manager
        self.namespace = namespace
        self.connect = connect
        self._clients: dict[str, tuple[str, Api, MemberCredentials]] = {}

    def __call__(self, member: str) -> Api:
        name = secret_name(member)
        secret = self.manager.get("v1", "Secret", name, self.namespace)
        if secret is None:
            dropped = self._clients.pop(member, None)
            if dropped is not None:
                _release(dropped[1])
            raise MemberUnreachable(member, f"secrets/{name} in {self.namespace}: not found")
        meta = secret.get("metadata")
        version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        cached = self._clients.get(member)
        if cached is not None and version and cached[0] == version:
            return cached[1]
        data = secret.get("data")
        raw = data.get(SECRET_KEY) if isinstance(data, dict) else None
        if not isinstance(raw, str) or not raw:
            raise KubeconfigRefused(member, SECRET_KEY, "the Secret has no such key")
        try:
            text = base64.b64decode(raw, validate=True).decode()
        except (binascii.Error, ValueError):
            raise KubeconfigRefused(member, SECRET_KEY, "not base64 UTF-8 text") from None
        credentials = parse_kubeconfig(member, text)
        client = self.connect(credentials)
        if cached is not None:
            _release(cached[1])
        self._clients[member] = (version, client, credentials)
        return client

    def credentials(self, member: str) -> MemberCredentials:
        """What the member's current client was made from, for a watch's clients of its own
        (`workergateway.watches`): the same Secret version, so the watch and the pass never
        read the member as two different users."""
        cached = self._clients.get(member)
        if cached is None:
            raise MemberUnreachable(member, "no client made from its Secret yet")
        return cached[2]

    def close(self) -> None:
        """Give back every member's client (at shutdown): no file of theirs is left behind."""
        while self._clients:
            _release(self._clients.popitem()[1][1])
