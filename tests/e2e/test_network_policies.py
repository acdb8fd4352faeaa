"""The shipped NetworkPolicies, enforced on the real nodes.

Each real node runs kube-router's firewall controller (testbed/realnode.py), which turns the
policies `kubectl apply -k` installed into iptables rules, as a user's CNI would. A tenant's Pod
on either node tries the chain's Pods; a hook's Pod tries to call out; Metacontroller's calls
keep reaching the hooks from its own Pod address.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from kubeapi import Obj, wait_for
from testbed import images, network
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from tests.e2e.conftest import create_in_new_namespace

NAMESPACE = "gpustack-system"
OPEN = "OPEN"
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("OPEN")
except OSError as error:
    print(type(error).__name__)
"""


@pytest.fixture(scope="module")
def tenant(real_chain: Testbed) -> Iterator[tuple[Testbed, str]]:
    """A tenant namespace with one idle Pod on each real node."""
    bed = real_chain
    namespace = f"tenant-{uuid.uuid4().hex[:6]}"
    bed.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for node in ("node-a", "node-b"):
        create_in_new_namespace(
            bed.kube,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"prober-{node}", "namespace": namespace},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "prober",
                            "image": images.PROJECT_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "infinity"],
                        }
                    ],
                },
            },
        )
    for node in ("node-a", "node-b"):
        wait_for(lambda n=node: _running(bed, namespace, f"prober-{n}"), 120, f"prober-{node}")
    yield bed, namespace
    bed.kube.delete("v1", "Namespace", namespace)
    # Gone before the next module starts: its LocalQueues (the entrance hook gave it some)
    # vanishing later would read as losses to a test that watches them.
    wait_for(
        lambda: bed.kube.get("v1", "Namespace", namespace) is None, 120, f"{namespace} deleted"
    )


def _running(bed: Testbed, namespace: str, name: str) -> bool:
    pod = bed.kube.get("v1", "Pod", name, namespace) or {}
    return pod.get("status", {}).get("phase") == "Running"


def _reach(bed: Testbed, namespace: str, pod: str, host: str, port: int) -> str:
    """What a connection from `pod` to host:port met: OPEN, or the error's name."""
    out = kubectl(bed, "exec", "-n", namespace, pod, "--", "python", "-c", PROBE, host, str(port))
    return out.strip().splitlines()[-1]


def _pods(bed: Testbed, app: str) -> list[Obj]:
    selector = f"app.kubernetes.io/name={app}"
    return [
        p
        for p in bed.kube.list("v1", "Pod", NAMESPACE, label_selector=selector)
        if p.get("status", {}).get("podIP") and p["status"].get("phase") == "Running"
    ]


def test_a_tenant_cannot_call_a_hook_and_reaches_a_webhooks_port(
    tenant: tuple[Testbed, str],
) -> None:
    bed, namespace = tenant
    hook = _pods(bed, "gpustack-hook-flavor")[0]["status"]["podIP"]
    webhook = _pods(bed, "gpustack-webhook-admission")[0]["status"]["podIP"]
    service = f"gpustack-hook-flavor.{NAMESPACE}.svc.{network.CLUSTER_DOMAIN}"
    for node in ("node-a", "node-b"):
        pod = f"prober-{node}"
        # The network works from here: the webhook's TLS port is open to anyone (the API
        # server is no Pod), and so is the API server itself.
        assert _reach(bed, namespace, pod, webhook, 8443) == OPEN
        assert _reach(bed, namespace, pod, network.KUBERNETES_SERVICE_IP, 443) == OPEN
        # A hook is Metacontroller's alone: by its Pod address and by its Service.
        assert _reach(bed, namespace, pod, hook, 8080) != OPEN, node
        assert _reach(bed, namespace, pod, service, 80) != OPEN, node


def test_a_hook_opens_no_connection(tenant: tuple[Testbed, str]) -> None:
    bed, _namespace = tenant
    webhook = _pods(bed, "gpustack-webhook-admission")[0]["status"]["podIP"]
    for hook in _pods(bed, "gpustack-hook-queue"):
        name = hook["metadata"]["name"]
        assert _reach(bed, NAMESPACE, name, network.KUBERNETES_SERVICE_IP, 443) != OPEN
        assert _reach(bed, NAMESPACE, name, webhook, 8443) != OPEN


def test_metacontroller_reaches_the_hooks_from_its_own_pod(real_chain: Testbed) -> None:
    """The one caller the hooks' policy lets in: a call answered 200 since the policies were
    enforced, logged by a hook's gunicorn with Metacontroller's Pod address as the client."""
    bed = real_chain
    [controller] = bed.kube.list(
        "v1", "Pod", "metacontroller", label_selector="app.kubernetes.io/name=metacontroller"
    )
    address = controller["status"]["podIP"]
    since = time.monotonic()

    def called() -> bool:
        seconds = max(int(time.monotonic() - since) + 5, 10)
        for hook in _pods(bed, "gpustack-hook-flavor"):
            log = kubectl(
                bed, "logs", "-n", NAMESPACE, hook["metadata"]["name"], f"--since={seconds}s"
            )
            # Access lines read "<time> INFO gunicorn.access <client> - - [...] ..."
            # (hooks/gunicorn_conf.py).
            caller = f" gunicorn.access {address} "
            if any(caller in line and '" 200 ' in line for line in log.splitlines()):
                return True
        return False

    wait_for(called, 90, f"a hook call from Metacontroller's Pod ({address}) answered 200")
