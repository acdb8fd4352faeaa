"""Verdict driver replicas as testbed processes, under the shipped ServiceAccount and RBAC.

No kubelet runs them on the plain testbed, so the shipped Deployment is not applied; its
ServiceAccount, roles and bindings are. On the way out the node-devices check is taken out of
service again (later tests run without a driver, and Kueue would otherwise wait for verdicts
nobody gives) and the chain's queues stop naming it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from chain.apis import ADMISSION_CHECK, CLUSTER_QUEUE, KUEUE_API
from chain.queues import NODE_DEVICES_CHECK
from chain.release import AGENT_NAMESPACE
from kubeapi import Kube, load_yaml_documents, wait_for
from nodeagent.simulate.host import profile_manufacturer
from nodeagent.simulate.profile import read_profile_file
from testbed.components import http_ok
from testbed.harness import Testbed, free_port
from testbed.workloads import now
from verdictdriver.driver import FIELD_MANAGER
from verdictdriver.lease import LEASE_NAMESPACE

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "admission" / "driver.yaml"


def _apply_access(kube: Kube) -> None:
    """The driver's ServiceAccount, roles and bindings (not its Deployment: no kubelet here)."""
    for obj in load_yaml_documents(MANIFEST):
        if obj["kind"] != "Deployment":
            kube.apply(obj)


POOL_CARDS_KEEPER = "pool-cards-keeper"


def run_pool_cards_keeper(testbed: Testbed) -> None:
    """The pool-cards keeper alone (`python -m verdictdriver.pool_cards`) under the driver's
    ServiceAccount, for the rest of the testbed's life: what the driver Deployment runs in a
    cluster, without which no InstanceType shows its nodes' cards. Quicker passes than the
    shipped default (the tests wait on every ledger change)."""
    kubeconfig = testbed.service_account_kubeconfig(LEASE_NAMESPACE, "gpustack-admission-driver")
    argv = [sys.executable, "-m", "verdictdriver.pool_cards", "--kubeconfig", str(kubeconfig)]
    testbed.run(POOL_CARDS_KEEPER, [*argv, "--period", "2", "--interval", "0.2"])


@contextmanager
def running_lifecycle_keeper(testbed: Testbed) -> Iterator[None]:
    """The lifecycle keeper alone (`python -m verdictdriver.lifecycle`) under the driver's
    ServiceAccount: what the driver runs beside its verdicts, without judging anything."""
    _apply_access(testbed.kube)
    kubeconfig = testbed.service_account_kubeconfig(LEASE_NAMESPACE, "gpustack-admission-driver")
    argv = [sys.executable, "-m", "verdictdriver.lifecycle", "--kubeconfig", str(kubeconfig)]
    testbed.run("lifecycle-keeper", [*argv, "--period", "0.5"])
    try:
        yield
    finally:
        testbed.stop("lifecycle-keeper")


def queues_naming_the_check(kube: Kube) -> list[str]:
    """The ClusterQueues whose admission checks name the node-devices check."""
    named = []
    for queue in kube.list(KUEUE_API, CLUSTER_QUEUE):
        strategy = (queue.get("spec") or {}).get("admissionChecksStrategy") or {}
        if any(c.get("name") == NODE_DEVICES_CHECK for c in strategy.get("admissionChecks") or []):
            named.append(queue["metadata"]["name"])
    return named


@contextmanager
def running_drivers(
    testbed: Testbed, replicas: tuple[str, ...] = ("a", "b"), lease_seconds: int = 4
) -> Iterator[dict[str, int]]:
    """Driver replicas `admission-driver-<replica>` judging on `testbed`; yields their health
    ports."""
    kube = testbed.kube
    _apply_access(kube)
    kubeconfig = testbed.service_account_kubeconfig(LEASE_NAMESPACE, "gpustack-admission-driver")
    ports = {replica: free_port() for replica in replicas}
    for replica in replicas:
        argv = [sys.executable, "-m", "verdictdriver", "--kubeconfig", str(kubeconfig)]
        argv += ["--identity", f"driver-{replica}", "--period", "0.5"]
        argv += ["--lease-seconds", str(lease_seconds), "--health-port", str(ports[replica])]
        testbed.run(f"admission-driver-{replica}", argv)
    try:
        for replica, port in ports.items():
            url = f"http://127.0.0.1:{port}/healthz"
            wait_for(partial(http_ok, url), 30, f"driver {replica} to answer /healthz")
        yield ports
    finally:
        for replica in replicas:
            testbed.stop(f"admission-driver-{replica}")
        inactive = {
            "type": "Active",
            "status": "False",
            "reason": "NoController",
            "message": "the e2e test stopped the driver",
            "lastTransitionTime": now(),
        }
        kube.apply(
            {
                "apiVersion": KUEUE_API,
                "kind": ADMISSION_CHECK,
                "metadata": {"name": NODE_DEVICES_CHECK},
                "status": {"conditions": [inactive]},
            },
            manager=FIELD_MANAGER,
            subresource="status",
        )
        wait_for(
            lambda: not queues_naming_the_check(kube), 120, "the queues to stop naming the check"
        )


def run_agent(
    bed: Testbed, node: str, profile: str, *flags: str, env: dict[str, str] | None = None
) -> None:
    """A simulated node's agent (`python -m nodeagent serve`, for the manufacturer the profile
    simulates) as a testbed process,
    under the shipped ServiceAccount with a token that names its node, as the one the kubelet
    projects into the agent's Pod (the shipped RBAC and admission policy must be enough);
    `flags` are appended (period, device-plugin paths), `env` added to its environment (a
    restart, `Testbed.restart`, gives both again)."""
    namespace = AGENT_NAMESPACE
    kubeconfig = bed.service_account_kubeconfig(namespace, "gpustack-device-manager", node)
    argv = [sys.executable, "-m", "nodeagent", "serve", "--node", node, "--namespace", namespace]
    maker = profile_manufacturer(read_profile_file(profile)[1])
    argv += ["--kubeconfig", str(kubeconfig), "--simulate", profile, "--manufacturer", maker]
    bed.run(f"agent-{node}", [*argv, *flags], env)
