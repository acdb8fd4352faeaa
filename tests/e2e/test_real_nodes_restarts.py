"""A kubelet and a containerd restarted under running Pods that hold cards (issue #35, item 2, the
node's part; the control plane's restarts are in `test_restarts.py`).

On a host a service manager restarts them (an upgrade, a crash, a configuration change) while
containers run on under their shims. What must hold: the running Pod keeps its container and its
card, the node's ledger is the same before and after, the kubelet takes the agent's plugins'
registration again (its device manager removes every plugin socket when it starts), and a new Pod
gets a card no running Pod holds. Each case's recovery time is printed, never asserted.

Simulated, said plainly: node-a's 4 x T4 (the agent's simulated NVML and sysfs). Real: the kubelet,
containerd, runc, the agent's device plugin and the API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from kubeapi import wait_for
from testbed.cluster import REAL_NODES
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.realnode import RealNode
from tests.e2e.test_real_nodes_chain import NAMESPACE, _env, _phase, _pod

NODE = "node-a"
CARDS = 4
GPU = "nvidia.com/gpu"
WORKER = "worker.gpustack.ai/v1alpha1"


def _node(bed: Testbed) -> RealNode:
    (spec,) = [s for s in REAL_NODES if s.name == NODE]
    return RealNode(bed, spec)


def _ready_with_cards(bed: Testbed) -> bool:
    node = bed.kube.get("v1", "Node", NODE) or {}
    status = node.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    return ready and status.get("allocatable", {}).get(GPU) == str(CARDS)


def _ledger(bed: Testbed) -> Any:
    return (bed.kube.get(WORKER, "Devices", NODE) or {}).get("status")


def _card(bed: Testbed, name: str) -> str:
    def logged() -> str | None:
        return _env(kubectl(bed, "logs", "-n", NAMESPACE, name)).get("NVIDIA_VISIBLE_DEVICES")

    return str(wait_for(logged, 60, f"{name}'s environment"))


def _container_id(bed: Testbed, name: str) -> tuple[str, int]:
    pod = bed.kube.get("v1", "Pod", name, NAMESPACE) or {}
    (status,) = pod["status"]["containerStatuses"]
    return str(status.get("containerID")), int(status.get("restartCount", 0))


def _holder(bed: Testbed, name: str) -> str:
    bed.kube.create(_pod(name, NODE, {GPU: "1"}, "env; exec sleep 600"))
    wait_for(lambda: _phase(bed, name) == "Running", 120, f"{name} to run")
    card = _card(bed, name)
    recorded = (bed.kube.get("v1", "Pod", name, NAMESPACE) or {})["metadata"]["annotations"]
    assert card in recorded[ALLOCATED_ANNOTATION]
    return card


def _plugin_sockets(node: RealNode) -> dict[str, float]:
    """The device plugins' sockets in the kubelet's folder (the kubelet's own left out), by name:
    when each was made."""
    folder = node.host_path("/var/lib/kubelet/device-plugins")
    return {
        path.name: path.stat().st_mtime
        for path in folder.glob("*.sock")
        if path.name != "kubelet.sock"
    }


def _restarted(bed: Testbed, node: RealNode, what: str, restart: Callable[[], None]) -> None:
    """Restart, then wait until every plugin socket the agent had is made again after the
    restart (the kubelet removed them when it started; the agent registers anew) and the node
    is Ready with every card; print how long."""
    plugins = set(_plugin_sockets(node))
    started = time.monotonic()
    since = time.time()
    restart()

    def registered_again() -> bool:
        now = _plugin_sockets(node)
        return set(now) == plugins and all(made > since for made in now.values())

    if what == "kubelet":
        wait_for(registered_again, 180, f"the agent's plugins registered again after the {what}")
    wait_for(lambda: _ready_with_cards(bed), 180, f"{NODE} Ready with its cards after the {what}")
    print(f"{what} restart: serving again {time.monotonic() - started:.1f} s after")


def test_running_pods_keep_their_cards_across_kubelet_and_containerd_restarts(
    real_chain: Testbed,
) -> None:
    bed = real_chain
    node = _node(bed)
    # Pods of earlier modules (Instances, gangs) may still be ending: a card held in another
    # mode is listed Unhealthy, so the node offers all its whole cards only once they are gone.
    try:
        wait_for(lambda: _ready_with_cards(bed), 300, f"{NODE} to offer its cards")
    except TimeoutError:
        pods = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']} {p['status'].get('phase')}"
            for p in bed.kube.list("v1", "Pod")
            if p["spec"].get("nodeName") == NODE
        ]
        allocatable = (bed.kube.get("v1", "Node", NODE) or {}).get("status", {}).get("allocatable")
        raise AssertionError(
            f"{NODE} never offered its {CARDS} cards: allocatable {allocatable}, "
            f"ledger {_ledger(bed)}, Pods on it {pods}"
        ) from None
    held = {"first": _holder(bed, "restart-first")}
    wait_for(lambda: _ledger(bed) is not None, 30, "the ledger")
    try:
        for what, restart, newcomer in (
            ("kubelet", node.restart_kubelet, "restart-second"),
            ("containerd", node.restart_containerd, "restart-third"),
        ):
            containers = {name: _container_id(bed, f"restart-{name}") for name in held}
            before = _ledger(bed)
            began = time.monotonic()
            _restarted(bed, node, what, restart)
            for name, container in containers.items():
                assert _phase(bed, f"restart-{name}") == "Running"
                # The same container, never restarted: its card was not taken from it.
                assert _container_id(bed, f"restart-{name}") == container
            assert _ledger(bed) == before, f"the ledger changed across the {what} restart"
            card = _holder(bed, newcomer)
            print(f"{what} restart: a new Pod on a card {time.monotonic() - began:.1f} s after")
            assert card not in held.values(), f"{card} granted twice after the {what} restart"
            held[newcomer.removeprefix("restart-")] = card
    finally:
        for name in list(held):
            bed.kube.delete("v1", "Pod", f"restart-{name}", NAMESPACE)

    def gone() -> bool:
        return all(bed.kube.get("v1", "Pod", f"restart-{n}", NAMESPACE) is None for n in held)

    wait_for(gone, 120, "the holders to go")
