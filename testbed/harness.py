"""Start and stop the real control plane the e2e tests run on: the process supervisor.

One `Testbed` is one run folder: certificates, a kubeconfig, each component's log and a state
file. Components are plain child processes, each in its own session, on free loopback ports, so
several testbeds can live on one machine and `down` can always find what it started. How each
component is started lives in `testbed.components`, the upstream CRDs in `testbed.crds`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from kubeapi import Kube, KubeError, wait_for
from testbed import build, certs, crds, network
from testbed import components as launchers

STATE_FILE = "state.json"
COMPONENT_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kueue",
    "jobset",
    "metacontroller",
    "nfd-master",
)
LOG_TAIL_LINES = 80


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
    env: dict[str, str] = field(default_factory=dict)
    """What the process got on top of the harness's own environment: a restart gives it again."""


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
        self,
        root: Path,
        nfd_extra_label_ns: tuple[str, ...] = (),
        real_nodes: bool = False,
        audit: bool = False,
        controllers: tuple[str, ...] = (),
        kueue_settings: dict[str, Any] | None = None,
    ) -> None:
        """`real_nodes`: the control plane is also reached from a Pod network (the node bridge,
        the `kubernetes` Service, a scheduler, every default controller), so that
        `testbed.realnode` nodes can join it. `audit`: the API server logs every write it
        serves (who, what, the answer) to `audit_log`, for benchmarks that count writes.
        `controllers`: kube-controller-manager controllers run beside the emulated set (`job`,
        for a cluster whose Jobs must make Pods). `kueue_settings`: fields of Kueue's
        Configuration set on top of the testbed's, as a user edits theirs (the fleet's
        `multiKueue.workerLostTimeout`, say); a mapping merges into a mapping, anything else
        replaces."""
        self.root = root
        self.state = State(str(root), real_nodes=real_nodes)
        self.nfd_extra_label_ns = nfd_extra_label_ns
        self.audit = audit
        self.controllers = controllers
        self.kueue_settings = dict(kueue_settings or {})
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._kube: Kube | None = None
        self._before_down: list[Callable[[], None]] = []
        self._probes: dict[str, Callable[[], object]] = {}
        """Per component, the readiness probe its start waited on last: a restart waits on it."""

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
    def audit_log(self) -> Path:
        """Where the API server logs the writes it serves, when started with `audit`."""
        return self.logs / "audit.log"

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
        Pods). The JobSet controller runs exactly where Kueue does: Kueue's stock frameworks
        include JobSet, and its JobSet webhook and CRD come with it."""
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
        if ("kueue" in components) != ("jobset" in components):
            raise ValueError("components: kueue and jobset run together or not at all")
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
            "jobset_webhook",
            "jobset_health",
            "jobset_metrics",
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
            "etcd": launchers.start_etcd,
            "kube-apiserver": launchers.start_apiserver,
            "kube-controller-manager": launchers.start_kcm,
            "kueue": launchers.start_kueue,
            "jobset": launchers.start_jobset,
            "metacontroller": launchers.start_metacontroller,
            "nfd-master": launchers.start_nfd,
        }
        try:
            if real:
                network.create_bridge(self.network)
            crds_wanted = real or controllers
            for name in components:
                steps[name](self, binaries[name], timeout)
                if name == "kube-controller-manager" and crds_wanted:
                    # Kueue's CRDs (their conversion webhook pointed at this Kueue) only when it
                    # runs here; in a cluster, its release manifests bring their own.
                    crds.install_crds(self, timeout, kueue="kueue" in components)
                if name == "kube-apiserver":
                    c = self.certs
                    self.write_kubeconfig(self.kubeconfig, self.server, c.admin_crt, c.admin_key)
                if name == "kube-controller-manager" and real:
                    launchers.start_scheduler(self, build.binary("kube-scheduler"), timeout)
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

    def restart(self, names: tuple[str, ...], down_s: float = 2.0, timeout: float = 120.0) -> float:
        """Stop `names` (the last first), keep them down `down_s` seconds, and start them again
        in order with the same command line, environment and data folders (etcd's data dir, the
        configuration files, the certificates), each waited on with the readiness probe of its
        first start; what a node's reboot or a rolled control-plane Pod does to a component.
        Returns the monotonic time the last of them was ready again."""
        procs = self.halt(names)
        time.sleep(down_s)
        return self.resume(procs, timeout)

    def halt(self, names: tuple[str, ...]) -> list[Process]:
        """Stop `names` (the last first) and keep them down until `resume` is given what this
        returns: `restart` for a caller that decides itself how long they stay down (a fleet
        member lost until the manager notices)."""
        procs = [self.state.processes[name] for name in names]
        for proc in reversed(procs):
            self._stop(proc)
            self._children.pop(proc.name, None)
            # Forgotten until started again: the liveness check must not take one still down
            # for a dead component while an earlier one is waited on.
            del self.state.processes[proc.name]
        self.state.save()
        return procs

    def resume(self, procs: list[Process], timeout: float = 120.0) -> float:
        """Start what `halt` stopped, in order, as `restart` does."""
        for proc in procs:
            again = self._spawn(proc.name, proc.argv, proc.env)
            again.exe = proc.exe
            self.state.save()
            probe = self._probes.get(proc.name)
            if probe is not None:
                self._wait_ready(proc.name, probe, timeout)
        return time.monotonic()

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
        self._probes[name] = probe
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
        proc = Process(name, argv, str(log), child.pid, time.time(), env=dict(env or {}))
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

    def https_ok(self, url: str) -> bool:
        """The URL answers 200 to the admin's client certificate."""
        c = self.certs
        try:
            resp = requests.get(
                url, verify=str(c.ca_crt), cert=(str(c.admin_crt), str(c.admin_key)), timeout=2
            )
        except requests.RequestException:
            return False
        return resp.status_code == 200

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

    # -- CRDs -----------------------------------------------------------------------------

    # -- controllers ----------------------------------------------------------------------


@contextlib.contextmanager
def running(root: Path, **kwargs: Any) -> Iterator[Testbed]:
    bed = Testbed(root, **kwargs)
    bed.up()
    try:
        yield bed
    finally:
        bed.down()


__all__ = ["ComponentDied", "KubeError", "Testbed", "running"]
