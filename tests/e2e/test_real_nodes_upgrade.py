"""The agent upgraded under load on the real nodes (#35, item 1): the previous release installed,
Pods holding cards, then the current release applied over it as a user upgrades.

1. **The previous release.** 0.1.0 (commit f2965f5; no tag exists) as its users had it: its image
   built from its own tree and Containerfile the way the current one is, pushed to the testbed's
   registry, and its manifests with its own testbed overlay applied with `kubectl apply -k`
   (`testbed/previous.py`), beside the upstream NFD, Kueue and Metacontroller of this testbed.
2. **Holders.** An exclusive Pod and a sliced one (half a card) on node-a, a shared one on node-b,
   started one at a time, each once the one before runs: 0.1.0's agent can refuse a card the
   kubelet picked when a share and a whole card start together (fixed since, CHANGELOG #35), and
   that race is not what this test is about. Partitioned Pods are not among them: the real
   nodes' simulated T4 and L4 cards cannot be partitioned (no MIG), so a partition held across
   an agent roll is not covered here but on the emulated testbed, 0.1.0's agent replaced by
   this release's under a held `3g.20gb` of a simulated A100 (`tests/e2e/test_device_plugin.py`,
   `test_a_partition_cut_by_the_previous_release_outlives_the_upgrade`).
   Two Workloads of the L4 pool (a share each, no Pods: Kueue and the verdict driver only) are
   admitted by 0.1.0's verdict driver.
3. **The upgrade**: `kubectl apply -k testbed/overlay`, the current release's manifests over the
   old ones. The agent DaemonSet rolls node by node, and every hook, webhook and the verdict
   driver's Deployment rolls with it; two more Workloads are submitted while they roll.
4. **Every Deployment rolled again** (`kubectl rollout restart`, all at once), two more
   Workloads submitted meanwhile.
5. **After the rolls**: a new exclusive Pod on each node, and the old exclusive holder ended.

What must hold, and is checked:

- across the upgrade, each holder keeps its container (same ID, never restarted), its record
  (the allocation annotation) and so its card;
- each node's ledger (the rows of `Devices.status`) is the same object on every sample taken
  while everything rolls (0.5 s apart), and after;
- the kubelet's checkpoint (`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint` on
  the node) gives each holder the device IDs its record names, each one the new agent's ID of
  that card in that mode, and what the kubelet keeps as registered is what the new agent
  advertises;
- the pools' ClusterQueues, LocalQueues and ResourceFlavors (the hooks' children) are the same
  objects on every sample: none deleted and made again while the hooks roll;
- no Workload is judged twice: each is admitted once and stays so, its check never goes back
  from Ready, Kueue wrote at most one `Admitted` Event for it, and the Workloads holding cards
  never ask more than node-b's cards; no two Pods' records charge one card twice;
- after the rolls, each new Pod gets a card no running Pod holds, and the ended holder frees
  its own card and nothing else (every other row as before).

Simulated, said plainly: the cards (the agents' simulated NVML over node-a's 4 x T4 and node-b's
2 x L4) and the isolation library (the testbed's stand-in). Both releases simulate the same cards:
the upgrade applies the current overlay with the old overlay's `--simulate` (0.1.0 has no
`l4x2-roce` profile, whose L4 cards have other UUIDs; `previous.upgrade_overlay`). Real: the
images, the kubelets and containerd, the device-plugin registrations and checkpoint, the API
server, Kueue, Metacontroller and every chain component as a Pod.

Long (about 15 min with its cluster's start), so `make test` does not run it: it is marked
`upgrade`, deselected unless pytest runs with `--upgrade-real-nodes` (`make upgrade-real-nodes`).
It leaves the current release installed, but after the previous one: it runs after every other
real-node module (`RESHAPES_THE_INSTALL`), and needs a cluster without the chain, as the Helm
module leaves it or a fresh one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import requests
import yaml

from chain.allocation import card_tokens, plugin_resource
from chain.devices import Devices
from chain.ledger import AcceleratorAllocation, Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.manufacturers import default_manufacturers
from chain.names import local_queue_name
from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from chain.units import RESOURCE_MAX_UNITS
from chain.workload_state import check_state
from kubeapi import KubeError, Obj, wait_for
from testbed import previous, registry, upstream
from testbed.cluster import (
    NVIDIA_AGENT,
    OVERLAY,
    REAL_NODES,
    deployment_available,
    offers_cards,
    ready_agents,
)
from testbed.harness import Testbed
from testbed.images import PROJECT_IMAGE
from testbed.kubectl import kubectl
from testbed.nodes import T4_POOL
from testbed.realnode import RealNode
from testbed.workloads import condition
from tests.e2e.test_real_nodes_chain import NAMESPACE, _env, _phase, _pod
from tests.e2e.test_restarts import (
    L4_POOL,
    _attachments,
    _on_node,
    _workload,
    promised_twice,
    records_overlap,
)

pytestmark = pytest.mark.upgrade
# Installs the previous release over whatever the Helm module left: after every other module.
RESHAPES_THE_INSTALL = True

KUEUE = "kueue.x-k8s.io/v1beta2"
WORKER = "worker.gpustack.ai/v1alpha1"
GPU = "nvidia.com/gpu"
SHARED = f"{GPU}.shared"
SLICED = f"{GPU}.sliced"
NVIDIA = default_manufacturers()["nvidia"]
MODES = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED)
CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
HOLDERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("a-whole", "node-a", {GPU: "1"}),
    # Half a card, as the Pod webhook folds a queued Pod's ask (a bare Pod is not folded; the
    # agent sizes the slice by the memory percentage).
    (
        "a-slice",
        "node-a",
        {
            SLICED: "1",
            f"{SLICED}.memory-percentage": "50",
            f"{SLICED}.units": str(RESOURCE_MAX_UNITS // 2),
        },
    ),
    ("b-share", "node-b", {SHARED: "1"}),
)
"""Each holder: its Pod's name (`upgrade-<name>` in `default`), its node, what it asks."""
WORKLOAD_NODE = "node-b"
"""Where the Workloads ask their shares: the L4 pool's only node, 2 cards."""
NODE_CARDS = {"node-a": 4, "node-b": 2}


