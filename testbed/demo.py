"""The main job: the chain running on the real control plane over a simulated GPU cluster.

Last, the same chain on real nodes (kubelet, containerd, runc): a tenant's sliced Job goes
through every gate and its container prints the slice it was given.

It builds (first run) and starts the testbed and installs the shipped manifests. The CPU-only
Nodes of `examples/cluster.json` are registered as they are; the GPU Nodes get a real node agent
each (`python -m nodeagent serve`, running under the shipped ServiceAccount) over simulated
NVIDIA and AMD hardware, whose NodeFeature reaches the Node through the real nfd-master. It then
waits until the cluster agrees with what the offline planner computes from the same Nodes, and
shows the pools, the queues and the InstanceTypes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from chain import units
from chain.allocation import DeviceToken
from chain.apis import KUEUE_API as KUEUE
from chain.devices import Devices
from chain.ledger import AcceleratorAllocation, Mode
from chain.ledger_rebuild import ALLOCATED_ANNOTATION
from chain.names import local_queue_name
from chain.queues import NODE_DEVICES_CHECK as CHECK
from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from chain.settings import StartupEnv
from chain.times import timestamp
from hooks.plan import plan, table
from kubeapi import Obj, wait_for
from testbed import build, images
from testbed.cluster import REAL_NODES, install_chain, pool_views, start_nodes
from testbed.components import CONTROL_PLANE_NODE
from testbed.drivers import run_agent
from testbed.harness import COMPONENT_ORDER, Testbed
from testbed.install import REPO, install
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
from testbed.kubectl import kubectl
from testbed.kubelet import AdmissionError, KubeletEmulator, delete_ended
from testbed.nodes import T4_POOL, node_object, register_node
from testbed.workloads import condition, release_quota, sliced_job

SAMPLE = REPO / "examples" / "cluster.json"
DEMO_NAMESPACE = "team-a"
# Namespaces that should not get LocalQueues in the demo (the chain setting for it).
EXCLUDED = ["kube-node-lease", "kube-public", "kueue-system", "node-feature-discovery"]
# GPU nodes of the demo: name -> (simulated hardware profile, base resource, cards). The card
# count is what the kubelet would advertise for the base resource once the device plugin
# registered. One node is AMD's: its pool, queue and views come from the AMD agent alone.
GPU_NODES = {
    "gpu-t4": ("t4x4", "nvidia.com/gpu", 4),
    "gpu-a10g": ("a10gx1", "nvidia.com/gpu", 1),
    "gpu-l4": ("l4x2", "nvidia.com/gpu", 2),
    "gpu-mi300x": ("mi300x-x2", "amd.com/gpu", 2),
}

NFD_CPU = {
    "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
    "feature.node.kubernetes.io/cpu-model.family": "25",
    "feature.node.kubernetes.io/cpu-model.id": "1",
}
LIVE_KINDS = (
    ("v1", "Node"),
    ("gpustack.ai/v1alpha1", "NodeFlavors"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "Topology"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("worker.gpustack.ai/v1alpha1", "InstanceType"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
)


def _signature(objects: list[Obj]) -> dict[str, str]:
    """What must agree between plan and cluster: each flavor's capacity, each type's units."""
    out = {}
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "ResourceFlavor":
            labels = obj["metadata"].get("labels") or {}
            out[f"flavor/{name}"] = next(v for k, v in labels.items() if k.endswith(".capacity"))
        elif obj["kind"] == "InstanceType":
            out[f"type/{name}"] = json.dumps(obj["spec"].get("unitResources"), sort_keys=True)
    return out


def _live(bed: Testbed) -> list[Obj]:
    objects: list[Obj] = []
    for api, kind in LIVE_KINDS:
        for obj in bed.kube.list(api, kind):
            if obj["metadata"]["name"] != CONTROL_PLANE_NODE:
                objects.append({**obj, "apiVersion": api, "kind": kind})
    return objects


def _start_agents(bed: Testbed) -> None:
    for name, (profile, base, cards) in GPU_NODES.items():
        register_node(
            bed.kube,
            node_object(name, cpu="32", labels=NFD_CPU, capacity={base: str(cards)}),
        )
        # Its token names its node (the agent's admission policy confines it to that node).
        run_agent(bed, name, profile, "--period", "1", "--redetect-every", "5")


def _converged(bed: Testbed) -> bool:
    live = _live(bed)
    nodes = [o for o in live if o["kind"] == "Node"]
    accelerated = sum(
        1
        for n in nodes
        if (n["metadata"].get("labels") or {}).get("feature.gpustack.ai/acceleratable") == "true"
    )
    if accelerated < len(GPU_NODES):
        return False
    planned = _signature(plan(nodes, {}, StartupEnv.from_env(os.environ), timestamp(time.time())))
    if not planned or _signature(live) != planned:
        return False
    # Every pool has its queue with quota, and the demo namespace an entrance to each.
    types = {o["metadata"]["name"] for o in live if o["kind"] == "InstanceType"}
    queues = {
        o["metadata"]["name"]
        for o in live
        if o["kind"] == "ClusterQueue" and o["spec"].get("resourceGroups")
    }
    entrances = {
        o["spec"]["clusterQueue"]
        for o in live
        if o["kind"] == "LocalQueue" and o["metadata"]["namespace"] == DEMO_NAMESPACE
    }
    # Every card pool shows its nodes' cards: the views follow the pool-cards keeper's tally,
    # one hop after the Devices.
    shown = all(
        ((o.get("status") or {}).get("accelerator") or {}).get("capacity", "0") != "0"
        for o in live
        if o["kind"] == "InstanceType" and o["spec"].get("acceleratable")
    )
    return types == queues == entrances and shown


def main(root: Path | None = None) -> int:
    took = build.ensure()
    print(
        "build: " + ", ".join(f"{k} {'cached' if v == 0 else f'{v:.0f}s'}" for k, v in took.items())
    )
    run_root = Path(tempfile.mkdtemp(prefix="gpustack-demo-")) if root is None else root
    bed = Testbed(run_root)
    started = time.monotonic()
    bed.up()
    try:
        version = bed.kube.request("GET", "/version")["gitVersion"]
        print(
            f"testbed up in {time.monotonic() - started:.0f}s: kube-apiserver {version}, "
            + ", ".join(f"{n} {s.split(' ')[0]}" for n, s in bed.status().items())
        )
        install(bed)
        bed.kube.apply(
            {
                "apiVersion": "gpustack.ai/v1alpha1",
                "kind": "Settings",
                "metadata": {"name": "default"},
                "spec": {"entrance-excluded-namespaces": EXCLUDED},
            },
            "demo-admin",
        )
        print(
            "chain installed from manifests/ (hooks served by gunicorn on 127.0.0.1); "
            f"setting entrance-excluded-namespaces={EXCLUDED}"
        )

        snapshot = json.loads(SAMPLE.read_text())["items"]
        cpu_nodes = [
            o
            for o in snapshot
            if o["kind"] == "Node"
            and "feature.gpustack.ai/acceleratable" not in o["metadata"]["labels"]
        ]
        for node in cpu_nodes:
            register_node(bed.kube, node)
        for ns in (o for o in snapshot if o["kind"] == "Namespace"):
            bed.kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns["metadata"]["name"]},
                }
            )
        _start_agents(bed)
        print(
            f"registered {len(cpu_nodes)} CPU Nodes from {SAMPLE.relative_to(REPO)} and "
            f"{len(GPU_NODES)} GPU Nodes, each with a node agent on simulated hardware: "
            + ", ".join(f"{n} ({p})" for n, (p, _, _) in GPU_NODES.items())
        )

        wait_for(lambda: _converged(bed), 180, "the cluster to converge to the planner's pools")
        print(
            f"converged in {time.monotonic() - started:.0f}s; the cluster matches the offline "
            "planner run over the same Nodes\n"
        )
        print(table(_live(bed)))
        _admission_scene(bed)
        _slicing_scene(bed)
    finally:
        bed.down()
    print("testbed stopped")
    _real_node_scene()
    print("real-node testbed stopped")
    return 0


def _ledger(bed: Testbed, node: str, held: int) -> None:
    """The node's ledger as its device plugin writes it: the first `held` cards taken whole by
    tenants already running, the others free."""
    devices = bed.kube.get(WORKER, "Devices", node)
    assert devices is not None
    [group] = devices["spec"]["groups"]
    rows: list[Obj] = [
        {"id": c["id"], "index": c["index"], "mode": 1}
        if c["index"] < held
        else {"id": c["id"], "index": c["index"], "mode": 0, "remaining": units.RESOURCE_MAX_UNITS}
        for c in group["accelerators"]
    ]
    status = {
        "groups": [{"id": group["id"], "manufacturer": group["manufacturer"], "accelerators": rows}]
    }
    bed.kube.apply(
        {"apiVersion": WORKER, "kind": "Devices", "metadata": {"name": node}, "status": status},
        "demo-device-plugin",
        subresource="status",
    )


def _check(wl: Obj | None) -> Obj:
    for entry in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == CHECK:
            return dict(entry)
    return {}


def _admission_scene(bed: Testbed) -> None:
    """Per-card admission: the credits say yes, the cards say not yet; then a card frees."""
    kube = bed.kube
    print("\nadmission: tenants already hold 2 of gpu-t4's 4 cards; the verdict driver starts")
    _ledger(bed, "gpu-t4", held=2)
    kubeconfig = bed.service_account_kubeconfig(SYSTEM_NAMESPACE, "gpustack-admission-driver")
    bed.run(
        "admission-driver",
        [
            sys.executable,
            "-m",
            "verdictdriver",
            "--kubeconfig",
            str(kubeconfig),
            "--period",
            "0.5",
            "--health-port",
            "-1",
        ],
    )

    def queue_checks() -> list[str]:
        spec = (kube.get(KUEUE, "ClusterQueue", T4_POOL) or {}).get("spec") or {}
        return [
            c["name"]
            for c in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        ]

    wait_for(lambda: CHECK in queue_checks(), 60, "the T4 queue to name the per-card check")
    container = {
        "name": "trainer",
        "image": "trainer:latest",
        "resources": {"requests": {"nvidia.com/gpu": "3"}, "limits": {"nvidia.com/gpu": "3"}},
    }
    kube.create(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": "train-3-cards", "namespace": DEMO_NAMESPACE},
            "spec": {
                "queueName": local_queue_name(T4_POOL),
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                    }
                ],
            },
        }
    )
    print(
        f"submitted {DEMO_NAMESPACE}/train-3-cards: nvidia.com/gpu 3 = 4,800,000 of the "
        "queue's 6,400,000 credits"
    )

    def when(ok: Callable[[Obj | None], bool]) -> Callable[[], Obj | None]:
        def probe() -> Obj | None:
            wl = kube.get(KUEUE, "Workload", "train-3-cards", DEMO_NAMESPACE)
            # A bare Workload has no job controller: the demo plays its owner and gives the
            # quota back when Kueue evicts it after a Retry.
            if condition(wl, "Evicted") == "True" and condition(wl, "QuotaReserved") == "True":
                release_quota(kube, DEMO_NAMESPACE, "train-3-cards", "demo-job-owner")
            return wl if ok(wl) else None

        return probe

    wl = wait_for(when(lambda w: _check(w).get("state") == "Retry"), 120, "the Retry verdict")
    print(f"  Kueue reserved the credits; the per-card check: Retry: {_check(wl)['message']}")
    _ledger(bed, "gpu-t4", held=1)
    freed = time.monotonic()
    print("a tenant on gpu-t4 finished: 3 cards free; Kueue requeues the Workload after 30 s")
    wl = wait_for(when(lambda w: condition(w, "Admitted") == "True"), 180, "the admission")
    print(f"  per-card check: Ready: {_check(wl)['message']}")
    print(
        f"  {DEMO_NAMESPACE}/train-3-cards Admitted {time.monotonic() - freed:.0f}s after "
        "the card freed"
    )
    bed.stop("admission-driver")


SLICE_NODE = "gpu-l4"
SLICED = "nvidia.com/gpu.sliced"
# Two slices asked of one card: (Pod, units, memory %, SM %). The units split the card's
# 1,600,000 like its memory, as the Pod webhook sizes them.
SLICES = (("slice-a", 400_000, 25, 25), ("slice-b", 800_000, 50, 40))
SHOWN_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_SM_LIMIT")


def _slice_pod(name: str, units_asked: int, memory: int, cores: int) -> Obj:
    limits = {
        SLICED: "1",
        f"{SLICED}.units": str(units_asked),
        f"{SLICED}.memory-percentage": str(memory),
        f"{SLICED}.cores-percentage": str(cores),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": DEMO_NAMESPACE},
        "spec": {
            "nodeName": SLICE_NODE,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "inference:latest",
                    "resources": {"requests": limits, "limits": limits},
                }
            ],
        },
    }


Card = tuple[str, str]
"""(group, card ID): where a card's ledger row sits in the node's `Devices.status`."""


def _rows(bed: Testbed) -> dict[Card, AcceleratorAllocation]:
    found = bed.kube.get(WORKER, "Devices", SLICE_NODE)
    if found is None:
        return {}
    return {(group.id, row.id): row for group, row in Devices.parse(found).status.rows()}


def _shown(row: AcceleratorAllocation | None) -> str:
    if row is None:
        return "no ledger row"
    return f"{row.mode}, remaining {row.remaining:,}, allocatedSlices {row.allocated_slices}"


def _ledger_reaches(
    bed: Testbed, card: Card, mode: Mode, slices: int, what: str
) -> AcceleratorAllocation:
    def probe() -> AcceleratorAllocation | None:
        row = _rows(bed).get(card)
        if row is None or (row.mode, row.allocated_slices) != (mode, slices):
            return None
        return row

    return wait_for(probe, 30, what)


def _slicing_scene(bed: Testbed) -> None:
    """A sliced Pod through the device plugin: the grant, the Pod's record, the ledger moving."""
    kube = bed.kube
    started = time.monotonic()
    agent = f"agent-{SLICE_NODE}"
    # Unix socket paths are limited to 107 bytes: keep the emulator's root short.
    root = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    try:
        argv = bed.state.processes[agent].argv
        bed.stop(agent)
        bed.run(
            agent,
            [*argv, *kubelet.agent_flags(root / "pods", GPU_NODES[SLICE_NODE][0])],
        )
        advertised = kubelet.wait_devices(SLICED, lambda d: len(d) > 0, timeout=90)
        tokens = [DeviceToken.parse(text) for text in advertised]
        cards = sorted({(t.group, t.card) for t in tokens})
        label: dict[Card, str] = {}
        for card in cards:  # the agent writes every card's row, all free, before any grant
            free = _ledger_reaches(bed, card, Mode.NONE, 0, f"the ledger row of {card[1]}")
            label[card] = f"card {free.index}"
        print(
            f"\nslicing: {SLICE_NODE}'s agent restarts, now also serving the kubelet device "
            f"plugins (a kubelet emulator in this process); kubelet sees {SLICED}: "
            f"{len(tokens) // len(cards)} slice tokens on each of its {len(cards)} cards"
        )
        pods: list[Obj] = []
        held: dict[Card, int] = {}
        for name, units_asked, memory, cores in SLICES:
            before = _rows(bed)
            pod = kube.create(_slice_pod(name, units_asked, memory, cores))
            pods.append(pod)
            print(
                f"{DEMO_NAMESPACE}/{name} bound to {SLICE_NODE} asks {SLICED} 1 (.units "
                f"{units_asked:,}, .memory-percentage {memory}, .cores-percentage {cores})"
            )
            try:
                kubelet.admit(pod)
            except AdmissionError as error:
                raise RuntimeError(f"kubelet could not admit {name}: {error}") from None
            [chosen] = kubelet.known[(DEMO_NAMESPACE, name)]["main"][SLICED]
            token = DeviceToken.parse(chosen)
            card = (token.group, token.card)
            envs = dict(kubelet.responses[-1][2].envs)
            limits = [k for k in sorted(envs) if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_")]
            print(
                f"  Allocate granted {label[card]} (token {token}); the container gets "
                + ", ".join(f"{k}={envs[k]}" for k in [*SHOWN_ENV, *limits] if k in envs)
            )

            def recorded(pod_name: str = name) -> str | None:
                stored = kube.get("v1", "Pod", pod_name, DEMO_NAMESPACE) or {}
                annotations = stored["metadata"].get("annotations") or {}
                return annotations.get(ALLOCATED_ANNOTATION) or None

            # Journaled before the answer, written to the Pod right after it (docs/nodeagent.md).
            record = wait_for(recorded, 30, f"{name}'s allocation record")
            print(f"  {ALLOCATED_ANNOTATION}: {record}")
            held[card] = held.get(card, 0) + 1
            after = _ledger_reaches(
                bed, card, Mode.SLICED, held[card], f"the ledger to charge {name}'s slice"
            )
            print(
                f"  Devices {SLICE_NODE} status, {label[card]}: {_shown(before.get(card))}"
                f" -> {_shown(after)}"
            )
        for pod in pods:
            kubelet.forget(pod)
            delete_ended(kube, pod)
        print(f"the Pods ended and kubelet deleted {', '.join(n for n, *_ in SLICES)}:")
        for card in held:
            row = _ledger_reaches(bed, card, Mode.NONE, 0, f"the ledger to free {label[card]}")
            if row.remaining != units.RESOURCE_MAX_UNITS:
                raise RuntimeError(f"{label[card]} freed with {row.remaining:,} units left")
            print(f"  Devices {SLICE_NODE} status, {label[card]}: {_shown(row)} (free again)")
        print(f"slicing scene: {time.monotonic() - started:.0f}s, agent restart included")
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def _real_node_scene() -> None:
    """The same chain on real nodes: a tenant's sliced Job through every gate into a container."""
    started = time.monotonic()
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-demo-nodes-")), real_nodes=True)
    try:
        bed.up(components=COMPONENT_ORDER[:3])
        start_nodes(bed, REAL_NODES)
        nodes_up = time.monotonic() - started
        install_chain(bed, REAL_NODES)
        print(
            f"\nreal nodes: a second testbed with {len(REAL_NODES)} real nodes (kubelet, "
            f"containerd, runc, CNI, kube-proxy; CoreDNS) up in {nodes_up:.0f}s; then the "
            "install as a user runs it "
            f"({time.monotonic() - started - nodes_up:.0f}s): NFD, Kueue and Metacontroller "
            "from their own manifests, and `kubectl apply -k` of the shipped manifests once; "
            f"every chain component runs as a Pod from the project's image "
            f"({images.PROJECT_IMAGE}):"
        )
        for namespace in (SYSTEM_NAMESPACE, AGENT_NAMESPACE):
            pods = bed.kube.list("v1", "Pod", namespace)
            ready = [
                p
                for p in pods
                if all(c.get("ready") for c in p["status"].get("containerStatuses") or [])
            ]
            kinds = sorted(
                {p["metadata"]["labels"].get("app.kubernetes.io/name", "?") for p in ready}
            )
            print(f"  {len(ready)} Pods ready in {namespace}: " + ", ".join(kinds))
        print("  the node agents' device plugins, registered with the real kubelets:")
        for spec in REAL_NODES:
            node = bed.kube.get("v1", "Node", spec.name) or {}
            offered = node.get("status", {}).get("allocatable", {})
            info = node.get("status", {}).get("nodeInfo", {})
            print(
                f"  {spec.name}: kubelet {info.get('kubeletVersion')}, "
                f"{info.get('containerRuntimeVersion')}; allocatable "
                + ", ".join(
                    f"{key} {offered[key]}"
                    for key in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/gpu.sliced")
                    if key in offered
                )
            )
        bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
        queue = local_queue_name(T4_POOL)
        wait_for(
            lambda: bed.kube.get(KUEUE, "LocalQueue", queue, "team-b"), 90, "team-b's LocalQueue"
        )
        views = wait_for(lambda: pool_views(bed, T4_POOL), 90, "the T4 pool's views")
        command = (
            "env | grep -E '^(NVIDIA|CUDA|GPUSTACK_ISOLATION)' | sort; "
            "grep -m1 libvgpu.so /proc/self/maps | sed 's/.* /preloaded: /'; sleep 8"
        )
        bed.kube.create(sliced_job("sliced", "team-b", queue, images.PROJECT_IMAGE, 50, command))
        print(
            f"team-b/sliced: a batch/v1 Job on LocalQueue {queue} asking nvidia.com/gpu.sliced 1 "
            f"with memory-percentage 50; {T4_POOL} views (EX/SH/SL/PT) {views}"
        )

        def running() -> Obj | None:
            pods = bed.kube.list("v1", "Pod", "team-b", label_selector="job-name=sliced")
            live = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return live[0] if live else None

        pod = wait_for(running, 180, "the Job's Pod to run")
        workloads = bed.kube.list(KUEUE, "Workload", "team-b")
        checks = [_check(w) for w in workloads]
        units_folded = pod["spec"]["containers"][0]["resources"]["limits"][SLICED + ".units"]
        print(
            f"  folded by the chain's Job webhook: .sliced.units {units_folded}"
            f"; Kueue admitted it, check {CHECK}: "
            + "; ".join(f"{c.get('state')} ({c.get('message')})" for c in checks)
        )
        name = pod["metadata"]["name"]
        print(f"  the scheduler bound {name} to {pod['spec']['nodeName']}; its container prints:")
        log = wait_for(
            lambda: kubectl(bed, "logs", "-n", "team-b", name).strip() or None,
            30,
            "the container's output",
        )
        for line in log.splitlines():
            print(f"    {line}")
        print(
            "  (the slice's isolation library, staged by the agent's init container, is the "
            "testbed's stand-in: it loads and marks it, and enforces nothing; HAMi-core's "
            "enforcement is proven only on a GPU machine)"
        )
        print(
            f"  {T4_POOL} views while it runs: {wait_for(lambda: _moved(bed, views), 60, 'views')}"
        )
        wait_for(lambda: pool_views(bed, T4_POOL) == views, 120, "the views to free again")
        print(f"  the Job ended; the ledger freed the slice, views back to {views}")
        _instances_scene(bed)
        print(f"real-node scene: {time.monotonic() - started:.0f}s")
    finally:
        bed.down()


def _node_a_modes(bed: Testbed) -> dict[str, str]:
    found = bed.kube.get(WORKER, "Devices", "node-a")
    rows = Devices.parse(found).status.rows() if found else iter(())
    return {row.id: row.mode.name.lower() for _group, row in rows if row.mode != Mode.NONE}


def _instances_scene(bed: Testbed) -> None:
    """Instances on the real nodes: one slice of a T4 and one SSH-enabled T4, both Running with
    their cards; a real SSH login from `main` to its sidecar lands back in `main`."""
    namespace = "lab"
    bed.kube.apply(ssh_namespace(namespace))
    queue = local_queue_name(T4_POOL)
    wait_for(lambda: bed.kube.get(KUEUE, "LocalQueue", queue, namespace), 90, "lab's LocalQueue")
    bed.kube.create(ssh_key_secret("lab-keys", namespace))
    sliced = {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 25, **SMALL}
    wanted = [
        instance(
            "notebook-slice",
            namespace,
            T4_POOL,
            images.PROJECT_IMAGE,
            "sleep 3600",
            resources=sliced,
        ),
        ssh_client_instance(
            "notebook-ssh", namespace, T4_POOL, images.PROJECT_IMAGE, "lab-keys", 1
        ),
    ]
    print(
        "\nInstances: lab/notebook-slice asks 25 % of a T4's memory; lab/notebook-ssh one whole "
        "T4 with SSH (the chain's sshd sidecar, keys from the Secret lab-keys)"
    )
    for obj in wanted:
        create_instance(bed.kube, obj)
    for obj in wanted:
        running_instance(bed.kube, obj["metadata"]["name"], namespace)
    print("  " + kubectl(bed, "get", "instances", "-n", namespace).strip().replace("\n", "\n  "))
    for obj in wanted:
        name = obj["metadata"]["name"]
        status = instance_status(bed.kube, name, namespace)
        print(
            f"  {name}: Pod {status.get('pod')} on {status.get('node')}, cards "
            + ", ".join(status.get("accelerators") or [])
        )
    print(f"  Devices node-a ledger, cards held: {_node_a_modes(bed)}")

    def login() -> dict[str, str] | None:
        log = kubectl(bed, "logs", "-n", namespace, "notebook-ssh", "-c", "main")
        env = logged_env(log)
        return env if "DONE" in env else None

    env = wait_for(login, 90, "the SSH login's output")
    print(
        "  notebook-ssh's main logged in to its sidecar over the Pod's loopback; the session "
        f"ran in main (its file: {env.get('MARKER')!r}) as uid {env.get('SESSION_UID')} with "
        f"main's grant NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES')}; the sidecar "
        "was shown that card through device.gpustack.ai/nvidia.visibility and charged nothing"
    )
    for obj in wanted:
        bed.kube.delete(WORKER, "Instance", obj["metadata"]["name"], namespace)
    wait_for(lambda: not _node_a_modes(bed), 120, "the Instances' cards to be freed")
    print("  both Instances deleted: their Pods went and node-a's ledger holds no card")


def _moved(bed: Testbed, idle: str) -> str | None:
    now = pool_views(bed, T4_POOL)
    return now if now not in (None, idle) else None
