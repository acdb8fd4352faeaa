"""The CDI injection strategy under a real CDI-enabled runtime.

With `GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=cdi-annotations` set on the shipped DaemonSet
(as a user sets it), the agent answers a grant with the annotation `cdi.k8s.io/gpustack-nvidia:
nvidia.com/gpu=<card uuid>`, the real kubelet hands it to containerd, and containerd resolves it
from the node's CDI spec: the container gets the spec's edits for that card, and no
`NVIDIA_VISIBLE_DEVICES`. The spec is what a vendor toolkit would write (here, one env var per
card naming it). The DaemonSet is put back as shipped afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml

from chain.apis import WORKER_API
from chain.devices import Devices
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.release import AGENT_NAMESPACE
from kubeapi import wait_for
from testbed.cluster import NVIDIA_AGENT
from testbed.harness import Testbed
from testbed.images import PROJECT_IMAGE
from testbed.kubectl import kubectl
from testbed.realnode import node_cdi_dir

GPU = "nvidia.com/gpu"
STRATEGY = "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY"
SEEN = "GPUSTACK_CDI_CARD"
NODE = "node-a"


def _rolled_out(bed: Testbed) -> None:
    kubectl(
        bed,
        "rollout",
        "status",
        f"daemonset/{NVIDIA_AGENT}",
        "-n",
        AGENT_NAMESPACE,
        "--timeout=180s",
    )


@pytest.fixture
def cdi_agents(real_chain: Testbed) -> Iterator[Testbed]:
    bed = real_chain
    devices = Devices.parse(wait_for(lambda: bed.kube.get(WORKER_API, "Devices", NODE), 60, NODE))
    cards = [card.id for _, card in devices.spec.cards()]
    spec = {
        "cdiVersion": "0.5.0",
        "kind": GPU,
        "devices": [
            {"name": card, "containerEdits": {"env": [f"{SEEN}={card}"]}} for card in cards
        ],
    }
    path = node_cdi_dir(bed, NODE) / "gpustack-test-nvidia.yaml"
    path.write_text(yaml.safe_dump(spec))
    daemonset = f"daemonset/{NVIDIA_AGENT}"
    kubectl(bed, "set", "env", daemonset, "-n", AGENT_NAMESPACE, f"{STRATEGY}=cdi-annotations")
    _rolled_out(bed)
    try:
        yield bed
    finally:
        kubectl(bed, "set", "env", daemonset, "-n", AGENT_NAMESPACE, f"{STRATEGY}-")
        _rolled_out(bed)
        path.unlink(missing_ok=True)


def test_a_cdi_annotation_is_resolved_by_containerd(cdi_agents: Testbed) -> None:
    bed = cdi_agents
    name = f"cdi-{uuid.uuid4().hex[:6]}"
    bed.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": PROJECT_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "env; sleep 2"],
                        "resources": {"limits": {GPU: "1"}},
                    }
                ],
            },
        }
    )
    try:

        def finished() -> bool:
            pod = bed.kube.get("v1", "Pod", name, "default") or {}
            return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")

        wait_for(finished, 120, f"{name} to run")
        env = dict(
            line.split("=", 1)
            for line in kubectl(bed, "logs", "-n", "default", name).splitlines()
            if "=" in line
        )
        pod = bed.kube.get("v1", "Pod", name, "default") or {}
        record = parse_allocated(pod["metadata"]["annotations"][ALLOCATED_ANNOTATION])
        [claim] = record["main"].claims()
        # containerd applied the CDI spec's edits for exactly the card the agent granted.
        assert env.get(SEEN) == claim.row.id
        assert "NVIDIA_VISIBLE_DEVICES" not in env
    finally:
        bed.kube.delete("v1", "Pod", name, "default")
