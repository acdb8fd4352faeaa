"""Instances on real nodes, installed as a user installs (`real_chain`): an Instance asking half
a T4 runs as a Pod the real kubelet admits through the agent's Allocate, its status names the
node and the card, and its container has the HAMi-core environment; an SSH-enabled Instance runs
`main` beside the chain's `sshd` sidecar, and a real SSH login (from `main`, over the Pod's
loopback) lands in `main` (its files, its user, its card's environment) while the ledger charges
the card once; stopping an Instance deletes its Pod and frees its card."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from chain.devices import Devices
from chain.ledger import Mode
from chain.names import local_queue_name
from kubeapi import wait_for
from testbed import images
from testbed.harness import Testbed
from testbed.instances import (
    SMALL,
    WORKER,
    create_instance,
    instance,
    instance_status,
    logged_env,
    running_instance,
    ssh_client_instance,
    ssh_key_secret,
    ssh_namespace,
)
from testbed.kubectl import condition_of, kubectl, wait_condition
from testbed.nodes import T4_POOL

KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def lab(real_chain: Testbed) -> Iterator[tuple[Testbed, str]]:
    """A tenant namespace with its pool's LocalQueue, and a key pair in a Secret."""
    bed = real_chain
    namespace = f"lab-{uuid.uuid4().hex[:5]}"
    bed.kube.apply(ssh_namespace(namespace))
    wait_for(
        lambda: bed.kube.get(KUEUE, "LocalQueue", local_queue_name(T4_POOL), namespace),
        90,
        "the T4 pool's LocalQueue in the lab namespace",
    )
    bed.kube.create(ssh_key_secret("lab-keys", namespace))
    try:
        yield bed, namespace
    finally:
        bed.kube.delete("v1", "Namespace", namespace)


def _logged(bed: Testbed, name: str, namespace: str, marker: str) -> dict[str, str]:
    def env() -> dict[str, str] | None:
        found = logged_env(kubectl(bed, "logs", "-n", namespace, name, "-c", "main"))
        return found if marker in found else None

    return wait_for(env, 90, f"{marker} in {name}'s log")


def _held(bed: Testbed) -> list[str]:
    found = bed.kube.get(WORKER, "Devices", "node-a")
    rows = Devices.parse(found).status.rows() if found else iter(())
    return sorted(row.id for _group, row in rows if row.mode != Mode.NONE)


def _mode(bed: Testbed, card: str) -> Mode | None:
    found = bed.kube.get(WORKER, "Devices", "node-a")
    row = Devices.parse(found).status.row("nvidia", "tesla-t4", card) if found else None
    return row.mode if row is not None else None


