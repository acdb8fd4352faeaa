"""The addresses of a testbed with real nodes, and the host side of its network.

Each real node lives in a network namespace of its own, joined to one host bridge by a veth
pair, and routes its Pod subnet (a CNI bridge inside the namespace) to the others. Nothing
leaves the machine: the bridge has no uplink and no NAT; the host's only part is the bridge
address, where the API server is reached, and one route per node to its Pods (the API server
calls webhooks at Pod addresses).

    host (API server, etcd, ...)  10.250.S.1 on bridge gpustackS
      ├─ veth gsSv0 ─ netns gpustackS-<node>  10.250.S.10  Pods 10.(244+S).0.0/24 on cni0
      └─ veth gsSv1 ─ netns gpustackS-<node>  10.250.S.11  Pods 10.(244+S).1.0/24 ...
    Services 10.0.0.0/24 (kube-proxy's iptables rules inside each node's namespace)

S is the testbed's slot: the first free one when it comes up, so two testbeds with real nodes
(the session's cluster and a test's own) stay apart on one machine.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"  # the first address of SERVICE_CIDR
DNS_SERVICE_IP = "10.0.0.10"
CLUSTER_DOMAIN = "cluster.local"
NODE_PREFIX = 24
SLOTS = 8  # testbeds with real nodes that can be up at once on one machine


class NetworkError(RuntimeError):
    """A network step failed; the message names the command and its output."""


@dataclass(frozen=True)
class NodeAddresses:
    slot: int
    name: str
    index: int

    @property
    def ip(self) -> str:
        return f"10.250.{self.slot}.{10 + self.index}"

    @property
    def pod_cidr(self) -> str:
        return f"10.{244 + self.slot}.{self.index}.0/24"

    @property
    def netns(self) -> str:
        return f"gpustack{self.slot}-{self.name}"

    @property
    def veth(self) -> str:
        return f"gs{self.slot}v{self.index}"  # the host end; names stop at 15 characters

    @property
    def host_ip(self) -> str:
        return Network(self.slot).host_ip


@dataclass(frozen=True)
class Network:
    """One testbed's node network; `slot` keeps two testbeds on one machine apart."""

    slot: int

    @property
    def bridge(self) -> str:
        return f"gpustack{self.slot}"

    @property
    def host_ip(self) -> str:
        return f"10.250.{self.slot}.1"

    @property
    def cluster_cidr(self) -> str:
        return f"10.{244 + self.slot}.0.0/16"

    def node(self, name: str, index: int) -> NodeAddresses:
        return NodeAddresses(self.slot, name, index)

    def api_server_sans(self) -> tuple[str, ...]:
        """The API server's certificate names, as Pods reach it (by address or Service)."""
        return (
            self.host_ip,
            KUBERNETES_SERVICE_IP,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}",
        )


def sh(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed: {(done.stdout + done.stderr).strip()}")
    return done


def in_netns(netns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def link_exists(name: str) -> bool:
    return sh(["ip", "link", "show", name], check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return name in sh(["ip", "netns", "list"]).stdout.split()


def free_slot() -> int:
    for slot in range(SLOTS):
        if not link_exists(Network(slot).bridge):
            return slot
    raise NetworkError(f"all {SLOTS} testbed networks are in use (`python -m testbed down`)")


def create_bridge(net: Network) -> None:
    sh(["ip", "link", "add", net.bridge, "type", "bridge"])
    sh(["ip", "addr", "add", f"{net.host_ip}/{NODE_PREFIX}", "dev", net.bridge])
    sh(["ip", "link", "set", net.bridge, "up"])


def delete_bridge(net: Network) -> None:
    if link_exists(net.bridge):
        sh(["ip", "link", "del", net.bridge])


def attach_node(node: NodeAddresses, peers: Sequence[NodeAddresses]) -> None:
    """The node's namespace, its veth on the bridge, its address and its routes (to the host
    and to every peer's Pods), and the host's route to its Pods."""
    ns, bridge = node.netns, Network(node.slot).bridge
    sh(["ip", "netns", "add", ns])
    sh(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    sh(["ip", "link", "set", node.veth, "master", bridge, "up"])
    sh(in_netns(ns, "ip", "link", "set", "lo", "up"))
    sh(in_netns(ns, "ip", "addr", "add", f"{node.ip}/{NODE_PREFIX}", "dev", "eth0"))
    sh(in_netns(ns, "ip", "link", "set", "eth0", "up"))
    sh(in_netns(ns, "ip", "route", "add", "default", "via", node.host_ip))
    sh(in_netns(ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
    # Bridged Pod-to-Pod traffic on one node must meet iptables: kube-proxy's Service rules on
    # the way back and kube-router's NetworkPolicy rules.
    sh(in_netns(ns, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"))
    sh(["ip", "route", "add", node.pod_cidr, "via", node.ip, "dev", bridge])
    for peer in peers:
        if peer.name == node.name:
            continue
        sh(in_netns(ns, "ip", "route", "add", peer.pod_cidr, "via", peer.ip))
        if netns_exists(peer.netns):
            sh(in_netns(peer.netns, "ip", "route", "replace", node.pod_cidr, "via", node.ip))


def detach_node(node: NodeAddresses) -> None:
    sh(["ip", "route", "del", node.pod_cidr], check=False)
    if netns_exists(node.netns):
        sh(["ip", "netns", "del", node.netns])  # takes the veth pair and every rule inside
    # The kernel destroys a namespace asynchronously; delete its veth ourselves, so that a
    # testbed brought up right after finds the name free.
    deadline = time.monotonic() + 5
    while link_exists(node.veth) and time.monotonic() < deadline:
        sh(["ip", "link", "del", node.veth], check=False)
        time.sleep(0.1)