# -- the previous release --------------------------------------------------------------------


def _old_release_installed(bed: Testbed, into: Path) -> None:
    """0.1.0 installed with `kubectl apply -k`, served: every Deployment available, every agent
    ready on the old image, every node offering its cards, both pools' queues open."""
    if bed.kube.get("apps/v1", "DaemonSet", NVIDIA_AGENT, AGENT_NAMESPACE) is not None:
        pytest.fail(
            "the chain is installed already: this module installs the previous release on a "
            "cluster without it (run it alone, `make upgrade-real-nodes`, or after "
            "test_real_nodes_helm.py, which uninstalls)"
        )
    registry.push(bed, previous.ensure_image())
    upstream.install_nfd(bed)
    upstream.install_kueue(bed)
    upstream.install_metacontroller(bed)
    overlay = previous.overlay(into)
    kubectl(bed, "apply", "-k", str(overlay))
    # 0.1.0's agent sometimes never publishes a node's slice counting keys (the log shows its
    # last report before the kubelet offered the sliced tokens, and none after); the sliced
    # holder needs them on node-a. Its agent Pod is deleted once, as an admin would, and said.
    for node in _serving(bed, overlay, previous.IMAGE):
        print(f"0.1.0's agent on {node} published no counting keys: its Pod deleted once")
        (agent,) = [p for p in _agent_pods(bed) if p["spec"].get("nodeName") == node]
        bed.kube.delete("v1", "Pod", agent["metadata"]["name"], AGENT_NAMESPACE)
        wait_for(partial(offers_cards, bed, node), 300, f"{node}'s counting keys")
    _pools_open(bed)