def test_a_sliced_instance_runs_on_its_card(lab: tuple[Testbed, str]) -> None:
    bed, namespace = lab
    resources = {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 50, **SMALL}
    command = "env; echo STARTED=1; sleep 3600"
    create_instance(
        bed.kube,
        instance("half-t4", namespace, T4_POOL, images.PROJECT_IMAGE, command, resources=resources),
    )
    status = running_instance(bed.kube, "half-t4", namespace)
    assert status["node"] == "node-a"
    (card,) = status["accelerators"]
    env = _logged(bed, "half-t4", namespace, "STARTED")
    assert env["NVIDIA_VISIBLE_DEVICES"] == card
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{16384 // 2}m"
    table = kubectl(bed, "get", "instances", "-n", namespace, "half-t4", "--no-headers")
    assert table.split()[:5] == ["half-t4", T4_POOL, "1x50%", "Running", "node-a"], table
    # As a user waits for it: every condition of the Instance holds once its Pod runs.
    for condition in ("Admitted", "Scheduled", "Ready"):
        wait_condition(bed, "instance/half-t4", condition, namespace, timeout=60)
    assert _mode(bed, card) == Mode.SLICED
    # Through Kueue and the per-card check (the verdict driver's Pod answered it).
    (workload,) = bed.kube.list(KUEUE, "Workload", namespace)
    checks = workload["status"]["admissionChecks"]
    assert [(c["name"], c["state"]) for c in checks] == [("gpustack-node-devices", "Ready")]
    assert any(
        c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"]
    )

    bed.kube.merge_patch(WORKER, "Instance", "half-t4", {"spec": {"stop": True}}, namespace)
    wait_for(lambda: bed.kube.get("v1", "Pod", "half-t4", namespace) is None, 90, "the Pod to go")
    wait_for(lambda: _mode(bed, card) == Mode.NONE, 90, "the slice to be freed")
    assert instance_status(bed.kube, "half-t4", namespace)["phase"] == "Stopped"
    wait_condition(bed, "instance/half-t4", "Ready=false", namespace, timeout=60)
    ready = condition_of(bed.kube.get(WORKER, "Instance", "half-t4", namespace), "Ready")
    assert ready["reason"] == "Stopped", ready


def test_an_ssh_login_lands_in_main_and_the_sidecar_is_charged_nothing(
    lab: tuple[Testbed, str],
) -> None:
    bed, namespace = lab
    before = _held(bed)
    create_instance(
        bed.kube,
        ssh_client_instance("notebook", namespace, T4_POOL, images.PROJECT_IMAGE, "lab-keys", 1),
    )
    status = running_instance(bed.kube, "notebook", namespace)
    (card,) = status["accelerators"]
    pod = bed.kube.get("v1", "Pod", "notebook", namespace) or {}
    main, sshd = pod["spec"]["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert sshd["image"] == images.PROJECT_IMAGE  # the chain's image, not main's choice
    assert sshd["resources"]["limits"] == {"device.gpustack.ai/nvidia.visibility": "1"}

    env = _logged(bed, "notebook", namespace, "DONE")
    assert env.get("MARKER") == "main only", env  # the session ran in main's filesystem
    assert env["SESSION_UID"] == "65532"  # as main's user (the image's), not the sidecar's root
    assert env["NVIDIA_VISIBLE_DEVICES"] == card  # with main's grant
    assert env["LAB_KEY"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")

    # One card, held exclusively once: the sidecar's visibility grant charged nothing.
    assert _mode(bed, card) == Mode.EXCLUSIVE
    assert _held(bed) == sorted([*before, card])
    bed.kube.delete(WORKER, "Instance", "notebook", namespace)
    wait_for(lambda: _mode(bed, card) == Mode.NONE, 120, "the card to be freed")


def test_an_inactive_pool_holds_new_instances_and_keeps_running_ones(
    lab: tuple[Testbed, str],
) -> None:
    """The seed's Hold: the InstanceType set inactive holds its queue; an Instance already
    running keeps running (Hold is not a stop), a new one stays pending until the type is
    active again."""
    bed, namespace = lab
    command = "echo STARTED=1; sleep 3600"
    whole = {"accelerator": "1", **SMALL}
    create_instance(
        bed.kube,
        instance("early", namespace, T4_POOL, images.PROJECT_IMAGE, command, resources=whole),
    )
    running_instance(bed.kube, "early", namespace)

    def queue_policy() -> str | None:
        queue = bed.kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}
        return str(queue.get("spec", {}).get("stopPolicy") or "None")

    patch = {"spec": {"inactive": True}}
    bed.kube.merge_patch(WORKER, "InstanceType", T4_POOL, patch)
    try:
        wait_for(lambda: queue_policy() == "Hold", 60, "the pool's queue to hold")
        create_instance(
            bed.kube,
            instance("late", namespace, T4_POOL, images.PROJECT_IMAGE, command, resources=whole),
        )
        wait_for(
            lambda: bed.kube.get("v1", "Pod", "late", namespace), 60, "the late Instance's Pod"
        )
        with pytest.raises(TimeoutError):  # a held pool admits nothing new
            running_instance(bed.kube, "late", namespace, timeout=20)
        # Kueue's gate holds its Pod, and the Instance says why: its pool's queue admits nothing.
        wait_condition(bed, "instance/late", "Admitted=false", namespace, timeout=60)
        wait_for(
            lambda: (
                condition_of(bed.kube.get(WORKER, "Instance", "late", namespace), "Admitted").get(
                    "reason"
                )
                == "PoolInactive"
            ),
            60,
            "the late Instance's Admitted condition to name the inactive pool",
        )
        assert instance_status(bed.kube, "late", namespace)["phase"] == "Pending"
        assert instance_status(bed.kube, "early", namespace)["phase"] == "Running"
    finally:
        bed.kube.merge_patch(WORKER, "InstanceType", T4_POOL, {"spec": {"inactive": False}})
    wait_for(lambda: queue_policy() == "None", 60, "the pool's queue to open again")
    running_instance(bed.kube, "late", namespace)
    for name in ("early", "late"):
        bed.kube.delete(WORKER, "Instance", name, namespace)
