"""Start and stop the real control plane the e2e tests run on.

One `Testbed` is one run folder: certificates, a kubeconfig, each component's log and a state
file. Components are plain child processes, each in its own session, on free loopback ports, so
several testbeds can live on one machine and `down` can always find what it started.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import requests
import yaml

from chain.kueue_config import merged_configuration
from testbed import build, certs, network
from testbed.kube import Kube, KubeError, Obj, load_yaml_documents, wait_for
from testbed.nodes import node_object, register_node

STATE_FILE = "state.json"
KUEUE_NAMESPACE = "kueue-system"
# Kueue reads its metrics certificate from this fixed path when internal cert management is off.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
# Kueue webhooks we install: its own API and the job framework the testbed enables. The
# others would answer 404 for frameworks that are off and, being failurePolicy Fail, block
# creating Deployments or Pods for no reason.
KUEUE_WEBHOOK_GROUPS = ("kueue.x-k8s.io", "batch")
COMPONENT_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kueue",
    "metacontroller",
    "nfd-master",
)
LOG_TAIL_LINES = 80
# The chain's Kueue Configuration fragment; the testbed's Kueue runs with it merged in.
KUEUE_FRAGMENT = (
    Path(__file__).resolve().parent.parent / "manifests" / "kueue" / "configuration.yaml"
)
CONTROL_PLANE_NODE = "testbed-control-plane"
FRONT_PROXY_CLIENT = "front-proxy-client"


class ComponentDied(RuntimeError):
    def __init__(self, name: str, code: int | None, log_tail: str) -> None:
        super().__init__(
            f"testbed component {name} is not running (exit code {code})\n"
            f"--- last lines of {name}.log ---\n{log_tail}"
        )
        self.name = name


# Listening ports come from below the kernel's ephemeral range (32768-60999 here): a port the
# kernel hands out for an outgoing connection between our pick and the component's bind would
# make that component fail with "address already in use" (seen with real nodes, whose kubelets
# and kube-proxies open many connections).
_PORTS = range(20000, 32000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port no one listens on (on any address), never handed out before by this process."""
    for _ in range(1000):
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {_PORTS}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited child not yet reaped) counts as dead.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@dataclass
class Process:
    name: str
    argv: list[str]
    log: str
    pid: int = 0
    started: float = 0.0
    exe: str = ""  # the program that ends up running, when argv[0] execs it (nsenter, ...)


@dataclass
class State:
    root: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    real_nodes: bool = False  # with a node network (testbed/network.py) in `slot`
    slot: int = -1
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # testbed/realnode.py

    def save(self) -> None:
        Path(self.root, STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, root: Path) -> State:
        raw = json.loads((root / STATE_FILE).read_text())
        procs = {k: Process(**v) for k, v in raw.pop("processes").items()}
        return cls(processes=procs, **raw)


