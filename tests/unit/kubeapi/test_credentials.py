"""Every kubeconfig shape a user brings, in-cluster credentials, and the transport's retries and
pages, against small local servers."""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from kubeapi import Kube, KubeError
from kubeapi import client as kubeclient
from kubeapi.credentials import from_kubeconfig, in_cluster

Obj = dict[str, Any]
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _write(path: Path, config: Obj) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def _config(clusters: list[Obj], users: list[Obj], contexts: list[Obj], current: str | None) -> Obj:
    config: Obj = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
    }
    if current:
        config["current-context"] = current
    return config


def _context(name: str, cluster: str, user: str) -> Obj:
    return {"name": name, "context": {"cluster": cluster, "user": user}}


def test_the_current_context_is_the_one_used_not_the_first(tmp_path: Path) -> None:
    config = _config(
        [
            {"name": "staging", "cluster": {"server": "https://staging:6443"}},
            {"name": "prod", "cluster": {"server": "https://prod:6443"}},
        ],
        [
            {"name": "s", "user": {"token": "staging-token"}},
            {"name": "p", "user": {"token": "prod-token"}},
        ],
        [_context("staging", "staging", "s"), _context("prod", "prod", "p")],
        "prod",
    )
    found = from_kubeconfig(str(_write(tmp_path / "config", config)))
    assert found.server == "https://prod:6443"
    assert found.authorization() == "Bearer prod-token"
    named = from_kubeconfig(str(tmp_path / "config"), context="staging")
    assert named.server == "https://staging:6443"


def test_embedded_authority_and_client_pair_as_kind_and_eks_write_them(tmp_path: Path) -> None:
    config = _config(
        [
            {
                "name": "kind",
                "cluster": {
                    "server": "https://127.0.0.1:39999",
                    "certificate-authority-data": _b64(PEM),
                },
            }
        ],
        [
            {
                "name": "kind",
                "user": {
                    "client-certificate-data": _b64(PEM),
                    "client-key-data": _b64("-----BEGIN KEY-----\nx\n-----END KEY-----\n"),
                },
            }
        ],
        [_context("kind-kind", "kind", "kind")],
        "kind-kind",
    )
    found = from_kubeconfig(str(_write(tmp_path / "config", config)))
    assert isinstance(found.verify, str) and Path(found.verify).read_text() == PEM
    assert found.cert is not None and Path(found.cert[0]).read_text() == PEM
    assert found.authorization() is None
    kube = Kube.from_credentials(found)
    assert kube.session.verify == found.verify and kube.session.cert == found.cert


def test_an_exec_plugin_supplies_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-the-plugin"},
    }
    plugin.write_text(f"import json\nprint(json.dumps({credential!r}))\n")
    config = _config(
        [
            {
                "name": "eks",
                "cluster": {"server": "https://eks:443", "insecure-skip-tls-verify": True},
            }
        ],
        [
            {
                "name": "eks",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": sys.executable,
                        "args": [str(plugin)],
                    }
                },
            }
        ],
        [_context("eks", "eks", "eks")],
        "eks",
    )
    found = from_kubeconfig(str(_write(tmp_path / "config", config)))
    assert found.authorization() == "Bearer from-the-plugin"
    assert found.verify is False


def test_a_kubeconfig_list_is_merged_and_proxy_url_is_kept(tmp_path: Path) -> None:
    first = _write(
        tmp_path / "a",
        _config(
            [{"name": "c", "cluster": {"server": "http://c:8080", "proxy-url": "http://px:3128"}}],
            [],
            [_context("ctx", "c", "u")],
            "ctx",
        ),
    )
    second = _write(
        tmp_path / "b",
        _config([], [{"name": "u", "user": {"token": "t"}}], [], None),
    )
    found = from_kubeconfig(f"{first}:{second}")
    assert (found.server, found.proxy, found.authorization()) == (
        "http://c:8080",
        "http://px:3128",
        "Bearer t",
    )
    kube = Kube.from_credentials(found)
    assert kube.session.proxies == {"http": "http://px:3128", "https": "http://px:3128"}


def test_the_environments_proxies_apply_unless_no_proxy_names_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://corp:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert Kube("https://api.example:6443").session.proxies.get("https") == "http://corp:3128"
    assert Kube("https://k8s.internal.example:6443").session.proxies == {}


