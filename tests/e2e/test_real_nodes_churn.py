"""Churn without growth on the real nodes (issue #35, item 3; the long run through the agent's
gRPC plugins on one simulated node is `benchmarks/churn.py`).

    make test                 # the short profile: 48 lifecycles
    make churn-real-nodes     # the long one: 400 (GPUSTACK_REAL_CHURN=long)

Pod lifecycles of mixed modes (exclusive, shared, sliced) on both real nodes: each Pod is
created in a namespace of its own with no node named, bound by the scheduler, admitted by the
node's kubelet through the agent's Allocate, runs a second, ends `Succeeded` and stays listed a
few lifecycles more, as a finished Job's Pod does, before it is deleted. A Pod the kubelet
refused (`UnexpectedAdmissionError`: the agent's Allocate said no) is an outcome, counted by
mode. A few Pods are in flight at once, so a card changes mode while finished Pods of its old
mode are still listed (what kept cards held before #35's fix of `charging_reservations`).

Printed: the outcomes; each agent's RSS after the warm-up, at the middle and at the end, and
end / warm-up (goal: at most 1.10, not asserted: a run of a few hundred lifecycles on a shared
2-core machine measures the Python heap's settling as much as any leak); the journal's largest
size. Asserted: at every sample no card is held twice by the records; at the end, with the
namespace gone, each node's ledger equals the sum of its Pods' records, every card is offered
whole again, the journal is empty and no work dir of a churn Pod is left.

Simulated, said plainly: the cards (node-a's 4 x T4, node-b's 2 x L4). Real: the scheduler, the
kubelets, containerd, runc, the agents' device plugins, their journals and work dirs.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import pytest

from benchmarks.churn import GOAL_RSS_RATIO, audit, limits_for, proc_status
from chain.devices import Devices
from chain.ledger import Mode
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    PodAllocations,
    rebuild_status,
    with_unrecorded,
)
from chain.release import AGENT_NAMESPACE
from kubeapi import Obj, wait_for
from nodeagent.plugin.grants import OPERATOR_PODS_DIR
from nodeagent.plugin.journal import JOURNAL_NAME
from testbed import images
from testbed.cluster import NVIDIA_AGENT, REAL_NODES, offers_every_card, wait_quiet
from testbed.harness import Testbed
from testbed.realnode import RealNode
from testbed.workloads import card_pod
from tests.e2e.conftest import scratch_namespace

WORKER = "worker.gpustack.ai/v1alpha1"
MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED)
MODE_LABEL = "churn.gpustack.ai/mode"
JOURNAL = f"{os.path.dirname(OPERATOR_PODS_DIR)}/nvidia-{JOURNAL_NAME}"
"""The NVIDIA agent's journal on its node (`nodeagent serve`'s default beside the pods dir)."""
REFUSED = "UnexpectedAdmissionError"
"""The kubelet's reason on a Pod whose device plugin refused its Allocate."""


@dataclass(frozen=True)
class Profile:
    name: str
    lifecycles: int
    warmup: int
    """Lifecycles ended before the first RSS sample (the agents' caches and threads settle)."""
    in_flight: int
    """Pods created and not yet ended, at most."""
    linger: int
    """Ended Pods kept listed before they are deleted."""
    samples: int


PROFILES = {
    "short": Profile("short", 48, 8, 6, 3, 3),
    "long": Profile("long", 400, 40, 8, 4, 9),
}


def profile() -> Profile:
    return PROFILES[os.environ.get("GPUSTACK_REAL_CHURN", "short")]


# --- what the test reads of a node ---------------------------------------------------------------


def agent_pid(bed: Testbed, node: RealNode) -> int:
    """The host pid of the node's NVIDIA agent (`python -m nodeagent serve`), from containerd's
    task of the agent Pod's container."""
    (pod,) = bed.kube.list(
        "v1",
        "Pod",
        AGENT_NAMESPACE,
        label_selector=f"app.kubernetes.io/name={NVIDIA_AGENT}",
        field_selector=f"spec.nodeName={node.spec.name}",
    )
    (status,) = pod["status"]["containerStatuses"]
    container = str(status["containerID"]).partition("://")[2]
    for line in node.ctr("task", "ls").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container:
            return int(pid)
    raise AssertionError(f"no task for the agent's container {container} on {node.spec.name}")


def journal_size(node: RealNode) -> int:
    try:
        return node.host_path(JOURNAL).stat().st_size
    except FileNotFoundError:
        return 0


def work_dirs(node: RealNode) -> set[str]:
    """The per-Pod work dirs on the node, by Pod uid."""
    folder = node.host_path(OPERATOR_PODS_DIR)
    return {path.name for path in folder.iterdir()} if folder.is_dir() else set()


def node_pods(bed: Testbed, node: str) -> list[Obj]:
    return bed.kube.list("v1", "Pod", field_selector=f"spec.nodeName={node}")