class Testbed:
    """A control plane in `root`. `up()` starts it; `down()` stops it and removes `root`."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self, root: Path, nfd_extra_label_ns: tuple[str, ...] = (), real_nodes: bool = False
    ) -> None:
        """`real_nodes`: the control plane is also reached from a Pod network (the node bridge,
        the `kubernetes` Service, a scheduler, every default controller), so that
        `testbed.realnode` nodes can join it."""
        self.root = root
        self.state = State(str(root), real_nodes=real_nodes)
        self.nfd_extra_label_ns = nfd_extra_label_ns
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._kube: Kube | None = None
        self._before_down: list[Callable[[], None]] = []

    # -- paths ----------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def certs(self) -> certs.CertPaths:
        d = self.root / "certs"
        return certs.CertPaths(
            d / "ca.crt",
            d / "ca.key",
            d / "serving.crt",
            d / "serving.key",
            d / "admin.crt",
            d / "admin.key",
            d / "sa.key",
            d / "sa.pub",
        )

    @property
    def network(self) -> network.Network:
        return network.Network(self.state.slot)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state.ports['apiserver']}"

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube.from_kubeconfig(self.kubeconfig)
        return self._kube

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def attach(cls, root: Path) -> Testbed:
        """A handle on a testbed that another process started (the CLI's `status`/`down`)."""
        bed = cls(root)
        bed.state = State.load(root)
        return bed

    def up(self, timeout: float = 120.0, components: tuple[str, ...] = COMPONENT_ORDER) -> None:
        """Start `components`, in COMPONENT_ORDER's order: etcd, the API server and the controller
        manager always; of Kueue, Metacontroller and NFD master any (the CRDs of all three are
        installed as soon as one of them is, or with real nodes, whose installs run them in
        Pods)."""
        base = COMPONENT_ORDER[:3]
        ordered = tuple(c for c in COMPONENT_ORDER if c in components)
        started = tuple(c for c in components if c in base)
        controllers = len(components) > len(started)
        if (
            ordered != tuple(components)
            or started != base[: len(started)]
            or (controllers and started != base)
        ):
            raise ValueError(
                f"components: a prefix of {base}, then any of {COMPONENT_ORDER[3:]} in order"
            )
        binaries = {name: build.binary(name) for name in components}
        missing = [str(p) for p in binaries.values() if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"testbed binaries missing (run `python -m testbed build`): {missing}"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        for port in (
            "etcd",
            "etcd_peer",
            "apiserver",
            "kcm",
            "scheduler",
            "kueue_webhook",
            "kueue_health",
            "kueue_metrics",
            "metacontroller",
            "nfd",
        ):
            self.state.ports[port] = free_port()
        real = self.state.real_nodes
        if real:
            self.state.slot = network.free_slot()
        certs.generate(self.root / "certs", self.network.api_server_sans() if real else ())
        self.state.save()
        steps = {
            "etcd": self._start_etcd,
            "kube-apiserver": self._start_apiserver,
            "kube-controller-manager": self._start_kcm,
            "kueue": self._start_kueue,
            "metacontroller": self._start_metacontroller,
            "nfd-master": self._start_nfd,
        }
        try:
            if real:
                network.create_bridge(self.network)
            crds_wanted = real or controllers
            for name in components:
                steps[name](binaries[name], timeout)
                if name == "kube-controller-manager" and crds_wanted:
                    # Kueue's CRDs (their conversion webhook pointed at this Kueue) only when it
                    # runs here; in a cluster, its release manifests bring their own.
                    self._install_crds(timeout, kueue="kueue" in components)
                if name == "kube-apiserver":
                    c = self.certs
                    self.write_kubeconfig(self.kubeconfig, self.server, c.admin_crt, c.admin_key)
                if name == "kube-controller-manager" and real:
                    self._start_scheduler(build.binary("kube-scheduler"), timeout)
        except BaseException:
            self.down(keep_root=True)
            raise

    def before_down(self, stop: Callable[[], None]) -> None:
        """Run `stop` first thing in `down` (in-process helpers that talk to the API server,
        so they end before it does instead of logging refused connections)."""
        self._before_down.append(stop)

    def down(self, keep_root: bool = False) -> None:
        """Stop every component (TERM, then KILL) and remove the run folder."""
        while self._before_down:
            self._before_down.pop()()
        if self.state.real_nodes:
            from testbed import realnode

            realnode.teardown(self)
        for proc in reversed(list(self.state.processes.values())):
            if proc.pid:
                self._stop(proc)
        for child in self._children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)
        self._children.clear()
        if not keep_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def stop(self, name: str) -> None:
        """Stop one process (a hook server, say) and forget it."""
        proc = self.state.processes.pop(name, None)
        if proc is not None:
            self._stop(proc)
            self._children.pop(name, None)
            self.state.save()

    def serve(
        self,
        name: str,
        app: str,
        tls: bool = False,
        env: dict[str, str] | None = None,
        workers: int = 1,
    ) -> str:
        """Serve a WSGI app (`module:attr`) with gunicorn on a free loopback port.

        The server is a testbed process like the others: its log is kept, attached to failing
        tests and checked for liveness. Returns its base URL.
        """
        import sys

        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            f"--bind=127.0.0.1:{port}",
            f"--workers={workers}",
            "--access-logfile=-",
            "--config=python:hooks.gunicorn_conf",
            "--graceful-timeout=2",
            app,
        ]
        scheme = "http"
        if tls:
            argv[3:3] = [
                f"--certfile={self.certs.serving_crt}",
                f"--keyfile={self.certs.serving_key}",
            ]
            scheme = "https"
        self._spawn(name, argv, env={"PYTHONPATH": str(Path.cwd()), **(env or {})})
        url = f"{scheme}://127.0.0.1:{port}"

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        self._wait_ready(name, listening, 30)
        return url

    def _stop(self, proc: Process) -> None:
        if not pid_alive(proc.pid) or not self._owns(proc):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(proc.pid):
            child = self._children.get(proc.name)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.1)
            else:
                time.sleep(0.1)
        if pid_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    @staticmethod
    def _owns(proc: Process) -> bool:
        """Guard against a recycled pid: only signal the binary we started."""
        try:
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            return False
        return cmdline.decode(errors="replace") == (proc.exe or proc.argv[0])

    def service_account_kubeconfig(
        self, namespace: str, name: str, node: str | None = None
    ) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount (a fresh bound token), to prove
        a component works with exactly the RBAC the manifests grant it. With `node`, the token
        is bound to that Node, so it names the node as the token a kubelet projects into a Pod
        on it does (what the node agent's admission policy requires)."""
        spec: dict[str, object] = {"expirationSeconds": 3600}
        if node is not None:
            found = self.kube.get("v1", "Node", node)
            assert found is not None, f"Node {node} must exist to bind a token to it"
            spec["boundObjectRef"] = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node,
                "uid": found["metadata"]["uid"],
            }
        token = self.kube.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )["status"]["token"]
        suffix = f"{namespace}-{name}" + (f"-{node}" if node else "")
        token_file = self.root / f"token-{suffix}"
        token_file.write_text(token)
        path = self.root / f"kubeconfig-{suffix}"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.certs.ca_crt),
                    },
                }
            ],
            "users": [{"name": name, "user": {"tokenFile": str(token_file)}}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": name}}],
            "current-context": "testbed",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    # -- health ---------------------------------------------------------------------------

    def dead(self) -> list[str]:
        return [n for n, p in self.state.processes.items() if not pid_alive(p.pid)]

    def check_alive(self) -> None:
        """Raise `ComponentDied` (with the component's log) if any component has exited."""
        for name in self.dead():
            child = self._children.get(name)
            code = child.poll() if child else None
            raise ComponentDied(name, code, self.log_tail(name))

    def log_tail(self, name: str, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def status(self) -> dict[str, str]:
        out = {}
        for name in dict.fromkeys([*COMPONENT_ORDER, *self.state.processes]):
            proc = self.state.processes.get(name)
            if proc is None:
                out[name] = "not started"
            else:
                out[name] = f"running (pid {proc.pid})" if pid_alive(proc.pid) else "exited"
        return out

    # -- components -----------------------------------------------------------------------

    def run(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Run a program of ours (the node agent, say) as a testbed process: its log is kept,
        attached to failing tests and checked for liveness; `stop(name)` ends it."""
        self._spawn(name, argv, env={"PYTHONPATH": str(Path.cwd()), **(env or {})})

    def spawn(
        self, name: str, argv: list[str], exe: str = "", env: dict[str, str] | None = None
    ) -> Process:
        """Start an upstream program as a testbed process (`exe`: what argv[0] execs)."""
        proc = self._spawn(name, argv, env)
        proc.exe = exe
        self.state.save()
        return proc

    def wait_ready(self, name: str, probe: Callable[[], object], timeout: float) -> None:
        self._wait_ready(name, probe, timeout)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        log = self.logs / f"{name}.log"
        with log.open("ab") as fh:
            child = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # its own process group: `down` kills the whole tree
            )
        self._children[name] = child
        proc = Process(name, argv, str(log), child.pid, time.time())
        self.state.processes[name] = proc
        self.state.save()
        return proc

    def _wait_ready(self, name: str, probe: Any, timeout: float) -> None:
        def ready() -> bool:
            self.check_alive()
            return bool(probe())

        try:
            wait_for(ready, timeout, f"{name} to become ready")
        except TimeoutError as err:
            raise TimeoutError(f"{err}\n--- {name}.log ---\n{self.log_tail(name)}") from None

    def _https_ok(self, url: str) -> bool:
        c = self.certs
        try:
            resp = requests.get(
                url, verify=str(c.ca_crt), cert=(str(c.admin_crt), str(c.admin_key)), timeout=2
            )
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def _start_etcd(self, binary: Path, timeout: float) -> None:
        port = self.state.ports["etcd"]
        url = f"http://127.0.0.1:{port}"
        self._spawn(
            "etcd",
            [
                str(binary),
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.state.ports['etcd_peer']}",
                "--unsafe-no-fsync=true",  # test data: durability buys nothing, fsync costs a lot
                "--quota-backend-bytes=4294967296",
            ],
        )

        def healthy() -> bool:
            try:
                return bool(requests.get(f"{url}/health", timeout=2).json().get("health") == "true")
            except (requests.RequestException, ValueError):
                return False

        self._wait_ready("etcd", healthy, timeout)

    def _apiserver_network_flags(self) -> list[str]:
        c = self.certs
        if not self.state.real_nodes:
            return [
                "--bind-address=127.0.0.1",
                # No default route on these machines: without this the server refuses to start.
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ]
        front_proxy = certs.issue(self.root / "certs", FRONT_PROXY_CLIENT, FRONT_PROXY_CLIENT)
        return [
            # Loopback for the host's clients, the bridge for the nodes and their Pods.
            "--bind-address=0.0.0.0",
            f"--advertise-address={self.network.host_ip}",  # the `kubernetes` Service's endpoint
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={c.admin_crt}",
            f"--kubelet-client-key={c.admin_key}",
            f"--kubelet-certificate-authority={c.ca_crt}",
            # Webhooks and aggregated APIs at their Pods' addresses: the host runs no kube-proxy.
            "--enable-aggregator-routing=true",
            # The front proxy: aggregated API servers (Kueue's visibility API) trust requests the
            # API server forwards with this client certificate and these headers; without it
            # they answer 403, and clients whose discovery must be complete (Metacontroller
            # v1.5.20) stop altogether.
            f"--proxy-client-cert-file={front_proxy[0]}",
            f"--proxy-client-key-file={front_proxy[1]}",
            f"--requestheader-client-ca-file={c.ca_crt}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ]

    def _start_apiserver(self, binary: Path, timeout: float) -> None:
        c = self.certs
        port = self.state.ports["apiserver"]
        self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers=http://127.0.0.1:{self.state.ports['etcd']}",
                *self._apiserver_network_flags(),
                f"--secure-port={port}",
                f"--tls-cert-file={c.serving_crt}",
                f"--tls-private-key-file={c.serving_key}",
                f"--client-ca-file={c.ca_crt}",
                "--authorization-mode=Node,RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--service-account-issuer=https://127.0.0.1:{port}",
                f"--service-account-key-file={c.sa_pub}",
                f"--service-account-signing-key-file={c.sa_key}",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
            ],
        )
        self._wait_ready("kube-apiserver", lambda: self._https_ok(f"{self.server}/readyz"), timeout)

    def write_kubeconfig(self, path: Path, server: str, crt: Path, key: Path) -> None:
        """A kubeconfig for `server` that authenticates with a client certificate."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {"server": server, "certificate-authority": str(self.certs.ca_crt)},
                }
            ],
            "users": [
                {"name": "user", "user": {"client-certificate": str(crt), "client-key": str(key)}}
            ],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "user"}}],
            "current-context": "testbed",
        }
        path.write_text(yaml.safe_dump(cfg))

    def _start_kcm(self, binary: Path, timeout: float) -> None:
        c = self.certs
        port = self.state.ports["kcm"]
        self._spawn(
            "kube-controller-manager",
            [
                str(binary),
                *self._controller_flags(port),
                # With real nodes, everything a cluster runs (node lifecycle, Deployments,
                # DaemonSets, Jobs, EndpointSlices, the root CA publisher, ...).
                "--controllers="
                + (
                    "*"
                    if self.state.real_nodes
                    else "namespace,garbagecollector,serviceaccount,serviceaccount-token"
                ),
                f"--cluster-signing-cert-file={c.ca_crt}",
                f"--cluster-signing-key-file={c.ca_key}",
                f"--root-ca-file={c.ca_crt}",
                f"--service-account-private-key-file={c.sa_key}",
                "--use-service-account-credentials=false",
            ],
        )
        self._wait_ready(
            "kube-controller-manager",
            lambda: self._https_ok(f"https://127.0.0.1:{port}/healthz"),
            timeout,
        )
        # The service-account controller creating `default` proves the controllers run.
        self._wait_ready(
            "kube-controller-manager",
            lambda: self.kube.get("v1", "ServiceAccount", "default", "default"),
            timeout,
        )

    def _controller_flags(self, port: int) -> list[str]:
        """What kube-controller-manager and kube-scheduler share: the admin kubeconfig for
        everything, no leader election, HTTPS health on a loopback port."""
        c = self.certs
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={c.serving_crt}",
            f"--tls-private-key-file={c.serving_key}",
        ]

    def _start_scheduler(self, binary: Path, timeout: float) -> None:
        port = self.state.ports["scheduler"]
        self._spawn("kube-scheduler", [str(binary), *self._controller_flags(port)])
        self._wait_ready(
            "kube-scheduler", lambda: self._https_ok(f"https://127.0.0.1:{port}/healthz"), timeout
        )

    # -- CRDs -----------------------------------------------------------------------------

    def _ca_bundle(self) -> str:
        import base64

        return base64.b64encode(self.certs.ca_crt.read_bytes()).decode()

    def kueue_crds(self) -> list[Obj]:
        crd_dir = build.module_dir("kueue") / "config/components/crd"
        crds = [
            doc
            for f in sorted((crd_dir / "bases").glob("*.yaml"))
            for doc in load_yaml_documents(f)
        ]
        # Upstream's kustomization names the CRDs that get a conversion webhook, one patch each
        # (patches/webhook_in_<plural>.yaml); a patch file it does not list is not applied.
        kustomization = load_yaml_documents(crd_dir / "kustomization.yaml")[0]
        converted = {
            m.group(1)
            for patch in kustomization.get("patches") or []
            if (m := re.fullmatch(r"patches/webhook_in_(.+)\.yaml", patch.get("path", "")))
        }
        url = f"https://127.0.0.1:{self.state.ports['kueue_webhook']}/convert"
        for crd in crds:
            if crd["spec"]["names"]["plural"] in converted:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": url, "caBundle": self._ca_bundle()},
                        "conversionReviewVersions": ["v1"],
                    },
                }
        return crds

    def kueue_webhooks(self) -> list[Obj]:
        src = build.module_dir("kueue") / "config/components/webhook/manifests.yaml"
        out = []
        for doc in load_yaml_documents(src):
            doc = copy.deepcopy(doc)
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            hooks = []
            for hook in doc["webhooks"]:
                groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
                if not groups & set(KUEUE_WEBHOOK_GROUPS):
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{self.state.ports['kueue_webhook']}{path}",
                    "caBundle": self._ca_bundle(),
                }
                hooks.append(hook)
            doc["webhooks"] = hooks
            out.append(doc)
        return out

    def metacontroller_crds(self) -> list[Obj]:
        src = (
            build.module_dir("metacontroller") / "manifests/production/metacontroller-crds-v1.yaml"
        )
        return [metacontroller_v4_fields(crd) for crd in load_yaml_documents(src)]

    def nfd_crds(self) -> list[Obj]:
        src = build.module_dir("nfd") / "deployment/base/nfd-crds/nfd-api-crds.yaml"
        return load_yaml_documents(src)

    def _install_crds(self, timeout: float, kueue: bool = True) -> None:
        crds = (self.kueue_crds() if kueue else []) + self.metacontroller_crds() + self.nfd_crds()
        for crd in crds:
            self.kube.apply(crd)
        for crd in crds:
            name = crd["metadata"]["name"]
            wait_for(partial(self.crd_established, name), timeout, f"CRD {name} to be established")
        self.kube.forget_discovery()

    def crd_established(self, name: str) -> bool:
        crd = self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        conds = ((crd or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    # -- controllers ----------------------------------------------------------------------

    def kueue_config(self) -> Obj:
        """The Configuration the testbed's Kueue runs with: what running outside a cluster
        needs, plus the chain's shipped fragment (feature gates, resource transformations)."""
        config = self._kueue_base_config(self.state.ports)
        if not KUEUE_FRAGMENT.is_file():
            return config
        return merged_configuration(config, load_yaml_documents(KUEUE_FRAGMENT)[0])

    def _kueue_base_config(self, p: dict[str, int]) -> Obj:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            **_kueue_stock_tuning(),
            "namespace": KUEUE_NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {
                "port": p["kueue_webhook"],
                "host": "127.0.0.1",
                "certDir": str(self.root / "kueue-webhook-certs"),
            },
            "metrics": {"bindAddress": f"127.0.0.1:{p['kueue_metrics']}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{p['kueue_health']}"},
            "integrations": {"frameworks": ["batch/job"]},
            # No kubelet runs Pods here: an admitted Workload never becomes PodsReady, and
            # waitForPodsReady (on by default since 0.19) would evict it after 30 minutes.
            "featureGates": {"VisibilityOnDemand": False, "DisableWaitForPodsReady": True},
        }

    def _start_kueue(self, binary: Path, timeout: float) -> None:
        c = self.certs
        certdir = self.root / "kueue-webhook-certs"
        certdir.mkdir(exist_ok=True)
        shutil.copy(c.serving_crt, certdir / "tls.crt")
        shutil.copy(c.serving_key, certdir / "tls.key")
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for src, dst in ((c.serving_crt, "tls.crt"), (c.serving_key, "tls.key")):
            shutil.copy(src, KUEUE_METRICS_CERTS / dst)
        config = self.root / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self.kueue_config()))
        self.kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}
        )
        self._spawn(
            "kueue",
            [
                str(binary),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                "--zap-log-level=2",
            ],
        )
        health = f"http://127.0.0.1:{self.state.ports['kueue_health']}/readyz"
        self._wait_ready("kueue", lambda: http_ok(health), timeout)
        for hook_config in self.kueue_webhooks():
            self.kube.apply(hook_config)

    def _start_metacontroller(self, binary: Path, timeout: float) -> None:
        port = self.state.ports["metacontroller"]
        self._spawn(
            "metacontroller",
            [
                str(binary),
                # v1.5.20 reads --client-config-path (or $KUBECONFIG), not --kubeconfig.
                f"--client-config-path={self.kubeconfig}",
                f"--debug-addr=127.0.0.1:{port}",
                # New CRDs (ours) are picked up on the next discovery; the default 30 s is slow.
                "--discovery-interval=2s",
                "--client-go-qps=100",
                "--client-go-burst=200",
                "-v=4",
            ],
        )
        self._wait_ready(
            "metacontroller", lambda: http_ok(f"http://127.0.0.1:{port}/metrics"), timeout
        )

    def _start_nfd(self, binary: Path, timeout: float) -> None:
        port = self.state.ports["nfd"]
        argv = [
            str(binary),
            f"-kubeconfig={self.kubeconfig}",
            f"-port={port}",
            "-enable-leader-election=false",
            f"-config={self.root / 'nfd-master.conf'}",
            "-v=2",
        ]
        if self.nfd_extra_label_ns:
            argv.append(f"-extra-label-ns={','.join(self.nfd_extra_label_ns)}")
        (self.root / "nfd-master.conf").write_text("{}\n")
        # nfd-master annotates the Node it runs on and exits if that Node does not exist. This
        # Node hosts no workload; the chain is told to leave it alone.
        if self.kube.get("v1", "Node", CONTROL_PLANE_NODE) is None:
            node = node_object(
                CONTROL_PLANE_NODE,
                labels={
                    "node-role.kubernetes.io/control-plane": "",
                    "gpustack.ai/managed": "false",
                },
            )
            node["spec"] = {
                "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
            }
            register_node(self.kube, node)
        self._spawn(
            "nfd-master",
            argv,
            env={"KUBERNETES_NAMESPACE": "node-feature-discovery", "NODE_NAME": CONTROL_PLANE_NODE},
        )
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "node-feature-discovery"},
            }
        )
        self._wait_ready("nfd-master", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout)