def _serving(bed: Testbed, overlay: Path, image: str) -> list[str]:
    """Every Deployment `overlay` renders available on `image`, the NVIDIA agents ready on it,
    every node offering whole cards; the nodes whose agent has not published its counting
    keys within two minutes more (none need them but for the sliced holder's, and a known
    defect keeps them from one node at times: CHANGELOG, "Known")."""
    rendered = [d for d in yaml.safe_load_all(kubectl(bed, "kustomize", str(overlay))) if d]
    for obj in rendered:
        if obj["kind"] == "Deployment":
            name = obj["metadata"]["name"]
            wait_for(
                lambda name=name: deployment_available(bed, name) and _rolled_to(bed, name, image),
                300,
                f"{name} available on {image}",
            )
    wait_for(
        lambda: ready_agents(bed) == len(REAL_NODES) and _agents_on(bed, image),
        300,
        f"the agents ready on {image}",
    )
    for spec in REAL_NODES:
        # Registered: the kubelet offers whole cards (fewer than the node has while another
        # mode holds some: the agent lists those tokens Unhealthy).
        wait_for(
            lambda spec=spec: int(_allocatable(bed, spec.name).get(GPU, "0")) > 0,
            300,
            f"{spec.name} to offer whole cards",
        )
    silent = []
    for spec in REAL_NODES:
        try:
            wait_for(partial(offers_cards, bed, spec.name), 120, f"{spec.name}'s counting keys")
        except TimeoutError:
            silent.append(spec.name)
    return silent


def _allocatable(bed: Testbed, node: str) -> dict[str, str]:
    return dict((bed.kube.get("v1", "Node", node) or {}).get("status", {}).get("allocatable", {}))


def _rolled_to(bed: Testbed, deployment: str, image: str) -> bool:
    """Every Pod of the Deployment runs `image` (none of an older ReplicaSet is left)."""
    found = bed.kube.get("apps/v1", "Deployment", deployment, SYSTEM_NAMESPACE) or {}
    labels = found.get("spec", {}).get("selector", {}).get("matchLabels", {})
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods = bed.kube.list("v1", "Pod", SYSTEM_NAMESPACE, label_selector=selector)
    return bool(pods) and all(_images(pod) == {image} for pod in pods)


def _agent_pods(bed: Testbed) -> list[Obj]:
    selector = f"app.kubernetes.io/name={NVIDIA_AGENT}"
    return bed.kube.list("v1", "Pod", AGENT_NAMESPACE, label_selector=selector)


def _agents_on(bed: Testbed, image: str) -> bool:
    pods = _agent_pods(bed)
    return len(pods) == len(REAL_NODES) and all(_images(pod) == {image} for pod in pods)


def _images(pod: Obj) -> set[str]:
    return {str(c["image"]) for c in pod["spec"]["containers"]}


def _pools_open(bed: Testbed) -> None:
    """Both pools' ClusterQueues Active. 0.1.0's lifecycle keeper marks a pool's InstanceType
    `spec.inactive: true` when an install follows an uninstall (the Helm module's, here): the
    new install's hooks read the nodes before the agents report again, drain the pools that lost
    their flavors, and the keeper marks them, one way (fixed since, CHANGELOG #35, "Fixed"). An
    admin clears it (docs/queues.md); so does this test, each time the old keeper marks it until
    the queues are open, and says so."""
    cleared: list[str] = []

    def open_now() -> bool:
        for pool in (T4_POOL, L4_POOL):
            found = bed.kube.get(WORKER, "InstanceType", pool)
            if found is None:
                return False
            if found.get("spec", {}).get("inactive"):
                bed.kube.merge_patch(WORKER, "InstanceType", pool, {"spec": {"inactive": False}})
                cleared.append(pool)
                return False
        return all(
            condition(bed.kube.get(KUEUE, "ClusterQueue", pool), "Active") == "True"
            for pool in (T4_POOL, L4_POOL)
        )

    try:
        wait_for(open_now, 240, "both pools' ClusterQueues Active")
    finally:
        if cleared:
            print(f"0.1.0's keeper marked pools inactive; cleared: {cleared}")


# -- holders -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kept:
    """What a holder must keep across a roll."""

    container: str
    restarts: int
    record: str


def _pod_name(holder: str) -> str:
    return f"upgrade-{holder}"


def _stored(bed: Testbed, holder: str) -> Obj:
    return bed.kube.get("v1", "Pod", _pod_name(holder), NAMESPACE) or {}