def devices(bed: Testbed, node: str) -> Devices:
    return Devices.parse(bed.kube.get(WORKER, "Devices", node) or {})


def held_twice(bed: Testbed, node: str) -> list[str]:
    """A card the node's records (the Pods' annotations and the agent's unlanded ones) hold
    twice: two modes, two exclusive holders, more units than a card has. One list of the Pods
    is one moment; the ledger, written after, may lag it, so it is not compared here."""
    found = devices(bed, node)
    pods = with_unrecorded(node_pods(bed, node), found.unrecorded)
    return list(rebuild_status(found.spec, map(PodAllocations.from_pod, pods)).problems)


def ledger_problems(bed: Testbed, node: str) -> list[str]:
    """`benchmarks.churn.audit` of the node: a card held twice, or a ledger row that is not the
    sum of the records."""
    found = devices(bed, node)
    return audit(found.spec, node_pods(bed, node), found.unrecorded, found.status)


def wait_ledger_matches(bed: Testbed, node: str, timeout: float = 60.0) -> None:
    """The ledger is written after each change of the node's Pods: give it time to catch up
    with the last one, then say what differs."""
    try:
        wait_for(lambda: not ledger_problems(bed, node), timeout, f"{node}'s ledger")
    except TimeoutError:
        raise AssertionError(f"{node}: {ledger_problems(bed, node)}") from None


# --- the churn -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    ended: int
    rss_kib: dict[str, int]
    journal_bytes: dict[str, int]


@dataclass
class Outcomes:
    granted: Counter[str] = field(default_factory=Counter)
    refused: Counter[tuple[str, str]] = field(default_factory=Counter)
    unrecorded: int = 0
    """Pods that ended Succeeded with no record on them yet when they were seen ended."""
    journal_peak: dict[str, int] = field(default_factory=dict)


def refused_by(status: Obj) -> str:
    """Who refused a Pod that failed: the agent's Allocate (its gRPC code in the kubelet's
    message), the kubelet's own device list (no healthy or free token of the kind: the
    scheduler counted one the agent had meanwhile marked Unhealthy or given away), or neither."""
    message = str(status.get("message") or "")
    if status.get("reason") != REFUSED:
        return str(status.get("reason") or "Failed")
    if "rpc error" in message:
        return "agent " + message.partition("code = ")[2].split(" ", 1)[0]
    return "kubelet"


