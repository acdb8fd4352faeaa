"""A small Kubernetes REST client over `requests`.

It resolves kinds through discovery, so callers apply any object (server-side apply) without
generated client classes. Credentials come from `kubeapi.credentials`: any kubeconfig `kubectl`
reads, or inside a Pod the mounted service-account token. Requests the server throttled (429)
are sent again after its `Retry-After`; idempotent ones also after a 5xx or a lost connection,
backing off. LISTs are read in pages of `PAGE_SIZE`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml

import logline as logs
from chain import cli
from chain.cli import Unreachable
from kubeapi import credentials
from kubeapi.credentials import SERVICE_ACCOUNT, Credentials, CredentialsError

T = TypeVar("T")
Obj = dict[str, Any]

PAGE_SIZE = 500
"""Objects per LIST page: a large list never arrives as one response."""
ATTEMPTS = 4
"""Tries of a request the server throttled or failed transiently (the first included)."""
BACKOFF = (0.1, 2.0)
"""Seconds before the second try, and the longest wait between tries (each shortened by the
jitter, `jittered`)."""
JITTER = 0.5
"""Each backoff wait is shortened by up to this fraction, at random. Without it every agent of
a 1,000-node cluster whose API server failed the same moment would retry on the same doubling
steps, 1,000 requests at once each time; with it they are spread over half of each step
(client-go's reflector spreads its own the other way, up to twice the step)."""


def jittered(delay: float, draw: Callable[[], float] | None = None) -> float:
    """`delay` shortened by `JITTER` times `draw()`, in [0, 1) (`random.random` unless given):
    the wait a backoff step takes."""
    return delay * (1 - JITTER * (draw or random.random)())


RETRY_AFTER_MAX = 10.0
"""The longest `Retry-After` honoured; a longer one fails the request instead."""
STARTUP_TIMEOUT = 5.0
"""Seconds one try of the start-up check (`Kube.connect`) waits for the API server. With the
transport's `ATTEMPTS` tries, a refused connection is told in under a second and a server that
never answers in about 20 seconds, not after the 30-second timeout of every request, 4 times."""
TRANSIENT = frozenset({500, 502, 503, 504})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "PATCH"})
"""Methods sent again after a 5xx or a lost connection (our PATCHes are merge patches and
server-side applies: the same body twice gives the same object). A POST is sent again only
after a 429, which the server answers before doing anything."""


