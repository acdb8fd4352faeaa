"""A real Kubernetes node on this machine: containerd + runc + CNI, kubelet and kube-proxy.

Each node is a network namespace (testbed/network.py) plus a private mount namespace in which a
few fixed host paths are bound to the node's own folder: the kubelet's `/var/lib/kubelet` (the
device-plugin and pod-resources sockets live at fixed paths under it, so two kubelets on one
machine must not share it), `/var/log/pods`, `/var/log/containers` and `/run/containerd`.
A holder process keeps that mount namespace alive; containerd and the kubelet enter it (and the
network namespace) with nsenter, so they see the same volume mounts. kube-proxy only needs the
network namespace: its iptables rules live and die with it. Containers run under the cgroup
root `/<the node's netns name>` in every hierarchy (cgroupfs, the machine's hybrid v1 layout).

A node with simulated hardware (`NodeSpec.hardware`, a shipped profile of the simulated NVIDIA
agent) also gets that profile's PCI bus: plain folders with the attribute files the kernel shows
(`nodeagent.simulate.sysfs.pci_functions`), bound over `/sys/bus/pci/devices` in the node's
mount namespace. Every container given the host's `/sys` (a recursive bind) sees it there, so
the unmodified nfd-worker reports the simulated cards as it would report real ones.

`down` is the reverse, and leaves nothing behind: every process in a node's cgroups or mount
namespace, the namespaces, the veth, the host route, the cgroups and the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubeapi import wait_for
from nodeagent.simulate.profile import Profile
from nodeagent.simulate.sysfs import pci_functions
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR, load_profile
from testbed import build, certs, images, network, registry, system

if TYPE_CHECKING:
    from testbed.harness import Testbed

CGROUP_FS = Path("/sys/fs/cgroup")
# Host paths that must be private to each node (bound to the node's folder in its mount ns).
PCI_DEVICES = "/sys/bus/pci/devices"
PRIVATE_PATHS = {
    "/var/lib/kubelet": "kubelet",
    "/var/log/pods": "pod-logs",
    "/var/log/containers": "container-logs",
    "/run/containerd": "run-containerd",
    # The node agent's state (hostPath /var/lib/gpustack/operator): per-Pod work dirs, MIG
    # markers, and the HAMi-core library its sliced grants mount.
    "/var/lib/gpustack": "gpustack",
}
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"  # as seen inside the node


@dataclass(frozen=True)
class NodeSpec:
    """One real node: its name, its place on the bridge, and labels it registers with."""

    name: str
    index: int
    labels: tuple[tuple[str, str], ...] = ()
    hardware: str = ""
    """The simulated NVIDIA profile (`t4x4`) whose PCI bus the node shows; empty: the host's."""


def node_cdi_dir(bed: Testbed, name: str) -> Path:
    """Where a real node's containerd reads CDI specs (a vendor's toolkit writes them to
    /etc/cdi on a machine of its own)."""
    return bed.root / "nodes" / name / "cdi"


def cgroup_root(addr: network.NodeAddresses) -> str:
    return f"/{addr.netns}"


def _proc_names(node: str) -> dict[str, str]:
    return {
        "holder": f"node-{node}",
        "containerd": f"containerd-{node}",
        "kubelet": f"kubelet-{node}",
        "kube-proxy": f"kube-proxy-{node}",
        "kube-router": f"kube-router-{node}",
    }


