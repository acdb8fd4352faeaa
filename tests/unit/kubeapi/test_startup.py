"""A process's start (`Kube.connect`): what the kubeconfig or the API server says wrong becomes
a `CredentialsError` (exit 3) or an `ApiUnreachable` (exit 4), each one line naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from chain import cli
from kubeapi import Kube
from kubeapi import client as kubeclient
from kubeapi.client import ApiUnreachable
from kubeapi.credentials import CredentialsError, from_kubeconfig, in_cluster
from tests.unit.kubeapi.test_credentials import Scripted

CONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://c:6443"}}],
    "users": [{"name": "u", "user": {"token": "t"}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
}


def test_the_errors_carry_the_documented_exit_statuses() -> None:
    assert CredentialsError.code == cli.EXIT_CONFIGURATION == 3
    assert ApiUnreachable.code == cli.EXIT_UNREACHABLE == 4


def test_a_context_named_needs_no_current_context(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(CONFIG))
    with pytest.raises(CredentialsError, match="no current context"):
        from_kubeconfig(str(path))
    assert from_kubeconfig(str(path), context="ctx").server == "https://c:6443"


def test_a_list_may_name_missing_files_but_not_only_those(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({**CONFIG, "current-context": "ctx"}))
    gone = tmp_path / "gone"
    assert from_kubeconfig(f"{gone}{os.pathsep}{path}").server == "https://c:6443"
    listed = f"{gone}{os.pathsep}{tmp_path / 'also-gone'}"
    with pytest.raises(CredentialsError, match="none of these files exists"):
        from_kubeconfig(listed)


def test_no_kubeconfig_at_all_says_what_was_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(CredentialsError) as failed:
        Kube.connect()
    assert str(failed.value) == (
        "kubeconfig ~/.kube/config: no such file (and neither $KUBECONFIG nor a Pod's service "
        "account to use instead)"
    )


def test_a_pod_without_a_mounted_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(CredentialsError, match="no token to read"):
        in_cluster(tmp_path)


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (401, CredentialsError, "credentials refused (401)"),
        (403, CredentialsError, "credentials refused (403)"),
        (404, CredentialsError, "answered 404: not an API server?"),
        (503, ApiUnreachable, "answered 503"),
    ],
)
def test_what_the_server_answers_at_start_up(
    status: int,
    error: type[cli.Failure],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kubeclient, "BACKOFF", (0.01, 0.02))
    api = Scripted([(status, {}, {})] * kubeclient.ATTEMPTS)
    try:
        kube = api.kube()
        with pytest.raises(error) as failed:
            kube.check_reachable()
        assert str(failed.value) == f"API server {kube.server}: {message}"
    finally:
        api.close()


def test_a_server_that_answers_is_reachable() -> None:
    api = Scripted([(200, {}, {"major": "1", "minor": "36"})])
    try:
        api.kube().check_reachable()
        assert [method for method, _ in api.seen] == ["GET"]
    finally:
        api.close()


def test_tls_spoken_to_a_plain_port_is_a_configuration_error() -> None:
    api = Scripted([(200, {}, {})] * kubeclient.ATTEMPTS)
    try:
        plain = api.kube().server.replace("http://", "https://")
        with pytest.raises(CredentialsError) as failed:
            Kube(plain, ca=False).check_reachable()
        assert str(failed.value) == f"API server {plain}: TLS failed: wrong version number"
    finally:
        api.close()