class RealChurn:
    """The lifecycles, driven through the API server; the nodes read from the host."""

    def __init__(
        self, bed: Testbed, namespace: str, profile: Profile, nodes: Sequence[RealNode]
    ) -> None:
        self.bed = bed
        self.namespace = namespace
        self.profile = profile
        self.nodes = nodes
        self.draw = random.Random(20261205)
        self.outcomes = Outcomes()
        self.uids: set[str] = set()
        self.seen_ended: set[str] = set()
        self.ended: deque[str] = deque()
        self.created = 0

    def sample(self) -> Sample:
        for node in self.nodes:
            problems = held_twice(self.bed, node.spec.name)
            assert not problems, f"{node.spec.name} after {len(self.seen_ended)}: {problems}"
        return Sample(
            len(self.seen_ended),
            {n.spec.name: proc_status(agent_pid(self.bed, n))["VmRSS"] for n in self.nodes},
            {n.spec.name: journal_size(n) for n in self.nodes},
        )

    def _create(self) -> None:
        self.created += 1
        mode = self.draw.choice(MODES)
        name = f"churn-{self.created}"
        made = self.bed.kube.create(
            card_pod(
                name,
                self.namespace,
                limits_for(mode, self.draw),
                images.PROJECT_IMAGE,
                "sleep 1",
                labels={MODE_LABEL: mode.name},
            )
        )
        self.uids.add(made["metadata"]["uid"])

    def _ended(self, pod: Obj) -> None:
        meta, status = pod["metadata"], pod.get("status", {})
        mode = meta["labels"][MODE_LABEL].lower()
        self.seen_ended.add(meta["name"])
        self.ended.append(meta["name"])
        if status.get("phase") == "Succeeded":
            self.outcomes.granted[mode] += 1
            self.outcomes.unrecorded += ALLOCATED_ANNOTATION not in (meta.get("annotations") or {})
        else:
            self.outcomes.refused[(mode, refused_by(status))] += 1

    def run(self) -> tuple[list[Sample], float]:
        profile = self.profile
        marks = {
            profile.warmup + (profile.lifecycles - profile.warmup) * n // (profile.samples - 1)
            for n in range(profile.samples)
        }
        samples: list[Sample] = []
        started = time.monotonic()
        # Generous: a lifecycle takes a few seconds on an idle machine, and this one is shared.
        deadline = started + 300 + 15 * profile.lifecycles
        while len(self.seen_ended) < profile.lifecycles:
            pods = self.bed.kube.list("v1", "Pod", self.namespace)
            active = 0
            for pod in pods:
                terminal = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
                if terminal and pod["metadata"]["name"] not in self.seen_ended:
                    self._ended(pod)
                active += not terminal
            while len(self.ended) > profile.linger:
                self.bed.kube.delete("v1", "Pod", self.ended.popleft(), self.namespace)
            while active < profile.in_flight and self.created < profile.lifecycles:
                self._create()
                active += 1
            for node in self.nodes:
                peak = self.outcomes.journal_peak
                peak[node.spec.name] = max(peak.get(node.spec.name, 0), journal_size(node))
            if marks and len(self.seen_ended) >= min(marks):
                marks.discard(min(marks))
                samples.append(self.sample())
            if time.monotonic() > deadline:
                left = [
                    f"{p['metadata']['name']} {p.get('status', {}).get('phase')}"
                    for p in pods
                    if p["metadata"]["name"] not in self.seen_ended
                ]
                raise AssertionError(f"churn stuck after {len(self.seen_ended)}: {left}")
            time.sleep(0.5)
        return samples, time.monotonic() - started


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def report(profile: Profile, outcomes: Outcomes, samples: Sequence[Sample], seconds: float) -> None:
    granted = sum(outcomes.granted.values())
    print(
        f"\nReal-node churn ({profile.name}): {profile.lifecycles} Pod lifecycles in "
        f"{seconds:.0f} s ({profile.lifecycles / seconds:.2f} /s); granted "
        + ", ".join(f"{mode} {n}" for mode, n in sorted(outcomes.granted.items()))
        + f" ({granted}); refused "
        + (", ".join(f"{m} {why} {n}" for (m, why), n in sorted(outcomes.refused.items())) or "0")
        + f"; ended with no record yet: {outcomes.unrecorded}"
    )
    warm, end = samples[0], samples[-1]
    middle = min(samples, key=lambda s: abs(s.ended - profile.lifecycles // 2))
    for node in sorted(warm.rss_kib):
        ratio = end.rss_kib[node] / warm.rss_kib[node]
        verdict = "met" if ratio <= GOAL_RSS_RATIO else "MISSED"
        print(
            f"{node} agent RSS: warm-up ({warm.ended}) {_mib(warm.rss_kib[node])}, middle "
            f"({middle.ended}) {_mib(middle.rss_kib[node])}, end {_mib(end.rss_kib[node])}; "
            f"end / warm-up {ratio:.3f} (goal <= {GOAL_RSS_RATIO:.2f}: {verdict}); journal "
            f"largest {outcomes.journal_peak.get(node, 0)} B, end {end.journal_bytes[node]} B"
        )


def reclaimed(bed: Testbed, node: RealNode, uids: set[str]) -> None:
    """Once the churn's Pods are gone: every card of the node offered whole again, the ledger
    the sum of the records, the journal emptied (every record landed, or dropped with its Pod),
    no work dir of a churn Pod left (the agent's GC removes a gone Pod's)."""
    name = node.spec.name
    wait_for(partial(offers_every_card, bed, node.spec), 120, f"{name}'s cards offered whole")
    wait_ledger_matches(bed, name)
    wait_for(lambda: journal_size(node) == 0, 60, f"{name}'s journal emptied")
    wait_for(lambda: not work_dirs(node) & uids, 60, f"{name}'s churn work dirs removed")


@pytest.fixture
def quiet_nodes(real_chain: Testbed) -> Iterator[list[RealNode]]:
    """The real nodes once earlier modules' Pods and namespaces are gone."""
    wait_quiet(real_chain, REAL_NODES)
    yield [RealNode(real_chain, spec) for spec in REAL_NODES]


def test_pod_lifecycles_of_mixed_modes_leave_nothing_behind(
    real_chain: Testbed, quiet_nodes: list[RealNode]
) -> None:
    bed, nodes, chosen = real_chain, quiet_nodes, profile()
    with scratch_namespace(bed, "churn") as namespace:
        churn = RealChurn(bed, namespace, chosen, nodes)
        samples, seconds = churn.run()
        # The last Pods ended, a few of them still listed: a finished Pod holds no card in any
        # mode, so every card is offered whole before they go (#35: a finished Pod's
        # reservation kept its card in its mode, Unhealthy to the other modes).
        for node in nodes:
            wait_for(
                partial(offers_every_card, bed, node.spec),
                120,
                f"{node.spec.name}'s cards offered whole beside finished Pods",
            )
    wait_for(lambda: bed.kube.get("v1", "Namespace", namespace) is None, 180, "the churn's end")
    for node in nodes:
        reclaimed(bed, node, churn.uids)
    samples.append(churn.sample())
    report(chosen, churn.outcomes, samples, seconds)
    assert {mode.name.lower() for mode in MODES} <= set(churn.outcomes.granted)
