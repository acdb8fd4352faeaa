"""A member's kubeconfig from its Secret, read strictly (docs/fleet.md, "Which kubeconfig the
gateway uses"): what Kueue refuses is refused here too, naming the member and the field."""

from __future__ import annotations

import base64
import copy
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from workergateway.clients import SecretClients
from workergateway.gateway import Api, MemberUnreachable
from workergateway.kubeconfig import (
    FLEET_NAMESPACE,
    KubeconfigRefused,
    MemberCredentials,
    member_kube,
    parse_kubeconfig,
)

from .fakes import MemoryCluster

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "west",
    "contexts": [{"name": "west", "context": {"cluster": "west", "user": "gateway"}}],
    "clusters": [
        {
            "name": "west",
            "cluster": {
                "server": "https://west.example:6443",
                "certificate-authority-data": _b64(CA),
            },
        }
    ],
    "users": [{"name": "gateway", "user": {"token": "secret-token"}}],
}


def _with(where: str, key: str, value: object) -> str:
    doc = copy.deepcopy(KUBECONFIG)
    doc[where][0][where.removesuffix("s")][key] = value
    return yaml.safe_dump(doc)


def test_a_token_kubeconfig() -> None:
    found = parse_kubeconfig("west", yaml.safe_dump(KUBECONFIG))
    assert found == MemberCredentials("https://west.example:6443", CA, "secret-token", None)


def test_a_client_certificate_kubeconfig_and_its_client() -> None:
    doc = copy.deepcopy(KUBECONFIG)
    doc["users"][0]["user"] = {
        "client-certificate-data": _b64(b"CERT"),
        "client-key-data": _b64(b"KEY"),
    }
    found = parse_kubeconfig("west", yaml.safe_dump(doc))
    assert found.cert == (b"CERT", b"KEY") and found.token is None
    kube = member_kube(found)
    assert kube.server == "https://west.example:6443"
    assert kube.authorization is not None and kube.authorization() is None
    assert isinstance(kube.session.verify, str)
    with open(kube.session.verify, "rb") as ca:
        assert ca.read() == CA


@pytest.mark.parametrize(
    ("where", "key", "value", "field"),
    [
        ("users", "tokenFile", "/var/run/token", "kubeconfig.users[gateway].user.tokenFile"),
        ("users", "exec", {"command": "aws"}, "kubeconfig.users[gateway].user.exec"),
        ("users", "client-key", "/tls.key", "kubeconfig.users[gateway].user.client-key"),
        (
            "clusters",
            "insecure-skip-tls-verify",
            True,
            "kubeconfig.clusters[west].cluster.insecure-skip-tls-verify",
        ),
        (
            "clusters",
            "certificate-authority",
            "/ca.crt",
            "kubeconfig.clusters[west].cluster.certificate-authority",
        ),
        ("clusters", "server", "", "kubeconfig.clusters[west].cluster.server"),
        ("clusters", "server", "http://west:80", "kubeconfig.clusters[west].cluster.server"),
        (
            "clusters",
            "certificate-authority-data",
            "not base64!",
            "kubeconfig.clusters[west].cluster.certificate-authority-data",
        ),
    ],
)
def test_what_is_refused_names_the_member_and_the_field(
    where: str, key: str, value: object, field: str
) -> None:
    with pytest.raises(KubeconfigRefused) as raised:
        parse_kubeconfig("west", _with(where, key, value))
    where = f"secrets/gpustack-gateway-west.{field}"
    assert (raised.value.member, raised.value.field) == ("west", where)
    assert str(raised.value).startswith(f"member west: {where}: ")


def test_insecure_false_is_no_refusal() -> None:
    parse_kubeconfig("west", _with("clusters", "insecure-skip-tls-verify", False))


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{", "kubeconfig"),
        ("[]", "kubeconfig"),
        ("current-context: east\ncontexts: []\n", "kubeconfig.contexts"),
        (yaml.safe_dump({**KUBECONFIG, "users": [{"name": "gateway", "user": {}}]}), ""),
    ],
)
def test_a_kubeconfig_that_names_no_credentials_is_refused(text: str, field: str) -> None:
    with pytest.raises(KubeconfigRefused) as raised:
        parse_kubeconfig("west", text)
    assert raised.value.field.startswith(f"secrets/gpustack-gateway-west.{field}".rstrip("."))


def _secret(text: str, version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "gpustack-gateway-west",
            "namespace": FLEET_NAMESPACE,
            "resourceVersion": version,
        },
        "data": {"kubeconfig": _b64(text.encode())},
    }


def test_member_clients_come_from_their_secrets_and_are_kept_while_it_is_unchanged() -> None:
    manager = MemoryCluster()
    made: list[MemberCredentials] = []

    def connect(credentials: MemberCredentials) -> Api:
        made.append(credentials)
        return MemoryCluster()

    clients = SecretClients(manager, connect=connect)
    with pytest.raises(MemberUnreachable, match="secrets/gpustack-gateway-west in gpustack-fleet"):
        clients("west")
    manager.put(_secret(yaml.safe_dump(KUBECONFIG)))
    first = clients("west")
    assert clients("west") is first and len(made) == 1
    manager.put(_secret(_with("users", "token", "rotated")))
    assert clients("west") is not first and made[-1].token == "rotated"
    manager.put(_secret(_with("users", "tokenFile", "/token")))
    with pytest.raises(KubeconfigRefused, match="tokenFile"):
        clients("west")
    no_key = _secret("")
    no_key["data"] = {}
    manager.put(no_key)
    with pytest.raises(KubeconfigRefused, match="no such key"):
        clients("west")


def test_a_rebuilt_member_client_leaves_the_files_of_one_client_and_closing_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue #32: each client made anew wrote its CA and client pair to a directory never removed.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    doc = copy.deepcopy(KUBECONFIG)
    doc["users"][0]["user"] = {
        "client-certificate-data": _b64(b"CERT"),
        "client-key-data": _b64(b"KEY"),
    }
    manager = MemoryCluster()
    clients = SecretClients(manager)
    for version in range(5):
        manager.put(_secret(yaml.safe_dump(doc), str(version)))
        clients("west")
    left = sorted(p.relative_to(tmp_path).parts[-1] for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["ca.crt", "tls.crt", "tls.key"]
    (key,) = tmp_path.rglob("tls.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    clients.close()
    assert list(tmp_path.iterdir()) == []
