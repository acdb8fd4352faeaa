"""Paths where the real kubelet's device manager behaves otherwise than a simple caller would,
run under the kubelet of Kubernetes v1.36.3 on the testbed's real nodes (issue: the emulator is
kinder than the kubelet). The kubelet reuses an init container's devices for the app container
and calls Allocate again with the same IDs; and it sends a multi-card Allocate its own set of IDs
in its own order. (A kubelet restart is covered by the emulator, which now keeps its checkpoint
and deletes only sockets as the kubelet does.)
"""

from __future__ import annotations

from typing import Any

from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from kubeapi import Obj, wait_for
from testbed import images
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from tests.e2e.test_real_nodes_chain import NAMESPACE, _env, _phase

GPU = "nvidia.com/gpu"


def _container(name: str, cards: int, command: str) -> Obj:
    limits = {GPU: str(cards)}
    return {
        "name": name,
        "image": images.PROJECT_IMAGE,
        "command": ["sh", "-c", command],
        "resources": {"limits": limits, "requests": limits},
    }


def _pod(name: str, node: str, containers: list[Obj], init: list[Obj] | None = None) -> Obj:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": containers,
    }
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _seen(bed: Testbed, pod: str, container: str) -> str:
    log = kubectl(bed, "logs", "-n", NAMESPACE, pod, "-c", container)
    return _env(log)["NVIDIA_VISIBLE_DEVICES"]


def _record(bed: Testbed, pod: str) -> dict[str, Any]:
    found = bed.kube.get("v1", "Pod", pod, NAMESPACE) or {}
    return dict(parse_allocated(found["metadata"]["annotations"][ALLOCATED_ANNOTATION]))


def _cards(record: Any) -> list[str]:
    return sorted(claim.row.id for claim in record.claims())


def test_an_init_containers_card_is_reused_by_the_app_container(real_chain: Testbed) -> None:
    bed = real_chain
    name = "init-reuse"
    bed.kube.create(
        _pod(
            name,
            "node-a",
            [_container("main", 1, "env")],
            init=[_container("prepare", 1, "env")],
        )
    )
    try:
        wait_for(lambda: _phase(bed, name) == "Succeeded", 120, f"{name} to end")
        first, second = _seen(bed, name, "prepare"), _seen(bed, name, "main")
        assert first.startswith("GPU-") and first == second, "the kubelet reused the card"
        record = _record(bed, name)
        assert _cards(record["prepare"]) == _cards(record["main"]) == [first]
    finally:
        bed.kube.delete("v1", "Pod", name, NAMESPACE)


def test_a_two_card_grant_takes_the_kubelets_ids(real_chain: Testbed) -> None:
    bed = real_chain
    name = "two-cards"
    bed.kube.create(_pod(name, "node-a", [_container("main", 2, "env")]))
    try:
        wait_for(lambda: _phase(bed, name) == "Succeeded", 120, f"{name} to end")
        shown = sorted(_seen(bed, name, "main").split(","))
        record = _record(bed, name)["main"]
        assert len(shown) == 2 and _cards(record) == shown
        assert len(record.device_ids) == 2
    finally:
        bed.kube.delete("v1", "Pod", name, NAMESPACE)