def _record(pod: Obj) -> str:
    return str(pod.get("metadata", {}).get("annotations", {}).get(ALLOCATED_ANNOTATION, ""))


def _kept(bed: Testbed, holder: str) -> Kept:
    pod = _stored(bed, holder)
    (status,) = pod["status"]["containerStatuses"]
    return Kept(str(status.get("containerID")), int(status.get("restartCount", 0)), _record(pod))


def _start(bed: Testbed, holder: str, node: str, limits: dict[str, str]) -> str:
    """The holder's Pod, running, with its record written: its card."""
    name = _pod_name(holder)
    bed.kube.create(_pod(name, node, limits, "env; exec sleep 3600"))
    wait_for(lambda: _phase(bed, name) == "Running", 180, f"{name} to run")

    def shown() -> str | None:
        return _env(kubectl(bed, "logs", "-n", NAMESPACE, name)).get("NVIDIA_VISIBLE_DEVICES")

    card = str(wait_for(shown, 60, f"{name}'s environment"))
    wait_for(lambda: card in _record(_stored(bed, holder)), 60, f"{name}'s record")

    def charged() -> bool:
        return any(
            key[1] == card and row.mode != Mode.NONE for key, row in _rows(bed, node).items()
        )

    # The ledger follows the record a moment later; every snapshot below starts from it.
    wait_for(charged, 60, f"{name}'s card charged in the ledger of {node}")
    return card


# -- the ledger and the kubelet's checkpoint ----------------------------------------------------

Rows = dict[tuple[str, str], AcceleratorAllocation]


def _rows(bed: Testbed, node: str) -> Rows:
    """The node's ledger, card by card: `Devices.status` as the chain reads it."""
    found = bed.kube.get(WORKER, "Devices", node)
    if found is None:
        return {}
    return {(group.id, row.id): row for group, row in Devices.parse(found).status.rows()}


def _checkpoint_disagrees(bed: Testbed, node: str, holders: list[str]) -> list[str]:
    """Where the kubelet's checkpoint on `node` and the agent's device IDs disagree: each
    holder's entries must name the device IDs its record names, each the agent's ID of the
    record's card in the record's mode; every ID the kubelet keeps registered must be one the
    agent advertises (`chain.allocation.card_tokens` over the node's cards)."""
    (spec,) = [s for s in REAL_NODES if s.name == node]
    data = json.loads(RealNode(bed, spec).host_path(CHECKPOINT).read_text())["Data"]
    devices = Devices.parse(bed.kube.get(WORKER, "Devices", node))
    advertised = {
        mode: {
            str(token)
            for group, card in devices.spec.cards()
            for token in card_tokens(group.id, card, mode)
        }
        for mode in MODES
    }
    resources = {plugin_resource(NVIDIA, mode): mode for mode in MODES}
    problems = []
    for resource, registered in (data.get("RegisteredDevices") or {}).items():
        if resource in resources and not set(registered) <= advertised[resources[resource]]:
            unknown = sorted(set(registered) - advertised[resources[resource]])
            problems.append(f"{node}: the kubelet keeps {resource} IDs the agent lacks: {unknown}")
    entries = data.get("PodDeviceEntries") or []
    for holder in holders:
        pod = _stored(bed, holder)
        uid = pod["metadata"]["uid"]
        for container, record in parse_allocated(_record(pod)).items():
            held = {
                device
                for entry in entries
                if entry["PodUID"] == uid and entry["ContainerName"] == container
                for ids in (entry.get("DeviceIDs") or {}).values()
                for device in ids
            }
            if held != set(record.device_ids):
                problems.append(
                    f"{holder}: the checkpoint holds {sorted(held)}, its record "
                    f"{list(record.device_ids)}"
                )
            for claim in record.claims():
                ids = {
                    str(t)
                    for group, card in devices.spec.cards()
                    for t in card_tokens(group.id, card, claim.row.mode)
                    if card.id == claim.row.id
                }
                if not held & ids:
                    problems.append(
                        f"{holder}: none of {sorted(held)} is the agent's ID of card "
                        f"{claim.row.id} in mode {claim.row.mode}"
                    )
    return problems