class RealNode:
    def __init__(self, bed: Testbed, spec: NodeSpec) -> None:
        self.bed = bed
        self.spec = spec
        self.addr = bed.network.node(spec.name, spec.index)
        self.dir = bed.root / "nodes" / spec.name
        self.names = _proc_names(spec.name)

    # -- paths -----------------------------------------------------------------------------

    def host_path(self, inside: str) -> Path:
        """Where a node-private path (`/var/lib/kubelet/...`) lies on the host."""
        for private, folder in PRIVATE_PATHS.items():
            if inside == private or inside.startswith(private + "/"):
                return self.dir / folder / inside[len(private) :].lstrip("/")
        raise ValueError(f"{inside} is not private to the node")

    @property
    def containerd_socket(self) -> Path:
        return self.host_path(CONTAINERD_SOCKET)

    @property
    def cdi_dir(self) -> Path:
        return node_cdi_dir(self.bed, self.spec.name)

    # -- start -----------------------------------------------------------------------------

    def start(self, peers: list[NodeSpec]) -> None:
        for folder in [
            *PRIVATE_PATHS.values(),
            "containerd",
            "cni/net.d",
            "cni/ipam",
            "certs",
            "cdi",
            f"certs.d/{registry.REGISTRY_HOST}",
        ]:
            (self.dir / folder).mkdir(parents=True, exist_ok=True)
        for private in PRIVATE_PATHS:
            Path(private).mkdir(parents=True, exist_ok=True)  # mount points only, stay empty
        self.bed.state.nodes[self.spec.name] = {"index": self.spec.index, "mnt_ns": ""}
        self.bed.state.save()
        network.attach_node(self.addr, [self.bed.network.node(p.name, p.index) for p in peers])
        self._write_configs()
        self._start_holder()
        self._start_containerd()
        self._start_kubelet()
        self._start_kube_proxy()

    def _nsenter(self, *argv: str) -> list[str]:
        holder = self.bed.state.processes[self.names["holder"]].pid
        return [
            "nsenter",
            f"--net=/run/netns/{self.addr.netns}",
            f"--mount=/proc/{holder}/ns/mnt",
            "--",
            *argv,
        ]

    def _write_pci_bus(self, profile: Profile | None = None) -> Path | None:
        """A PCI bus as plain folders (no links: the tree is bound alone, without the kernel's
        `/sys/devices` they would point into): `profile`'s, else the node's simulated hardware's
        (None when it has none)."""
        if profile is None and not self.spec.hardware:
            return None
        profile = profile or load_profile(self.spec.hardware)
        bus = self.dir / f"pci-bus-{profile.name}"
        shutil.rmtree(bus, ignore_errors=True)
        for address, files in pci_functions(profile, PCI_VENDOR).items():
            (bus / address).mkdir(parents=True)
            for name, value in files.items():
                (bus / address / name).write_text(value + "\n", encoding="ascii")
        return bus

    @contextlib.contextmanager
    def pci_bus_without_cards(self) -> Iterator[None]:
        """While inside, the node's PCI bus holds no card (its network card only): a CPU node
        to whatever starts meanwhile (a container already running keeps the bus it was given).
        A bind over the bound bus, taken off on exit."""
        bus = self._write_pci_bus(Profile(name="no-cards", cards=()))
        holder = self.bed.state.processes[self.names["holder"]].pid
        enter = ["nsenter", f"--mount=/proc/{holder}/ns/mnt", "--"]
        network.sh([*enter, "mount", "--bind", str(bus), PCI_DEVICES])
        try:
            yield
        finally:
            network.sh([*enter, "umount", PCI_DEVICES])

    def _start_holder(self) -> None:
        mounts = [(self.dir / folder, Path(inside)) for inside, folder in PRIVATE_PATHS.items()]
        if (bus := self._write_pci_bus()) is not None:
            mounts.append((bus, Path(PCI_DEVICES)))
        binds = " && ".join(f"mount --bind {source} {target}" for source, target in mounts)
        ready = self.dir / "holder-ready"
        script = f"{binds} && touch {ready} && exec sleep infinity"
        # nsenter, not `ip netns exec`: that remounts /sys, which hides the cgroup mounts.
        argv = [
            "nsenter",
            f"--net=/run/netns/{self.addr.netns}",
            "--",
            "unshare",
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-c",
            script,
        ]
        self.bed.spawn(self.names["holder"], argv, exe="sleep")
        self.bed.wait_ready(self.names["holder"], ready.exists, 20)
        pid = self.bed.state.processes[self.names["holder"]].pid
        self.bed.state.nodes[self.spec.name]["mnt_ns"] = os.readlink(f"/proc/{pid}/ns/mnt")
        self.bed.state.save()

    def _start_containerd(self) -> None:
        bins = build.bin_dir("containerd")
        argv = self._nsenter(str(bins / "containerd"), f"--config={self.dir / 'containerd.toml'}")
        # The shim is found on PATH; runc is Debian's.
        env = {"PATH": f"{bins}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.bed.spawn(self.names["containerd"], argv, exe=str(bins / "containerd"), env=env)
        self.bed.wait_ready(
            self.names["containerd"],
            lambda: self.ctr_ok("version"),
            60,
        )

    def ctr(self, *args: str) -> str:
        ctr = build.bin_dir("containerd") / "ctr"
        done = network.sh(
            [str(ctr), f"--address={self.containerd_socket}", "--namespace=k8s.io", *args]
        )
        return done.stdout

    def ctr_ok(self, *args: str) -> bool:
        try:
            self.ctr(*args)
        except network.NetworkError:
            return False
        return True

    def _start_kubelet(self) -> None:
        _make_cgroups(cgroup_root(self.addr))
        kubelet = build.bin_dir("kubernetes-node") / "kubelet"
        labels = ",".join(f"{k}={v}" for k, v in self.spec.labels)
        argv = self._nsenter(
            str(kubelet),
            f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
            f"--hostname-override={self.spec.name}",
            f"--node-ip={self.addr.ip}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        )
        env = {"PATH": f"{build.bin_dir('containerd')}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.bed.spawn(self.names["kubelet"], argv, exe=str(kubelet), env=env)

    # -- restarts (day two: tests/e2e/test_real_nodes_restarts.py) -------------------------

    def restart_kubelet(self, down_s: float = 2.0) -> None:
        """Stop the kubelet (SIGTERM, as a service manager would) and start it again with the same
        flags; its containers run on under containerd meanwhile."""
        self.bed.stop(self.names["kubelet"])
        time.sleep(down_s)
        self._start_kubelet()

    def restart_containerd(self, down_s: float = 2.0) -> None:
        """Stop containerd and start it again with the same configuration. The shims run in
        process groups of their own, so the containers survive it, as on a host."""
        self.bed.stop(self.names["containerd"])
        time.sleep(down_s)
        self._start_containerd()

    def _in_netns(self, program: Path, *args: str) -> list[str]:
        """`program args...` in the node's network namespace only (its iptables live there)."""
        return ["nsenter", f"--net=/run/netns/{self.addr.netns}", "--", str(program), *args]

    def _start_kube_proxy(self) -> None:
        proxy = build.bin_dir("kubernetes-node") / "kube-proxy"
        argv = self._in_netns(proxy, f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1")
        self.bed.spawn(self.names["kube-proxy"], argv, exe=str(proxy))

    def start_kube_router(self) -> None:
        """kube-router's firewall controller alone: it turns NetworkPolicies into iptables rules
        and ipsets in the node's network namespace (routing stays the host's routes, Services
        stay kube-proxy's), so the shipped policies are enforced as a user's CNI would. It
        needs the Node object at start: call it once the node is registered."""
        router = build.bin_dir("kube-router") / "kube-router"
        argv = self._in_netns(
            router,
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
            f"--kubeconfig={self.dir / 'kube-router.kubeconfig'}",
            f"--hostname-override={self.spec.name}",
            f"--service-cluster-ip-range={network.SERVICE_CIDR}",
            "--health-port=20244",  # per namespace: no clash between nodes
            "--metrics-port=0",
            "--v=1",
        )
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        self.bed.spawn(self.names["kube-router"], argv, exe=str(router), env=env)

    # -- configuration ----------------------------------------------------------------------

    def _write_configs(self) -> None:
        certdir = self.bed.root / "certs"
        client = certs.issue(
            certdir,
            f"kubelet-{self.spec.name}",
            f"system:node:{self.spec.name}",
            ("system:nodes",),
        )
        serving = certs.issue(
            certdir,
            f"kubelet-serving-{self.spec.name}",
            self.spec.name,
            server_sans=[self.spec.name, self.addr.ip],
        )
        proxy = certs.issue(certdir, f"kube-proxy-{self.spec.name}", "system:kube-proxy")
        router = certs.issue(certdir, f"kube-router-{self.spec.name}", "system:kube-router")
        server = f"https://{self.addr.host_ip}:{self.bed.state.ports['apiserver']}"
        self.bed.write_kubeconfig(self.dir / "kubelet.kubeconfig", server, *client)
        self.bed.write_kubeconfig(self.dir / "kube-proxy.kubeconfig", server, *proxy)
        self.bed.write_kubeconfig(self.dir / "kube-router.kubeconfig", server, *router)
        (self.dir / "resolv.conf").write_text("")  # no upstream DNS: nothing outside exists
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(self._kubelet_config(*serving)))
        (self.dir / "kube-proxy.yaml").write_text(yaml.safe_dump(self._kube_proxy_config()))
        (self.dir / "containerd.toml").write_text(self._containerd_config())
        hosts = self.dir / "certs.d" / registry.REGISTRY_HOST / "hosts.toml"
        hosts.write_text(registry.hosts_toml(self.bed))
        (self.dir / "cni/net.d/10-gpustack.conflist").write_text(json.dumps(self._cni_config()))

    def _kubelet_config(self, serving_crt: Path, serving_key: Path) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.addr.ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "tlsCertFile": str(serving_crt),
            "tlsPrivateKeyFile": str(serving_key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.bed.certs.ca_crt)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
            # The machine's cgroups: the hybrid v1 layout, managed without systemd.
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": cgroup_root(self.addr),
            "failCgroupV1": False,
            "failSwapOn": False,
            "enforceNodeAllocatable": [],
            "makeIPTablesUtilChains": False,
            "protectKernelDefaults": False,
            # A shared test machine: never evict for disk or memory, never collect images (they
            # cannot be pulled again).
            "evictionHard": {
                "memory.available": "0%",
                "nodefs.available": "0%",
                "imagefs.available": "0%",
                "nodefs.inodesFree": "0%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "clusterDNS": [network.DNS_SERVICE_IP],
            "clusterDomain": network.CLUSTER_DOMAIN,
            "resolvConf": str(self.dir / "resolv.conf"),
            "serializeImagePulls": False,
            "maxPods": 64,
            "nodeStatusReportFrequency": "10s",
        }

    def _kube_proxy_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "hostnameOverride": self.spec.name,
            "bindAddress": self.addr.ip,
            "clusterCIDR": self.bed.network.cluster_cidr,
            "clientConnection": {"kubeconfig": str(self.dir / "kube-proxy.kubeconfig")},
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # No masquerading of Pod-to-Service traffic: NetworkPolicy must see the calling
            # Pod's own address on the other node. Same-node replies still pass kube-proxy's
            # rules, since bridged traffic goes through iptables (network.attach_node).
            "iptables": {"masqueradeAll": False},
            # conntrack limits are machine-wide: leave them as they are.
            "conntrack": {"maxPerCore": 0, "min": 0},
        }

    def _containerd_config(self) -> str:
        d = self.dir / "containerd"
        return f"""version = 3
root = "{d / "root"}"
state = "{d / "state"}"

[grpc]
  address = "{CONTAINERD_SOCKET}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{images.PAUSE_IMAGE}"
  # Where each registry is reached: registry.gpustack.test is the testbed's (testbed/registry.py).
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{self.dir / "certs.d"}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # Without it runc fails writing oom_score_adj below the caller's value.
  restrict_oom_score_adj = true
  # Pod network namespaces under the node's state folder, not the host's /run/netns.
  netns_mounts_under_state_dir = true
  # CDI devices named by annotations (`cdi.k8s.io/...`) are resolved from this node's specs.
  enable_cdi = true
  cdi_spec_dirs = ["{self.cdi_dir}"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{system.CNI_BIN_DIR}"]
    conf_dir = "{self.dir / "cni/net.d"}"
"""

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "gpustack-testbed",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.addr.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni/ipam"),
                    },
                }
            ],
        }