def test_in_cluster_reads_the_rotated_token_on_every_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text(PEM)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    found = in_cluster(tmp_path)
    assert found.server == "https://[fd00::1]:443"
    assert found.authorization() == "Bearer first"
    (tmp_path / "token").write_text("rotated")
    assert found.authorization() == "Bearer rotated"


# --- retries and pages ------------------------------------------------------------------------


class Scripted:
    """A local server answering each request with the next scripted (status, headers, body)."""

    def __init__(self, script: list[tuple[int, dict[str, str], Obj]]) -> None:
        self.script = list(script)
        self.seen: list[tuple[str, dict[str, list[str]]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                url = urlparse(self.path)
                server.seen.append((self.command, parse_qs(url.query)))
                status, headers, body = server.script.pop(0)
                data = json.dumps(body).encode()
                self.send_response(status)
                for key, value in {**headers, "Content-Type": "application/json"}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _answer

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def kube(self) -> Kube:
        return Kube(f"http://127.0.0.1:{self.http.server_address[1]}")

    def close(self) -> None:
        self.http.shutdown()


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(kubeclient, "BACKOFF", (0.01, 0.02))
    yield


def test_a_throttled_request_waits_retry_after_and_is_sent_again(fast: None) -> None:
    api = Scripted([(429, {"Retry-After": "0.2"}, {}), (201, {}, {"ok": True})])
    try:
        started = time.monotonic()
        assert api.kube().request("POST", "/api/v1/namespaces/x/pods", body={}) == {"ok": True}
        assert time.monotonic() - started >= 0.2
        assert [method for method, _ in api.seen] == ["POST", "POST"]
    finally:
        api.close()


def test_a_5xx_is_retried_for_a_get_but_never_for_a_post(fast: None) -> None:
    api = Scripted([(503, {}, {}), (200, {}, {"ok": 1}), (503, {}, {"message": "busy"})])
    try:
        assert api.kube().request("GET", "/api/v1/pods") == {"ok": 1}
        with pytest.raises(KubeError) as failed:
            api.kube().request("POST", "/api/v1/namespaces/x/pods", body={})
        assert failed.value.status == 503
        assert len(api.seen) == 3
    finally:
        api.close()


def test_retries_back_off_doubling_capped_and_shortened_by_the_jitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The waits are recorded, not slept: each step less `JITTER` times the draw."""
    monkeypatch.setattr(kubeclient, "BACKOFF", (1.0, 2.0))
    monkeypatch.setattr(kubeclient, "ATTEMPTS", 4)
    draws = iter([0.0, 1.0, 0.5])
    monkeypatch.setattr(kubeclient.random, "random", lambda: next(draws))
    waits: list[float] = []
    monkeypatch.setattr(kubeclient.time, "sleep", waits.append)
    api = Scripted([(503, {}, {}), (502, {}, {}), (503, {}, {}), (200, {}, {"ok": 1})])
    try:
        assert api.kube().request("GET", "/api/v1/pods") == {"ok": 1}
    finally:
        api.close()
    assert waits == pytest.approx(
        [1.0, 2.0 * (1 - kubeclient.JITTER), 2.0 * (1 - kubeclient.JITTER / 2)]
    )


def test_a_list_is_read_in_pages_and_keeps_the_first_pages_version(fast: None) -> None:
    discovery = {"resources": [{"name": "pods", "kind": "Pod", "namespaced": True}]}
    page = {
        "metadata": {"resourceVersion": "7", "continue": "next"},
        "items": [{"metadata": {"name": "a"}}],
    }
    last = {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "b"}}]}
    api = Scripted([(200, {}, discovery), (200, {}, page), (200, {}, last)])
    try:
        listing = api.kube().list_object("v1", "Pod", label_selector="x=y")
        assert [i["metadata"]["name"] for i in listing["items"]] == ["a", "b"]
        assert listing["metadata"] == {"resourceVersion": "7"}
        first, second = api.seen[1][1], api.seen[2][1]
        assert first == {"limit": [str(kubeclient.PAGE_SIZE)], "labelSelector": ["x=y"]}
        assert second == {**first, "continue": ["next"]}
    finally:
        api.close()