class ApiUnreachable(Unreachable):
    """The API server did not answer the start-up check (exit 4, `chain.cli`)."""


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
        ca: Path | str | bool = True,
        cert: Path | None = None,
        key: Path | None = None,
        token_file: Path | None = None,
        timeout: float = 30.0,
        authorization: Callable[[], str | None] | None = None,
        proxy: str | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.session = requests.Session()
        # Otherwise REQUESTS_CA_BUNDLE from the environment silently replaces our CA; the
        # environment's proxies are taken explicitly below, NO_PROXY included.
        self.session.trust_env = False
        self.session.verify = ca if isinstance(ca, bool) else str(ca)
        if cert is not None and key is not None:
            self.session.cert = (str(cert), str(key))
        if proxy:
            self.session.proxies = {"http": proxy, "https": proxy}
        else:
            self.session.proxies = requests.utils.get_environ_proxies(self.server)
        if authorization is None and token_file is not None:
            # Read again every call: projected service-account tokens are rotated on disk.
            path = token_file

            def authorization() -> str | None:
                return f"Bearer {path.read_text().strip()}"

        self.authorization = authorization
        self.timeout = timeout
        self.attempts = ATTEMPTS
        self._resources: dict[tuple[str, str], Resource] = {}

    @classmethod
    def from_credentials(cls, found: Credentials, timeout: float = 30.0) -> Kube:
        cert = (Path(found.cert[0]), Path(found.cert[1])) if found.cert else (None, None)
        return cls(
            found.server,
            found.verify,
            cert[0],
            cert[1],
            timeout=timeout,
            authorization=found.authorization,
            proxy=found.proxy,
        )

    @classmethod
    def from_kubeconfig(cls, path: Path | str | None = None, context: str | None = None) -> Kube:
        """Any kubeconfig `kubectl` reads (`kubeapi.credentials.from_kubeconfig`)."""
        return cls.from_credentials(
            credentials.from_kubeconfig(str(path) if path else None, context)
        )

    @classmethod
    def in_cluster(cls, secrets: Path = SERVICE_ACCOUNT) -> Kube:
        """Inside a Pod: the API server from the environment, the mounted token and CA."""
        return cls.from_credentials(credentials.in_cluster(secrets))

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None, context: str | None = None) -> Kube:
        """`kubeconfig` (or $KUBECONFIG, a list allowed) when given; else inside a Pod its
        service account; else `~/.kube/config`."""
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path or "KUBERNETES_SERVICE_HOST" not in os.environ:
            return cls.from_kubeconfig(path, context)
        return cls.in_cluster()

    @classmethod
    def connect(cls, kubeconfig: str | None = None, timeout: float = STARTUP_TIMEOUT) -> Kube:
        """A process's start: `from_environment`, then `check_reachable`, so that a process
        that cannot work says why at once (a `CredentialsError` or `ApiUnreachable`) instead of
        starting its threads to log failed requests until someone reads them."""
        kube = cls.from_environment(kubeconfig)
        kube.check_reachable(timeout)
        return kube

    def check_reachable(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Ask the server its version (readable with any credentials, `system:public-info-
        viewer`), tried as any GET is, each try waiting at most `timeout` seconds. Raises
        `ApiUnreachable` when no answer comes (or only 5xx), `CredentialsError` when the
        answer says the configuration is wrong: a certificate not trusted, credentials refused,
        a file the kubeconfig names missing, something that is no API server."""
        where = f"API server {self.server or '(none)'}"
        try:
            resp = self._send("GET", "/version", None, "application/json", None, timeout)
        except requests.exceptions.SSLError as err:
            raise CredentialsError(f"{where}: TLS failed: {_reason(err)}") from None
        except (requests.ConnectionError, requests.Timeout) as err:
            raise ApiUnreachable(f"{where}: unreachable: {_reason(err)}") from None
        except requests.RequestException as err:  # no URL: InvalidURL, MissingSchema, ...
            raise CredentialsError(f"{where}: {err}") from None
        except OSError as err:  # a CA bundle, client certificate or token file gone
            raise CredentialsError(f"{where}: {err}") from None
        if resp.status_code in (401, 403):
            raise CredentialsError(f"{where}: credentials refused ({resp.status_code})")
        if resp.status_code >= 500:
            raise ApiUnreachable(f"{where}: answered {resp.status_code}")
        if resp.status_code >= 400:
            raise CredentialsError(f"{where}: answered {resp.status_code}: not an API server?")

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
        resp = self._send(method, path, data, content_type, params)
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

    def _send(
        self,
        method: str,
        path: str,
        data: Any,
        content_type: str,
        params: dict[str, str] | None,
        timeout: float | None = None,
    ) -> requests.Response:
        """One request, sent again while the server throttles it or (idempotent ones) fails
        it transiently, up to `attempts` tries, each waiting `timeout` (default the client's)."""
        delay = BACKOFF[0]
        for attempt in range(1, self.attempts + 1):
            last = attempt == self.attempts
            try:
                resp = self.session.request(
                    method,
                    self.server + path,
                    data=data,
                    params=params,
                    headers=self._headers(content_type),
                    timeout=timeout or self.timeout,
                )
            except requests.ConnectionError:
                if last or method not in IDEMPOTENT:
                    raise
                time.sleep(jittered(delay))
                delay = min(delay * 2, BACKOFF[1])
                continue
            if last:
                return resp
            if resp.status_code == 429:
                wait = retry_after(resp, delay)
                if wait is None:
                    return resp
                time.sleep(wait)
            elif resp.status_code in TRANSIENT and method in IDEMPOTENT:
                time.sleep(jittered(delay))
            else:
                return resp
            delay = min(delay * 2, BACKOFF[1])
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.authorization is not None and (value := self.authorization()):
            headers["Authorization"] = value
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
        """The whole list, `metadata.resourceVersion` included (where a watch starts from),
        read in pages of `PAGE_SIZE`: every page is of the first page's snapshot, so the
        version stands for all of them."""
        res = self.resource(api_version, kind)
        params = {"limit": str(PAGE_SIZE)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        listing: Obj = self.request("GET", res.path(namespace), params=params)
        items = list(listing.get("items") or [])
        page = listing
        while token := (page.get("metadata") or {}).get("continue"):
            page = self.request("GET", res.path(namespace), params={**params, "continue": token})
            items.extend(page.get("items") or [])
        listing["items"] = items
        listing.setdefault("metadata", {}).pop("continue", None)
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


def retry_after(resp: requests.Response, default: float) -> float | None:
    """Seconds to wait before sending a throttled request again: the server's `Retry-After`
    (seconds), else `default`; None when the server asks for longer than `RETRY_AFTER_MAX`."""
    raw = resp.headers.get("Retry-After", "")
    try:
        wait = float(raw) if raw else default
    except ValueError:
        wait = default
    return None if wait > RETRY_AFTER_MAX else max(wait, 0.0)


def add_kubeconfig_flag(parser: argparse.ArgumentParser) -> None:
    """`--kubeconfig`, as every process that talks to the API server takes it: the value for
    `Kube.connect` (`from_environment` says what stands in when it is not given)."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="the cluster to work on (default: $KUBECONFIG, else the Pod's service account, "
        "else ~/.kube/config)",
    )


def kube_parser(prog: str, description: str) -> cli.Parser:
    """The command line of a process that talks to the API server: the chain's conventions
    (`chain.cli`), the exit statuses 3 and 4 in its help, and `--kubeconfig`."""
    parser = cli.parser(prog, description, cli.exits(kube=True))
    add_kubeconfig_flag(parser)
    return parser


def run_connected(
    parser: cli.Parser,
    argv: Sequence[str] | None,
    body: Callable[[Kube, argparse.Namespace], int | None],
) -> int:
    """A process's main: its flags parsed, then `Kube.connect`, so that a kubeconfig or an API
    server that cannot work is one line and exit 3 or 4 before anything starts (the logs set up
    after it, so that line is not a log line), then `body` until it returns."""
    args = parser.parse(argv)

    def start() -> int | None:
        kube = Kube.connect(args.kubeconfig)
        logs.setup()
        return body(kube, args)

    return cli.run(parser.label, start)


def _reason(err: requests.RequestException) -> str:
    """The cause in a transport error, not urllib3's layers of wrapping around it: `Connection
    refused`, `Name or service not known`, `certificate verify failed: self-signed ...`."""
    text = str(err)
    if found := re.findall(r"\[Errno -?\d+\] ([^'\"()\]]+)", text):
        return str(found[-1]).strip()
    if found := re.findall(r"\[SSL: \w+\] ([^'\"()]+)", text):
        return str(found[-1]).strip()
    if isinstance(err, requests.Timeout):
        return "no answer in time"
    return " ".join(text.split())


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
