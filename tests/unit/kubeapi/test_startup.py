"""A process's start (`Kube.connect`): what the kubeconfig or the API server says wrong becomes
a `CredentialsError` (exit 3) or an `ApiUnreachable` (exit 4), each one line naming it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from chain import cli
from kubeapi import Kube
from kubeapi import client as kubeclient
from kubeapi.client import ApiUnreachable
from kubeapi.credentials import NO_LOADER, CredentialsError, from_kubeconfig, in_cluster
from tests.unit.kubeapi.test_credentials import PEM, Scripted

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


def hide_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the image, which installs the chain without its `kubeconfig` extra: the
    `kubernetes` package and every module of it cannot be imported."""
    loaded = [name for name in sys.modules if name.split(".")[0] == "kubernetes"]
    names = ["kubernetes.client", "kubernetes.config", "kubernetes.config.kube_config"]
    for name in {"kubernetes", *names, "kubernetes.config.config_exception", *loaded}:
        monkeypatch.setitem(sys.modules, name, None)


def test_a_kubeconfig_without_the_kubernetes_package_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({**CONFIG, "current-context": "ctx"}))
    hide_kubernetes(monkeypatch)
    with pytest.raises(CredentialsError) as failed:
        from_kubeconfig(str(path))
    assert (
        str(failed.value)
        == NO_LOADER
        == (
            "reading a kubeconfig needs the kubernetes package: "
            "pip install 'gpustack-chain[kubeconfig]'"
        )
    )
    assert failed.value.code == cli.EXIT_CONFIGURATION


def test_a_pod_needs_no_kubernetes_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("t\n")
    (tmp_path / "ca.crt").write_text(PEM)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    # Where `Kube.in_cluster` looks by default (the Pod's mount), here the fake one.
    monkeypatch.setattr(Kube.in_cluster.__func__, "__defaults__", (tmp_path,))  # type: ignore[attr-defined]
    hide_kubernetes(monkeypatch)
    found = in_cluster(tmp_path)
    assert (found.server, found.verify) == ("https://10.0.0.1:6443", str(tmp_path / "ca.crt"))
    assert found.authorization() == "Bearer t"
    assert Kube.from_environment().server == "https://10.0.0.1:6443"


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