def _checkpoint_agrees(bed: Testbed, node: str, holders: list[str]) -> None:
    """Wait until the checkpoint agrees (the kubelet writes it once it has taken the new
    plugins' device lists); fail with where it does not."""
    problems: list[str] = []

    def agrees() -> bool:
        problems[:] = _checkpoint_disagrees(bed, node, holders)
        return not problems

    try:
        wait_for(agrees, 60, f"the kubelet's checkpoint on {node} to agree with the new agent")
    except TimeoutError as err:
        raise AssertionError(f"{err}: {problems}") from None


# -- watching a roll ---------------------------------------------------------------------------


@dataclass
class Watch:
    """Samples the cluster every half second while something rolls, and keeps every broken
    invariant it sees: a ledger row that moved, a pool's queue or flavor made again, two Pods'
    records on one card, Workloads promised more than node-b's cards; and each Workload's
    history (admitted, its check's state), for `judged_twice`."""

    bed: Testbed
    namespace: str
    ledgers: dict[str, Rows]
    attachments: dict[str, str]
    problems: list[str] = field(default_factory=list)
    histories: dict[str, list[tuple[bool, str]]] = field(default_factory=dict)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sample()
            except (KubeError, requests.RequestException):
                continue  # a webhook or the API server busy a moment: the next sample reads
            except Exception as broken:  # kept: the test fails with it
                self.problems.append(f"sampling failed: {broken!r}")

    def sample(self) -> None:
        kube = self.bed.kube
        workloads = kube.list(KUEUE, "Workload", self.namespace)
        pods = kube.list("v1", "Pod", NAMESPACE)
        for node, before in self.ledgers.items():
            now = _rows(self.bed, node)
            if now != before:
                moved = {k: (before.get(k), now.get(k)) for k in before.keys() | now.keys()}
                changed = {k: v for k, v in moved.items() if v[0] != v[1]}
                self.problems.append(f"the ledger of {node} moved: {changed}")
            self.problems += records_overlap(node, _on_node(pods, node))
        self.problems += promised_twice(
            WORKLOAD_NODE, NODE_CARDS[WORKLOAD_NODE], _active(workloads)
        )
        attachments = _attachments(kube, self.namespace)
        if attachments != self.attachments:
            keys = attachments.keys() | self.attachments.keys()
            changed = {
                key: (self.attachments.get(key), attachments.get(key))
                for key in sorted(keys)
                if self.attachments.get(key) != attachments.get(key)
            }
            self.problems.append(f"a pool's queue or flavor changed (uid before, now): {changed}")
        for wl in workloads:
            seen = (condition(wl, "Admitted") == "True", check_state(wl))
            history = self.histories.setdefault(wl["metadata"]["name"], [])
            if not history or history[-1] != seen:
                history.append(seen)
        self.samples += 1


def _active(workloads: list[Obj]) -> list[Obj]:
    return [wl for wl in workloads if not wl["metadata"].get("deletionTimestamp")]


def judged_twice(history: list[tuple[bool, str]]) -> str:
    """How a Workload's sampled history shows it judged or admitted again; "" when it does not.
    Once admitted it stays admitted; once its check said Ready it never says anything else."""
    admitted = [seen[0] for seen in history]
    if True in admitted and not all(admitted[admitted.index(True) :]):
        return f"admitted, then not: {history}"
    states = [seen[1] for seen in history]
    if "Ready" in states and set(states[states.index("Ready") :]) != {"Ready"}:
        return f"its check said Ready, then something else: {history}"
    return ""


def _admitted_events(bed: Testbed, namespace: str) -> dict[str, int]:
    """Kueue's `Admitted` Events per Workload name."""
    counted: dict[str, int] = {}
    for event in bed.kube.list("events.k8s.io/v1", "Event", namespace):
        if event.get("reason") != "Admitted":
            continue
        name = str((event.get("regarding") or {}).get("name"))
        times = (event.get("series") or {}).get("count") or event.get("deprecatedCount") or 1
        counted[name] = counted.get(name, 0) + int(times)
    return counted


