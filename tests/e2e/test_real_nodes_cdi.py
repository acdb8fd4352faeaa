"""The CDI injection strategy under a real CDI-enabled runtime.

With `GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=cdi-annotations` set on the shipped DaemonSet
(as a user sets it), the agent answers a grant with the annotation `cdi.k8s.io/gpustack-nvidia:
nvidia.com/gpu=<card uuid>`, the real kubelet hands it to containerd, and containerd resolves it
from the node's CDI spec: the container gets the spec's edits for that card, and no
`NVIDIA_VISIBLE_DEVICES`. The spec is what a vendor toolkit would write (here, one env var per
card naming it). The DaemonSet is put back as shipped afterwards.

Both rolls of the agent DaemonSet also show how each replaced agent stops: every old agent's log
is followed from before the roll to its end, which must be the agent's own last line, `stopped
<s> s after the signal` (not a kill at the end of the grace period); the times are printed.
"""

from __future__ import annotations

import re
import subprocess
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
from testbed.kubectl import kubectl, kubectl_argv
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


STOPPED = re.compile(r"stopped ([0-9.]+) s after the signal")


def _rolled(bed: Testbed, change: tuple[str, ...]) -> dict[str, float | None]:
    """`kubectl <change>` on the agent DaemonSet and its rollout, with each old agent's log
    followed to its end: the seconds each old agent took to stop, by its own last line, or None
    where it wrote none."""
    found = bed.kube.list(
        "v1",
        "Pod",
        AGENT_NAMESPACE,
        label_selector=f"app.kubernetes.io/name={NVIDIA_AGENT}",
    )
    followers = {}
    for pod in found:
        name = pod["metadata"]["name"]
        followers[name] = subprocess.Popen(
            kubectl_argv(bed, "-n", AGENT_NAMESPACE, "logs", "-f", "-c", "agent", name),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        kubectl(bed, *change)
        _rolled_out(bed)
        took: dict[str, float | None] = {}
        for name, follower in followers.items():
            # Ends with the old container; the rollout is over, so within seconds.
            out, _ = follower.communicate(timeout=60)
            stops = STOPPED.findall(out)
            took[name] = float(stops[-1]) if stops else None
        return took
    finally:
        for follower in followers.values():
            if follower.poll() is None:
                follower.kill()
                follower.wait()


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
    change = ("set", "env", daemonset, "-n", AGENT_NAMESPACE)
    stops = _rolled(bed, (*change, f"{STRATEGY}=cdi-annotations"))
    try:
        yield bed
    finally:
        stops.update(_rolled(bed, (*change, f"{STRATEGY}-")))
        path.unlink(missing_ok=True)
    print(f"\nold agents stopped, seconds after their signal: {stops}")
    assert len(stops) == 4 and None not in stops.values(), stops  # two nodes, two rolls


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