# -- teardown (also from another process: everything needed is in the state file) ------------


def _pids_in_cgroups(root: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else []:
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for folder, _dirs, files in os.walk(top):  # cgroups vanish while we walk: no errors
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    pids |= {int(p) for p in Path(folder, "cgroup.procs").read_text().split()}
    return pids


def _pids_in_mount_ns(ns: str) -> set[int]:
    pids: set[int] = set()
    if not ns:
        return pids
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns/mnt") == ns:
                    pids.add(int(entry.name))
    return pids


def _kill_all(find: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = find() - {os.getpid()}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _make_cgroups(root: str) -> None:
    """The kubelet wants its cgroup root to exist in every hierarchy; a v1 cpuset cgroup also
    needs its CPUs and memory nodes before anything can join it (copied from the parent)."""
    for hierarchy in CGROUP_FS.iterdir():
        if not (hierarchy / "cgroup.procs").exists():
            continue
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (top / knob).exists() and not (top / knob).read_text().strip():
                (top / knob).write_text((hierarchy / knob).read_text())


def _remove_cgroups(root: str) -> None:
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else []:
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        # Deepest first: a cgroup can only be removed once its children are.
        for folder, _dirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        with contextlib.suppress(OSError):
            top.rmdir()


def node_pids(bed: Testbed, name: str) -> set[int]:
    """Every process of a node: in its cgroups (the containers) or its mount namespace (the
    holder, containerd, the shims, the kubelet)."""
    record = bed.state.nodes[name]
    addr = bed.network.node(name, int(record["index"]))
    return _pids_in_cgroups(cgroup_root(addr)) | _pids_in_mount_ns(str(record["mnt_ns"]))


def teardown(bed: Testbed) -> None:
    """Stop every real node of `bed` and remove what it made; then the bridge."""
    for name, record in list(bed.state.nodes.items()):
        names = _proc_names(name)
        for key in ("kube-proxy", "kubelet"):
            bed.stop(names[key])
        addr = bed.network.node(name, int(record["index"]))
        root = cgroup_root(addr)
        _kill_all(lambda root=root: _pids_in_cgroups(root))  # the containers
        ns = str(record.get("mnt_ns", ""))
        _kill_all(lambda ns=ns: _pids_in_mount_ns(ns))  # shims, containerd, the holder
        for key in ("containerd", "holder"):
            bed.stop(names[key])
        network.detach_node(addr)
        _remove_cgroups(root)
        shutil.rmtree(bed.root / "nodes" / name, ignore_errors=True)
        del bed.state.nodes[name]
        bed.state.save()
    if bed.state.slot >= 0:
        network.delete_bridge(bed.network)


def wait_ready(bed: Testbed, names: list[str], timeout: float = 180.0) -> None:
    """Every node registered, Ready, and without the not-ready taint."""

    def ready() -> bool:
        bed.check_alive()
        for name in names:
            node = bed.kube.get("v1", "Node", name)
            if node is None:
                return False
            conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
            taints = [t["key"] for t in node["spec"].get("taints", [])]
            if conditions.get("Ready") != "True" or "node.kubernetes.io/not-ready" in taints:
                return False
        return True

    try:
        wait_for(ready, timeout, f"nodes {names} to become Ready")
    except TimeoutError as err:
        tails = "\n".join(
            f"--- kubelet-{n}.log ---\n{bed.log_tail(f'kubelet-{n}', 30)}" for n in names
        )
        raise TimeoutError(f"{err}\n{tails}") from None