# -- Workloads ---------------------------------------------------------------------------------


def _submit(bed: Testbed, namespace: str, name: str) -> None:
    """A bare Workload asking one share of node-b's L4 cards. Kueue's webhooks and the chain's
    may be rolling: a refusal for want of an endpoint is tried again."""
    obj = _workload(name, namespace, local_queue_name(L4_POOL), {SHARED: "1"}, WORKLOAD_NODE)

    def created() -> Obj | None:
        try:
            return bed.kube.create(obj)
        except KubeError as refused:
            if refused.status >= 500 or "not known yet" in refused.message:
                return None
            raise

    wait_for(created, 120, f"the Workload {name} to be taken")


def _admitted(bed: Testbed, namespace: str, names: list[str], timeout: float = 240) -> None:
    """Wait until every Workload of `names` is admitted; if one is not, fail with its status and
    both pools' ClusterQueues' conditions, so the cause is in the report."""

    def every() -> bool:
        return all(
            condition(bed.kube.get(KUEUE, "Workload", name, namespace), "Admitted") == "True"
            for name in names
        )

    try:
        wait_for(every, timeout, f"Workloads {names} admitted")
    except TimeoutError as err:
        found = {
            name: (bed.kube.get(KUEUE, "Workload", name, namespace) or {}).get("status")
            for name in names
        }
        queues = {
            pool: (bed.kube.get(KUEUE, "ClusterQueue", pool) or {})
            .get("status", {})
            .get("conditions")
            for pool in (T4_POOL, L4_POOL)
        }
        raise AssertionError(
            f"{err}\nWorkloads: {json.dumps(found, indent=1)}\n"
            f"ClusterQueues: {json.dumps(queues, indent=1)}"
        ) from None


# -- the test ----------------------------------------------------------------------------------


@pytest.fixture
def tenant(real_cluster: Testbed) -> Iterator[str]:
    """The Workloads' namespace (the test makes it once the pools exist), deleted after."""
    name = "upgrade-tenant"
    yield name
    real_cluster.kube.delete("v1", "Namespace", name)


def test_an_upgrade_from_0_1_0_under_running_pods_keeps_every_card_and_judgment(
    real_cluster: Testbed, tenant: str, tmp_path: Path
) -> None:
    bed = real_cluster
    steps: dict[str, float] = {}
    started = time.monotonic()

    def step(name: str) -> None:
        nonlocal started
        steps[name] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    _old_release_installed(bed, tmp_path)
    step("install 0.1.0")
    cards: dict[str, str] = {}
    try:
        _under_load(bed, tenant, cards, step, tmp_path)
    finally:
        for holder in [*[h for h, _, _ in HOLDERS], "a-new", "b-new"]:
            bed.kube.delete("v1", "Pod", _pod_name(holder), NAMESPACE)
    print("steps (s):", steps)


def _upgrade_overlay(bed: Testbed, workdir: Path) -> Path:
    """The current testbed overlay, simulating the same cards as the old one
    (`previous.upgrade_overlay`)."""
    rendered = yaml.safe_load_all(kubectl(bed, "kustomize", str(OVERLAY)))
    (agent,) = [
        d
        for d in rendered
        if d and d["kind"] == "DaemonSet" and d["metadata"]["name"] == NVIDIA_AGENT
    ]
    args = [str(a) for a in agent["spec"]["template"]["spec"]["containers"][0]["args"]]
    return previous.upgrade_overlay(workdir, OVERLAY, args)


