"""Pools to queues on the real control plane: credits, admission, inactive, drain, teardown.

Workloads are created through the pool's LocalQueue the way a job integration would; as there is
no job controller for bare Workloads, the test plays the owner when Kueue evicts one (it releases
the quota, as Kueue's own performance runner does).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from chain.names import local_queue_name
from chain.quantity import parse_quantity
from kubeapi import Kube, Obj, wait_for
from testbed.drivers import running_lifecycle_keeper
from testbed.harness import Testbed
from testbed.install import Installed
from testbed.nodes import node_object, register_node
from testbed.workloads import condition, gpu_workload, release_quota, tenant_namespace
from tests.e2e.test_pools import T4_POOL, device_manager_feature, forget_pool, nfd_worker_feature

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
NFD = "nfd.k8s-sigs.io/v1alpha1"
CREDITS = "credits.gpustack.ai/nvidia"


def _workload(kube: Kube, namespace: str, name: str, gpus: int) -> None:
    kube.create(gpu_workload(name, namespace, local_queue_name(T4_POOL), gpus))


def _get_workload(kube: Kube, namespace: str, name: str) -> Obj | None:
    return kube.get(KUEUE, "Workload", name, namespace)


def _release_if_evicted(kube: Kube, namespace: str, name: str) -> bool:
    """Play the job owner: once Kueue evicted the Workload, release its quota."""
    wl = _get_workload(kube, namespace, name)
    if condition(wl, "Evicted") != "True":
        return False
    if condition(wl, "QuotaReserved") == "True":
        release_quota(kube, namespace, name)
    return True


def _add_t4_node(kube: Kube, cards: int) -> str:
    name = f"t4q-{uuid.uuid4().hex[:5]}-x"
    register_node(kube, node_object(name, cpu="16", capacity={"nvidia.com/gpu": str(cards)}))
    kube.apply(nfd_worker_feature(name))
    kube.apply(device_manager_feature(name, cards))
    return name


def _remove_node(kube: Kube, name: str) -> None:
    kube.delete(NFD, "NodeFeature", name, "node-feature-discovery")
    kube.delete(NFD, "NodeFeature", f"{name}-gpustack-device-manager", "node-feature-discovery")
    kube.delete("v1", "Node", name)


@pytest.fixture
def t4_pool(testbed: Testbed, chain: Installed) -> Iterator[list[str]]:
    """5 T4 cards on two nodes (2 + 3): one pool, one queue, and the lifecycle keeper running (as
    every verdict driver replica runs it)."""
    kube = testbed.kube
    forget_pool(kube, T4_POOL)  # whatever an earlier test left of this pool
    nodes = [_add_t4_node(kube, cards) for cards in (2, 3)]
    with running_lifecycle_keeper(testbed):
        yield nodes
    for name in nodes:
        _remove_node(kube, name)


def _nominal(cq: Obj | None) -> int:
    total = 0
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for res in flavor["resources"]:
                if res["name"] == CREDITS:
                    total += int(parse_quantity(res["nominalQuota"]))
    return total


def test_pool_queue_admits_drains_and_tears_down(
    testbed: Testbed, chain: Installed, t4_pool: list[str]
) -> None:
    kube = testbed.kube
    cq = wait_for(
        lambda: (q := kube.get(KUEUE, "ClusterQueue", T4_POOL)) and _nominal(q) == 8_000_000 and q,
        120,
        "the T4 queue with 8,000,000 credits",
    )
    assert cq["spec"]["stopPolicy"] == "None"
    assert cq["spec"]["namespaceSelector"] == {}
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == [CREDITS]
    wait_for(
        lambda: condition(kube.get(KUEUE, "ClusterQueue", T4_POOL), "Active") == "True",
        60,
        "the T4 queue to be Active",
    )

    with tenant_namespace(kube, T4_POOL) as ns:
        # nvidia.com/gpu: 2 is charged 2 x 1,600,000 credits.
        _workload(kube, ns, "two-cards", 2)
        wl = wait_for(
            lambda: (
                (w := _get_workload(kube, ns, "two-cards"))
                and condition(w, "Admitted") == "True"
                and w
            ),
            90,
            "admission",
        )
        usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert parse_quantity(usage[CREDITS]) == 3_200_000, usage
        assert "nvidia.com/gpu" not in usage

        # Inactive: new Workloads wait, the admitted one keeps running.
        kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": True}})
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL)["spec"]["stopPolicy"] == "Hold",
            60,
            "the queue to Hold",
        )
        _workload(kube, ns, "while-held", 1)
        time.sleep(5)  # long enough for Kueue to admit it if the queue were not held
        assert condition(_get_workload(kube, ns, "while-held"), "Admitted") != "True"
        assert condition(_get_workload(kube, ns, "two-cards"), "Admitted") == "True"
        kube.delete(KUEUE, "Workload", "while-held", ns)
        kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": False}})
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL)["spec"]["stopPolicy"] == "None",
            60,
            "the queue to be released",
        )

        # Every node leaves: the queue drains (the admitted Workload is evicted), then its
        # groups are emptied. The drain is the hook's own: the type is not marked inactive.
        for name in t4_pool:
            kube.delete(
                NFD, "NodeFeature", f"{name}-gpustack-device-manager", "node-feature-discovery"
            )
            kube.delete("v1", "Node", name)
        wait_for(
            lambda: _release_if_evicted(kube, ns, "two-cards"),
            120,
            "the admitted Workload to be evicted by the drain",
        )
        drained = wait_for(
            lambda: (
                (q := kube.get(KUEUE, "ClusterQueue", T4_POOL))
                and not q["spec"].get("resourceGroups")
                and q
            ),
            120,
            "the queue's groups emptied",
        )
        assert drained["spec"]["stopPolicy"] in ("Hold", "HoldAndDrain")
        assert not kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive")

        # Deleting the type drains and deletes its queue, then the type goes.
        kube.delete(KUEUE, "Workload", "two-cards", ns)
        kube.delete(WORKER, "InstanceType", T4_POOL)
        wait_for(
            lambda: kube.get(KUEUE, "ClusterQueue", T4_POOL) is None, 120, "the queue to be deleted"
        )
        wait_for(
            lambda: kube.get(WORKER, "InstanceType", T4_POOL) is None,
            120,
            "the InstanceType to go once its queue is gone",
        )


def test_a_pool_whose_agents_go_and_come_back_reopens_by_itself(
    testbed: Testbed, chain: Installed, t4_pool: list[str]
) -> None:
    """An uninstall and a reinstall, as the pool sees them (#35): the uninstall deletes the node
    agents' namespace and their NodeFeatures with it, so NFD takes the accelerator labels off
    the nodes, which keep their cards; the reinstalled agents write them again. The pool loses
    its flavors, its queue drains (the admitted Workload is evicted), and once the labels are
    back the queue is Active again with its credits, the type never marked inactive: no admin
    has to clear anything."""
    kube = testbed.kube
    _wait_active(kube)
    with tenant_namespace(kube, T4_POOL) as ns:
        _workload(kube, ns, "before", 1)
        wait_for(lambda: _admitted(kube, ns, "before"), 90, "admission before the uninstall")

        for name in t4_pool:  # what the agents' namespace takes with it
            kube.delete(
                NFD, "NodeFeature", f"{name}-gpustack-device-manager", "node-feature-discovery"
            )
        wait_for(
            lambda: _release_if_evicted(kube, ns, "before"), 120, "the drain to evict the Workload"
        )
        wait_for(
            lambda: (q := _queue(kube)) and not q["spec"].get("resourceGroups") and q,
            120,
            "the queue's groups emptied",
        )
        assert not kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive")

        for name, cards in zip(t4_pool, (2, 3), strict=True):  # the agents report again
            kube.apply(device_manager_feature(name, cards))
        back = wait_for(
            lambda: (
                (q := _queue(kube))
                and q["spec"]["stopPolicy"] == "None"
                and _nominal(q) == 8_000_000
                and condition(q, "Active") == "True"
                and q
            ),
            120,
            "the queue Active again with the pool's 5 cards",
        )
        assert back["spec"]["stopPolicy"] == "None"
        assert not kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive")
        kube.delete(KUEUE, "Workload", "before", ns)
        _workload(kube, ns, "after", 1)
        wait_for(lambda: _admitted(kube, ns, "after"), 90, "admission after the reinstall")


def _queue(kube: Kube) -> Obj | None:
    return kube.get(KUEUE, "ClusterQueue", T4_POOL)


def _wait_active(kube: Kube) -> None:
    wait_for(
        lambda: condition(_queue(kube), "Active") == "True" and _nominal(_queue(kube)) > 0,
        120,
        "the T4 queue to be Active with its credits",
    )


def _admitted(kube: Kube, ns: str, name: str) -> Obj | None:
    wl = _get_workload(kube, ns, name)
    return wl if condition(wl, "Admitted") == "True" else None


def test_an_admins_hold_and_delete_of_the_queue(
    testbed: Testbed, chain: Installed, t4_pool: list[str]
) -> None:
    """An admin's Hold on the queue is kept and marks the type inactive; clearing Inactive
    releases it. An admin's delete of the queue drains it (Kueue would not), and the type,
    still alive, gets its queue back."""
    kube = testbed.kube
    _wait_active(kube)
    with tenant_namespace(kube, T4_POOL) as ns:
        _workload(kube, ns, "running", 1)
        wait_for(lambda: _admitted(kube, ns, "running"), 90, "admission")

        # Hold by hand on the queue: kept, and the type is marked inactive.
        kube.merge_patch(KUEUE, "ClusterQueue", T4_POOL, {"spec": {"stopPolicy": "Hold"}})
        wait_for(
            lambda: kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive") is True,
            60,
            "the type marked inactive after the admin's Hold",
        )
        time.sleep(3)  # a few syncs of the queue hook: none may undo the Hold
        assert _queue(kube)["spec"]["stopPolicy"] == "Hold"
        assert _admitted(kube, ns, "running"), "a Hold evicts nothing"

        # Clearing Inactive is how the admin releases it.
        kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": False}})
        wait_for(
            lambda: _queue(kube)["spec"]["stopPolicy"] == "None", 60, "the queue to be released"
        )
        time.sleep(3)  # and the keeper does not mark it again
        assert kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive") is False
        assert _queue(kube)["spec"]["stopPolicy"] == "None"

        # The admin deletes the queue while a Workload is admitted in it.
        old_uid = _queue(kube)["metadata"]["uid"]
        kube.delete(KUEUE, "ClusterQueue", T4_POOL)
        # It keeps its LocalQueue while it drains (the Workload holds its quota until released
        # below, so the queue stays): Kueue reaches the Workload only through it.
        wait_for(
            lambda: (
                (q := _queue(kube))
                and q["metadata"].get("deletionTimestamp")
                and q["spec"].get("stopPolicy") == "HoldAndDrain"
            ),
            60,
            "the deleted queue to be drained",
        )
        time.sleep(2)  # a few syncs of the entrance hook: none may drop it
        assert kube.get(KUEUE, "LocalQueue", local_queue_name(T4_POOL), ns) is not None
        wait_for(
            lambda: _release_if_evicted(kube, ns, "running"),
            120,
            "the admitted Workload to be evicted by the deleted queue's drain",
        )
        back = wait_for(
            lambda: (q := _queue(kube)) and q["metadata"]["uid"] != old_uid and q,
            120,
            "the queue to be gone and made again for the living type",
        )
        assert back["spec"]["stopPolicy"] == "None"
        assert kube.get(WORKER, "InstanceType", T4_POOL)["spec"].get("inactive") is False
        kube.delete(KUEUE, "Workload", "running", ns)
        _workload(kube, ns, "after", 1)
        wait_for(lambda: _admitted(kube, ns, "after"), 90, "admission in the new queue")


CHAIN = "gpustack.ai/v1alpha1"
POOLS_FINALIZER = "metacontroller.io/decoratorcontroller-gpustack-flavor-pools"


def _controller_uid(obj: Obj) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r["uid"] for r in refs if r.get("controller")), None)


def _chain_flavors(kube: Kube) -> dict[str, Obj]:
    flavors = kube.list(KUEUE, "ResourceFlavor", label_selector="resource.gpustack.ai/type=nodes")
    return {f["metadata"]["name"]: f for f in flavors}


def test_deleting_and_recreating_the_settings_touches_no_pool_queue_or_workload(
    testbed: Testbed, chain: Installed, t4_pool: list[str]
) -> None:
    kube = testbed.kube
    _wait_active(kube)
    settings = wait_for(
        lambda: (
            (s := kube.get(CHAIN, "Settings", "default"))
            and POOLS_FINALIZER in (s["metadata"].get("finalizers") or [])
            and s
        ),
        60,
        "the pools decorator's finalizer on the settings singleton",
    )
    spec = settings.get("spec") or {}
    flavors = _chain_flavors(kube)
    t4_flavors = sorted(n for n in flavors if "nvidia-tesla-t4" in n)
    assert t4_flavors and all(
        _controller_uid(flavors[n]) == settings["metadata"]["uid"] for n in t4_flavors
    )
    before = {
        "type": kube.get(WORKER, "InstanceType", T4_POOL)["metadata"]["uid"],
        "queue": _queue(kube)["metadata"]["uid"],
        "flavors": {n: flavors[n]["metadata"]["uid"] for n in t4_flavors},
    }
    extra: str | None = None
    with tenant_namespace(kube, T4_POOL) as ns:
        _workload(kube, ns, "running", 1)
        wait_for(lambda: _admitted(kube, ns, "running"), 90, "admission")
        try:
            kube.delete(CHAIN, "Settings", "default")
            wait_for(
                lambda: kube.get(CHAIN, "Settings", "default") is None,
                60,
                "the settings singleton to go once its attachments are released",
            )
            time.sleep(5)  # time for the garbage collector to delete anything it still owned
            flavors = _chain_flavors(kube)
            assert {n: flavors[n]["metadata"]["uid"] for n in t4_flavors} == before["flavors"]
            assert all(_controller_uid(flavors[n]) is None for n in t4_flavors)
            assert kube.get(WORKER, "InstanceType", T4_POOL)["metadata"]["uid"] == before["type"]
            queue = _queue(kube)
            assert queue["metadata"]["uid"] == before["queue"]
            assert queue["spec"]["stopPolicy"] == "None" and condition(queue, "Active") == "True"
            assert _admitted(kube, ns, "running"), "the admitted Workload was touched"
        finally:
            if kube.get(CHAIN, "Settings", "default") is None:
                kube.create(
                    {
                        "apiVersion": CHAIN,
                        "kind": "Settings",
                        "metadata": {"name": "default"},
                        "spec": spec,
                    }
                )
        renewed = kube.get(CHAIN, "Settings", "default")["metadata"]["uid"]
        wait_for(
            lambda: all(
                _controller_uid(f) == renewed
                for n, f in _chain_flavors(kube).items()
                if n in before["flavors"]
            ),
            60,
            "the new singleton to adopt the pool's flavors",
        )
        # Adopted flavors are the pools decorator's again: a third node resizes its flavor.
        nominal = _nominal(_queue(kube))
        extra = _add_t4_node(kube, 2)
        try:
            wait_for(
                lambda: _nominal(_queue(kube)) == nominal + 3_200_000,
                120,
                "the queue to grow by the new node's two cards",
            )
            assert kube.get(WORKER, "InstanceType", T4_POOL)["metadata"]["uid"] == before["type"]
            assert _queue(kube)["metadata"]["uid"] == before["queue"]
            assert _admitted(kube, ns, "running")
        finally:
            _remove_node(kube, extra)
