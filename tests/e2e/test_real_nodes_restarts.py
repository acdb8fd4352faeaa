"""A kubelet and a containerd restarted under running Pods that hold cards (issue #35, item 2, the
node's part; the control plane's restarts are in `test_restarts.py`).

On a host a service manager restarts them (an upgrade, a crash, a configuration change) while
containers run on under their shims. What must hold: each running Pod keeps its container, its
card and its record; the node's ledger is the same before and after and equals the sum of the
records, no card held twice; the kubelet takes the agent's plugins' registration again (its
device manager removes every plugin socket when it starts); and a new Pod gets a card no running
Pod holds. The holders are of two modes (a whole card and a slice of another), so a newcomer
must also avoid a card held in a mode it did not ask for. Each case's recovery time is printed,
never asserted.

Simulated, said plainly: node-a's 4 x T4 (the agent's simulated NVML and sysfs). Real: the kubelet,
containerd, runc, the agent's device plugin and the API server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from kubeapi import Obj, wait_for
from testbed.cluster import REAL_NODES, card_count, wait_quiet, what_holds
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.realnode import RealNode
from tests.e2e.test_real_nodes_chain import NAMESPACE, _env, _phase, _pod
from tests.e2e.test_real_nodes_churn import held_twice, wait_ledger_matches

NODE = "node-a"
GPU = "nvidia.com/gpu"
SLICED = "nvidia.com/gpu.sliced"
WORKER = "worker.gpustack.ai/v1alpha1"
HOLDERS: dict[str, dict[str, str]] = {
    "first": {GPU: "1"},
    # Half a card: the agent turns that card's whole and shared tokens Unhealthy meanwhile.
    "slice": {SLICED: "1", f"{SLICED}.memory-percentage": "50"},
}


def _node(bed: Testbed) -> RealNode:
    (spec,) = [s for s in REAL_NODES if s.name == NODE]
    return RealNode(bed, spec)


def _whole_cards(bed: Testbed) -> tuple[bool, str | None]:
    """Whether node-a is Ready, and how many whole cards its kubelet offers."""
    status = (bed.kube.get("v1", "Node", NODE) or {}).get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    return ready, status.get("allocatable", {}).get(GPU)


def _serving(bed: Testbed, what: str, timeout: float) -> None:
    """Until node-a is Ready and offers every card but the slice's whole (a card held in
    another mode is Unhealthy to `nvidia.com/gpu`; one held whole is still counted)."""
    whole = str(card_count(_node(bed).spec) - 1)
    try:
        wait_for(lambda: _whole_cards(bed) == (True, whole), timeout, what)
    except TimeoutError:
        ready, offered = _whole_cards(bed)
        raise AssertionError(
            f"{what}: Ready {ready}, {offered} whole cards offered, not {whole}; "
            f"Pods on it {what_holds(bed, NODE)}"
        ) from None


def _ledger(bed: Testbed) -> Any:
    return (bed.kube.get(WORKER, "Devices", NODE) or {}).get("status")


def _card(bed: Testbed, name: str) -> str:
    def logged() -> str | None:
        return _env(kubectl(bed, "logs", "-n", NAMESPACE, name)).get("NVIDIA_VISIBLE_DEVICES")

    return str(wait_for(logged, 60, f"{name}'s environment"))


def _pod_of(bed: Testbed, name: str) -> Obj:
    return bed.kube.get("v1", "Pod", f"restart-{name}", NAMESPACE) or {}


def _kept(bed: Testbed, name: str) -> tuple[str, int, str]:
    """What a holder must keep across a restart: its container (id and restart count) and its
    record."""
    pod = _pod_of(bed, name)
    (status,) = pod["status"]["containerStatuses"]
    record = pod["metadata"].get("annotations", {}).get(ALLOCATED_ANNOTATION, "")
    return str(status.get("containerID")), int(status.get("restartCount", 0)), record


def _holder(bed: Testbed, name: str, limits: dict[str, str]) -> str:
    pod = f"restart-{name}"
    bed.kube.create(_pod(pod, NODE, limits, "env; exec sleep 600"))
    phase = wait_for(
        lambda: _phase(bed, pod) in ("Running", "Succeeded", "Failed") and _phase(bed, pod),
        120,
        f"{pod} to start",
    )
    status = _pod_of(bed, name).get("status", {})
    assert phase == "Running", f"{pod} {phase}: {status.get('reason')} {status.get('message')}"
    card = _card(bed, pod)
    wait_for(
        lambda: (
            card
            in _pod_of(bed, name)["metadata"].get("annotations", {}).get(ALLOCATED_ANNOTATION, "")
        ),
        30,
        f"{pod}'s record",
    )
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
    is Ready offering its cards again; print how long."""
    plugins = set(_plugin_sockets(node))
    started = time.monotonic()
    since = time.time()
    restart()

    def registered_again() -> bool:
        now = _plugin_sockets(node)
        return set(now) == plugins and all(made > since for made in now.values())

    if what == "kubelet":
        wait_for(registered_again, 180, f"the agent's plugins registered again after the {what}")
    _serving(bed, f"{NODE} serving after the {what}", 180)
    print(f"{what} restart: serving again {time.monotonic() - started:.1f} s after")


def test_running_pods_keep_their_cards_across_kubelet_and_containerd_restarts(
    real_chain: Testbed,
) -> None:
    bed = real_chain
    node = _node(bed)
    # Pods and namespaces of earlier modules may still be ending: a card held in another mode
    # is listed Unhealthy, so start once the node offers every card whole.
    wait_quiet(bed, [node.spec])
    held = {name: _holder(bed, name, limits) for name, limits in HOLDERS.items()}
    assert len(set(held.values())) == len(held), f"two holders on one card: {held}"
    wait_ledger_matches(bed, NODE)
    # The kubelet posts what the node offers every few seconds: the slice's card leaves the
    # whole cards' count before the first restart, so the count after it means the same.
    _serving(bed, f"{NODE} to offer its cards beside the holders", 60)
    try:
        for what, restart, newcomer in (
            ("kubelet", node.restart_kubelet, "second"),
            ("containerd", node.restart_containerd, "third"),
        ):
            kept = {name: _kept(bed, name) for name in held}
            before = _ledger(bed)
            began = time.monotonic()
            _restarted(bed, node, what, restart)
            for name, was in kept.items():
                assert _phase(bed, f"restart-{name}") == "Running"
                # The same container, never restarted, the same record: its card was not taken
                # from it, nor allocated again.
                assert _kept(bed, name) == was, f"restart-{name} changed across the {what}"
            assert _ledger(bed) == before, f"the ledger changed across the {what} restart"
            card = _holder(bed, newcomer, {GPU: "1"})
            print(f"{what} restart: a new Pod on a card {time.monotonic() - began:.1f} s after")
            assert card not in held.values(), f"{card} granted twice after the {what} restart"
            held[newcomer] = card
            assert not held_twice(bed, NODE)
            wait_ledger_matches(bed, NODE)
    finally:
        for name in list(held):
            bed.kube.delete("v1", "Pod", f"restart-{name}", NAMESPACE)

    def gone() -> bool:
        return all(bed.kube.get("v1", "Pod", f"restart-{n}", NAMESPACE) is None for n in held)

    wait_for(gone, 120, "the holders to go")