def _under_load(
    bed: Testbed,
    tenant: str,
    cards: dict[str, str],
    step: Callable[[str], None],
    workdir: Path,
) -> None:
    # Holders, one at a time (see the module's docstring for why).
    for holder, node, limits in HOLDERS:
        cards[holder] = _start(bed, holder, node, limits)
    assert cards["a-whole"] != cards["a-slice"], cards
    bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}})
    wait_for(
        lambda: bed.kube.get(KUEUE, "LocalQueue", local_queue_name(L4_POOL), tenant),
        120,
        "the L4 pool's LocalQueue in the tenant's namespace",
    )
    first = ["before-0", "before-1"]
    for name in first:
        _submit(bed, tenant, name)
    _admitted(bed, tenant, first)
    step("holders and Workloads on 0.1.0")

    holders = [h for h, _, _ in HOLDERS]
    kept = {holder: _kept(bed, holder) for holder in holders}
    ledgers = {spec.name: _rows(bed, spec.name) for spec in REAL_NODES}
    attachments = _attachments(bed.kube, tenant)
    upgrade = _upgrade_overlay(bed, workdir)
    with Watch(bed, tenant, ledgers, attachments) as watch:
        # 3. The upgrade, as a user runs it.
        kubectl(bed, "apply", "-k", str(upgrade))
        upgraded = ["upgrade-0", "upgrade-1"]
        for name in upgraded:
            _submit(bed, tenant, name)
        for node in _serving(bed, upgrade, PROJECT_IMAGE):
            # Not needed by what follows (the new Pods ask whole cards); reported, not hidden.
            print(f"after the upgrade, the agent on {node} published no counting keys in time")
        _admitted(bed, tenant, upgraded)
        step("upgrade to the current release")
        for holder in holders:
            assert _phase(bed, _pod_name(holder)) == "Running", holder
            assert _kept(bed, holder) == kept[holder], f"{holder} changed across the upgrade"
        for spec in REAL_NODES:
            _checkpoint_agrees(bed, spec.name, [h for h, node, _ in HOLDERS if node == spec.name])

        # 4. Every Deployment of the chain rolled again, at once.
        deployments = [
            d["metadata"]["name"] for d in bed.kube.list("apps/v1", "Deployment", SYSTEM_NAMESPACE)
        ]
        for name in deployments:
            kubectl(bed, "rollout", "restart", f"deployment/{name}", "-n", SYSTEM_NAMESPACE)
        rolled = ["rolled-0", "rolled-1"]
        for name in rolled:
            _submit(bed, tenant, name)
        for name in deployments:
            kubectl(
                bed, "rollout", "status", f"deployment/{name}", "-n", SYSTEM_NAMESPACE,
                "--timeout=280s",
            )  # fmt: skip
        _admitted(bed, tenant, [*first, *upgraded, *rolled])
        step("every Deployment rolled again")
    assert watch.samples, "nothing was sampled"
    assert not watch.problems, "\n".join(watch.problems[:20])
    twice = {
        name: why for name, history in watch.histories.items() if (why := judged_twice(history))
    }
    assert not twice, twice
    # Kueue's own account, which does not depend on sampling (an Event can be lost, never made
    # up): at most one admission each.
    events = _admitted_events(bed, tenant)
    assert events and all(events.get(name, 0) <= 1 for name in [*first, *upgraded, *rolled]), events
    for name in [*first, *upgraded, *rolled]:
        bed.kube.delete(KUEUE, "Workload", name, tenant)
    wait_for(lambda: not bed.kube.list(KUEUE, "Workload", tenant), 120, "the Workloads to go")

    # 5. New Pods get cards no running Pod holds; an old holder that ends frees its card alone.
    held = set(cards.values())
    for holder, node in (("a-new", "node-a"), ("b-new", "node-b")):
        card = _start(bed, holder, node, {GPU: "1"})
        assert card not in held, f"{holder} got {card}, which a running Pod holds: {cards}"
        cards[holder] = card
        held.add(card)
    before = _rows(bed, "node-a")
    bed.kube.delete("v1", "Pod", _pod_name("a-whole"), NAMESPACE)
    (freed,) = [key for key in before if key[1] == cards["a-whole"]]
    wait_for(
        lambda: getattr(_rows(bed, "node-a").get(freed), "mode", None) == Mode.NONE,
        120,
        "the ended holder's card free in the ledger",
    )
    after = _rows(bed, "node-a")
    moved = {key: (before[key], after.get(key)) for key in before if key != freed}
    assert {k: v for k, v in moved.items() if v[0] != v[1]} == {}, "another card moved"
    step("new Pods, one holder ended")