def metacontroller_v4_fields(crd: Obj) -> Obj:
    """Widen a Metacontroller v1.5.x CRD schema by the two fields v4 added, so the shipped
    controllers apply unmodified (`kubectl apply` validates strictly) on the testbed's older
    Metacontroller.

    Hook `version` and `ignoreStatusChanges` on resource rules arrived in v4. v1.5.20 ignores
    both: without `version` it speaks hook version v1, whose requests differ from v2 only in map
    keys our hooks never read; without `ignoreStatusChanges` it also syncs on status-only
    changes, which costs calls and changes no answer. Every object schema with a `webhook`
    property is a hook; every one with `apiVersion` and `resource` is a resource rule.
    """
    major = int(build.versions()["metacontroller"]["version"].lstrip("v").split(".")[0])
    if major >= 4:
        return crd
    widened = copy.deepcopy(crd)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                if "webhook" in props:
                    props.setdefault("version", {"type": "string"})
                if "apiVersion" in props and "resource" in props:
                    props.setdefault("ignoreStatusChanges", {"type": "boolean"})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(widened.get("spec", {}).get("versions", []))
    return widened


def http_ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@contextlib.contextmanager
def running(root: Path, **kwargs: Any) -> Iterator[Testbed]:
    bed = Testbed(root, **kwargs)
    bed.up()
    try:
        yield bed
    finally:
        bed.down()


__all__ = ["ComponentDied", "KubeError", "Testbed", "running"]


KUEUE_STOCK_CONFIG = "config/components/manager/controller_manager_config.yaml"
"""Kueue's own Configuration, what its release manifests install."""


def _kueue_stock_tuning() -> Obj:
    """The reconciler concurrency and API client rates of Kueue's stock Configuration, read from
    the pinned module. A real install runs with them; without them controller-runtime and
    client-go fall back to one Workload at a time and 20 requests per second, and the testbed's
    Kueue would be far slower than any cluster's (the admission benchmark measured it)."""
    stock = load_yaml_documents(build.module_dir("kueue") / KUEUE_STOCK_CONFIG)[0]
    return {key: stock[key] for key in ("controller", "clientConnection") if key in stock}
