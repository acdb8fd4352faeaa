"""A small Kubernetes REST client for the testbed and the e2e tests.

It speaks plain HTTPS with the admin client certificate and resolves kinds through discovery,
so tests can apply any manifest (server-side apply) without generated client classes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml

T = TypeVar("T")
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
    def __init__(self, server: str, ca: Path, cert: Path, key: Path, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.session = requests.Session()
        # Otherwise REQUESTS_CA_BUNDLE and proxy variables from the environment silently
        # replace our CA and route loopback traffic.
        self.session.trust_env = False
        self.session.verify = str(ca)
        self.session.cert = (str(cert), str(key))
        self.timeout = timeout
        self._resources: dict[tuple[str, str], Resource] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        cfg = yaml.safe_load(path.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        return cls(
            cluster["server"],
            Path(cluster["certificate-authority"]),
            Path(user["client-certificate"]),
            Path(user["client-key"]),
        )

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
            headers={"Content-Type": content_type, "Accept": "application/json"},
            timeout=self.timeout,
        )
        if resp.status_code == 404 and ok_missing:
            return None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise KubeError(resp.status_code, message)
        return resp.json() if resp.content else None

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
    ) -> list[Obj]:
        res = self.resource(api_version, kind)
        params = {"labelSelector": label_selector} if label_selector else None
        items: list[Obj] = self.request("GET", res.path(namespace), params=params)["items"]
        return items

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
