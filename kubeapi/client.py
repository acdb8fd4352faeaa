"""A small Kubernetes REST client over `requests`.

It resolves kinds through discovery, so callers apply any object (server-side apply) without
generated client classes. Credentials come from a kubeconfig (client certificate or bearer
token) or, inside a Pod, from the mounted service-account token.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml

T = TypeVar("T")
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
Obj = dict[str, Any]


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Resource:
    plural: str
    namespaced: bool
    api_version: str

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class Kube:
    def __init__(
        self,
        server: str,
        ca: Path,
        cert: Path | None = None,
        key: Path | None = None,
        token_file: Path | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.server = server.rstrip("/")
        self.session = requests.Session()
        # Otherwise REQUESTS_CA_BUNDLE and proxy variables from the environment silently
        # replace our CA and route loopback traffic.
        self.session.trust_env = False
        self.session.verify = str(ca)
        if cert is not None and key is not None:
            self.session.cert = (str(cert), str(key))
        self.token_file = token_file
        self.timeout = timeout
        self._resources: dict[tuple[str, str], Resource] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        cfg = yaml.safe_load(path.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        cert, key = user.get("client-certificate"), user.get("client-key")
        return cls(
            cluster["server"],
            Path(cluster["certificate-authority"]),
            Path(cert) if cert else None,
            Path(key) if key else None,
            Path(user["tokenFile"]) if user.get("tokenFile") else None,
        )

    @classmethod
    def in_cluster(cls, secrets: Path = SERVICE_ACCOUNT) -> Kube:
        """Inside a Pod: the API server from the environment, the mounted token and CA."""
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", secrets / "ca.crt", token_file=secrets / "token")

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None) -> Kube:
        """`kubeconfig` (or $KUBECONFIG) when given, else the in-cluster service account."""
        path = kubeconfig or os.environ.get("KUBECONFIG")
        return cls.from_kubeconfig(Path(path)) if path else cls.in_cluster()

    # -- transport ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        ok_missing: bool = False,
    ) -> Any:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
        resp = self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers=self._headers(content_type),
            timeout=self.timeout,
        )
        if resp.status_code == 404 and ok_missing:
            return None
        _raise_for(resp)
        return resp.json() if resp.content else None

    def stream(self, path: str, params: dict[str, str], read_timeout: float) -> requests.Response:
        """An open streaming GET (a watch); the caller reads its lines and closes it."""
        resp = self.session.get(
            self.server + path,
            params=params,
            headers=self._headers("application/json"),
            timeout=(self.timeout, read_timeout),
            stream=True,
        )
        if resp.status_code >= 400:
            try:
                _raise_for(resp)
            finally:
                resp.close()
        return resp

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token_file is not None:
            # Re-read every call: projected service-account tokens are rotated on disk.
            headers["Authorization"] = f"Bearer {self.token_file.read_text().strip()}"
        return headers

    # -- discovery ------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self._resources:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self.request("GET", path)
            for item in listing.get("resources", []):
                if "/" not in item["name"]:
                    self._resources[(api_version, item["kind"])] = Resource(
                        item["name"], item["namespaced"], api_version
                    )
        if key not in self._resources:
            raise KubeError(404, f"no resource for kind {kind} in {api_version}")
        return self._resources[key]

    def forget_discovery(self) -> None:
        self._resources.clear()

    # -- verbs ----------------------------------------------------------------------------

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        res = self.resource(api_version, kind)
        found: Obj | None = self.request("GET", res.path(namespace, name), ok_missing=True)
        return found

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Obj]:
        items: list[Obj] = self.list_object(
            api_version, kind, namespace, label_selector, field_selector
        )["items"]
        return items

    def list_object(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Obj:
        """The whole list, `metadata.resourceVersion` included (where a watch starts from)."""
        res = self.resource(api_version, kind)
        params = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        listing: Obj = self.request("GET", res.path(namespace), params=params or None)
        return listing

    def apply(
        self, obj: Obj, manager: str = "gpustack-testbed", subresource: str | None = None
    ) -> Obj:
        """Server-side apply with force: the caller's field manager owns what it sends."""
        meta = obj["metadata"]
        res = self.resource(obj["apiVersion"], obj["kind"])
        path = res.path(meta.get("namespace"), meta["name"])
        if subresource:
            path += f"/{subresource}"
        result: Obj = self.request(
            "PATCH",
            path,
            body=json.dumps(obj).encode(),
            content_type="application/apply-patch+yaml",
            params={"fieldManager": manager, "force": "true"},
        )
        return result

    def apply_all(self, objs: Iterable[Obj], manager: str = "gpustack-testbed") -> None:
        for obj in objs:
            self.apply(obj, manager)

    def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        res = self.resource(obj["apiVersion"], obj["kind"])
        created: Obj = self.request("POST", res.path(meta.get("namespace")), body=obj)
        return created

    def replace(self, obj: Obj) -> Obj:
        """PUT the whole object; its `metadata.resourceVersion` makes a stale write a 409."""
        meta = obj["metadata"]
        res = self.resource(obj["apiVersion"], obj["kind"])
        path = res.path(meta.get("namespace"), meta["name"])
        replaced: Obj = self.request("PUT", path, body=obj)
        return replaced

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        res = self.resource(api_version, kind)
        path = res.path(namespace, name) + (f"/{subresource}" if subresource else "")
        result: Obj = self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )
        return result

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        res = self.resource(api_version, kind)
        self.request(
            "DELETE",
            res.path(namespace, name),
            body={"propagationPolicy": "Background"},
            ok_missing=True,
        )


def _raise_for(resp: requests.Response) -> None:
    if resp.status_code < 400:
        return
    try:
        message = resp.json().get("message", resp.text)
    except ValueError:
        message = resp.text
    raise KubeError(resp.status_code, message)


def load_yaml_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll until `probe` returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (KubeError, requests.RequestException) as err:
            last_error = err
        time.sleep(interval)
    suffix = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
