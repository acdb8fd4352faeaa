"""The worker gateway at fleet size (issue #32): what one pass costs beside decoding what it read,
and how long a member's change takes to reach the manager's `FleetPool`.

    python -m benchmarks.fleet [--members 10] [--nodes 1000] [--repeats 30]
    python -m benchmarks.fleet --lag [--lag-members 2] [--changes 40]
    python -m benchmarks.fleet --bed [--changes 40] [--pause 0.5]

**Aggregation** (the default): each member is a generated cluster of `--nodes` nodes (8 CPU
models, 6 card models, a third of the nodes with 1, 2, 4 or 8 cards; `builders.cluster`), its
own seed per member. Its InstanceTypes are what the chain writes for it: the specs from the
Node decorator and the pools hook run over its nodes, each pool's ClusterQueue from the queue
hook's rules over the pools hook's flavors, and each status as the status hook renders it from
the pool's cards (`chain.views.accelerator_views`: NVIDIA cards logically sliceable, a quarter
of every A100 and H100 node's cards MIG-partitioned with five profiles, each card's ledger a
mix of free, exclusive, shared, sliced and partitioned), all as the API server serves them
(server metadata, finalizers, managedFields). Then, in alternating rounds of one run, time
`json.loads` of every member's InstanceType list as served, and the pass's pure part over the
decoded lists: `members.read_pools` of each member (its InstanceTypes and pool queues),
`sums.fleet_pools`, and every `FleetPool` object rendered. Print p50/p95 of both and their
ratio (goal: at most 2).

**Lag** (`--lag`, starts one emulated control plane, etcd and kube-apiserver only, under
`flock /tmp/gpustack-testbed.lock`): that one API server is the manager and stands in for every
member. The gateway lists InstanceTypes and ClusterQueues cluster-wide (they are cluster-scoped
kinds), so two members cannot be told apart by namespace on one API server; here
`--lag-members` members each have a kubeconfig Secret pointing at the same server and so see
the same pools, and the fleet sums them that many times. The gateway runs as its own process
(`python -m workergateway`, resync an hour, so every pass is a watch's). The benchmark changes
one InstanceType's status (the sliced view's `remaining`), and measures from just before that
write until its own watch of the manager's `FleetPool`s shows the summed value; beside it, its
own watch of the InstanceTypes shows when the change's watch event arrived. Print p50/p99 of
both, and of their difference (goal: the lag within one watch event plus 1 s).

**On the fleet bed** (`--bed`, the bed of `tests/e2e/test_fleet.py`: a manager and two members,
each its own control plane with Kueue, Metacontroller and the chain; the gateway on the
manager): one card of member-a's first node is taken whole and freed again in its ledger
(`Devices.status`, as its agent writes it; no agent runs), `--changes` times. Each change is
timed to the member's T4 InstanceType view (the pool-cards keeper, then the status hook through
Metacontroller) and to the manager's `FleetPool` (the gateway's watch of the member and its
pass). Print p50/p99 of both, and of the fleet's leg between them.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from benchmarks.pools_hook import _labelled
from benchmarks.timing import percentile, timed
from builders.cluster import ACC, node_request, pools_request, random_cluster, served
from builders.cluster import settings_object as settings_of
from chain.accelerators import (
    AcceleratorStatus,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
)
from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.conditions import merge
from chain.fleet_pools import FLEET_POOL, FLEET_POOL_API
from chain.ledger import AcceleratorAllocation, Mode, ProfileCount
from chain.names import local_queue_name
from chain.pool_conditions import PoolState, pool_conditions
from chain.pool_nodes import PoolCard, PoolNode
from chain.pools import PoolIdentity
from chain.queues import NODE_DEVICES_CHECK, pool_flavors, quota_resource
from chain.units import RESOURCE_MAX_UNITS, SHARE_UNITS
from chain.views import View, accelerator_views, cpu_view, shown_views
from hooks.flavor import node, pools
from hooks.queue.queue import STOP_NONE, cluster_queue, queue_labels, resource_groups
from hooks.queue.request import Pool, selector_of
from hooks.request import DecoratorRequest, parse_shallow
from workergateway.gateway import collector_paused
from workergateway.members import MULTIKUEUE_CLUSTER, MemberState, forget_read, read_pools
from workergateway.sums import fleet_pools

Obj = dict[str, Any]
NOW = "2026-12-04T12:00:00Z"
# A100/H100 80GB MIG: (profile, memory MiB, instances per card).
MIG = (
    ("1g.10gb", 9728, 7),
    ("1g.20gb", 19968, 4),
    ("2g.20gb", 19968, 3),
    ("3g.40gb", 40192, 2),
    ("7g.80gb", 80896, 1),
)
MIG_GROUPS = ("nvidia-a100-sxm4-80gb", "nvidia-h100-80gb-hbm3")
PROFILES = tuple(PartitionProfile(name, memory, count) for name, memory, count in MIG)
STATUS_FINALIZER = "metacontroller.io/decoratorcontroller-gpustack-instancetype-status"


# -- one member, as the chain writes it ------------------------------------------------------


def _fields_of(value: object) -> Obj:
    """`fieldsV1` as server-side apply records a map: every key, nested (lists as leaves)."""
    if not isinstance(value, dict):
        return {}
    return {".": {}, **{f"f:{key}": _fields_of(inner) for key, inner in value.items()}}


LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"


def _served(
    obj: Obj, generation: int = 1, finalizers: Sequence[str] = (), copy_kept: bool = True
) -> Obj:
    """`obj` as the API server lists it: server metadata, the spec's and the status's managers,
    and (`copy_kept`) the copy of the hook's answer that Metacontroller v1.5's three-way-merge
    apply keeps in an annotation (the testbed's version; v4's server-side apply keeps none)."""
    meta = dict(obj["metadata"])
    if copy_kept:
        answered = {key: value for key, value in obj.items() if key != "status"}
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            LAST_APPLIED: json.dumps(answered, separators=(",", ":")),
        }
    managed = [
        {
            "manager": "metacontroller",
            "operation": "Apply",
            "apiVersion": obj["apiVersion"],
            "time": NOW,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": _fields_of(meta), "f:spec": _fields_of(obj.get("spec"))},
        }
    ]
    if "status" in obj:
        managed.append(
            {
                "manager": "metacontroller",
                "operation": "Update",
                "apiVersion": obj["apiVersion"],
                "time": NOW,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": _fields_of(obj["status"])},
                "subresource": "status",
            }
        )
    return {
        **obj,
        "metadata": {
            **meta,
            "uid": str(uuid.uuid4()),  # one object's for good, like the API server's
            "resourceVersion": "4000123",
            "generation": generation,
            "creationTimestamp": "2026-11-30T05:00:00Z",
            "finalizers": list(finalizers),
            "managedFields": managed,
        },
    }


def _row(rng: random.Random, card: str, partitioned: bool) -> AcceleratorAllocation | None:
    """A card's ledger row: about a fifth untouched (no row), the rest in every mode."""
    pick = rng.random()
    if partitioned:
        if pick < 0.3:
            return None
        used = rng.randint(0, 3)
        return AcceleratorAllocation(
            card,
            0,
            Mode.PARTITIONED if used else Mode.NONE,
            remaining=RESOURCE_MAX_UNITS,
            allocated_profiles=(ProfileCount("1g.10gb", used),) if used else (),
            remaining_profiles=tuple(
                ProfileCount(name, max(0, count - used)) for name, _, count in MIG
            ),
        )
    if pick < 0.2:
        return None
    if pick < 0.4:
        return AcceleratorAllocation(card, 0, Mode.NONE, remaining=RESOURCE_MAX_UNITS)
    if pick < 0.55:
        return AcceleratorAllocation(card, 0, Mode.EXCLUSIVE)
    if pick < 0.75:
        left = RESOURCE_MAX_UNITS - SHARE_UNITS * rng.randint(1, 9)
        return AcceleratorAllocation(card, 0, Mode.SHARED, remaining=left)
    slices = rng.randint(1, 6)
    left = max(0, RESOURCE_MAX_UNITS - slices * rng.choice((80_000, 160_000, 240_000)))
    return AcceleratorAllocation(card, 0, Mode.SLICED, remaining=left, allocated_slices=slices)


def _pool_node(rng: random.Random, name: str, akey: str, cards: int) -> PoolNode:
    maker = akey.partition("-")[0]
    migs = cards // 4 if akey in MIG_GROUPS else 0
    found = []
    for number in range(cards):
        partitioned = number < migs
        capability = AcceleratorStatus(
            logical_sliced=LogicalSliced(128, True)
            if maker == "nvidia" and not partitioned
            else LogicalSliced(),
            physical_sliced=PhysicalSliced(7, PROFILES) if partitioned else PhysicalSliced(),
        )
        ident = f"{name}-card-{number}"
        found.append(PoolCard(ident, capability, _row(rng, ident, partitioned)))
    return PoolNode(name, maker, "13.0", "8.0", tuple(found))


@dataclass
class Member:
    """One member's lists as its API server serves them."""

    name: str
    instance_types: list[Obj]
    cluster_queues: list[Obj]

    def listing(self, kind: str) -> bytes:
        items = self.instance_types if kind == INSTANCE_TYPE else self.cluster_queues
        api = WORKER_API if kind == INSTANCE_TYPE else KUEUE_API
        body = {
            "apiVersion": api,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": "4000200"},
            "items": items,
        }
        return json.dumps(body).encode()


def _status(
    rng: random.Random, spec: Obj, nodes: list[tuple[str, str, int, int]], flavor: Obj | None
) -> Obj:
    """What the status hook writes for a pool of `nodes` (name, card key, cards, cores)."""
    akey = str(spec.get("acceleratorGroup") or "")
    acceleratable = bool(spec.get("acceleratable"))
    if acceleratable:
        views = accelerator_views(
            _pool_node(rng, name, key, cards) for name, key, cards, _ in nodes if key == akey
        )
        cpu = View()
    else:
        views = accelerator_views(())
        cores = [cores for _, key, _, cores in nodes if not key]
        capacity = Fraction(sum(cores))
        cpu = cpu_view(capacity, Fraction(rng.randint(0, int(capacity) // 2)), cores)
    notes = (flavor or {}).get("metadata", {}).get("annotations", {})
    detail = {
        key.removeprefix("note.gpustack.ai/"): value
        for key, value in notes.items()
        if key.startswith("note.gpustack.ai/") and key.split("/")[1] in DETAIL
    }
    if acceleratable:
        detail.update(computeCapability="8.0", runtimeVersion="13.0", runtimeVersions=["13.0"])
    state = PoolState("Active", "", acceleratable, views, cpu)
    return {
        "detail": detail,
        "entrance": "",
        "phase": "Active",
        "phaseMessage": "",
        **shown_views(views, cpu),
        "conditions": merge(None, pool_conditions(state), 1, NOW),
    }


DETAIL = ("manufacturer", "product", "memory", "cores", "family")


def member(index: int, nodes: int, copy_kept: bool = True) -> Member:
    """Member `index` of `nodes` nodes (its own seed), as its chain writes it; `copy_kept`:
    Metacontroller's last-applied copy on the hooks' attachments (`_served`)."""
    rng = random.Random(1000 + index)
    settings = settings_of(None)
    summaries: list[Obj] = []
    shape: list[tuple[str, str, int, int]] = []
    for obj in random_cluster(nodes, seed=index + 1):
        answer = node.sync(DecoratorRequest.parse(node_request(obj, settings)))
        labelled = _labelled(obj, answer["labels"])
        summaries.extend(served(summary, labelled) for summary in answer["attachments"])
        labels = labelled["metadata"]["labels"]
        key, cards = "", 0
        for label, value in labels.items():
            if label.startswith(ACC) and label.endswith(".count"):
                key, cards = label[len(ACC) : -len(".count")], int(value)
        shape.append((obj["metadata"]["name"], key, cards, int(obj["status"]["capacity"]["cpu"])))
    made = pools.sync(parse_shallow(pools_request(settings, summaries)))["attachments"]
    flavors = [obj for obj in made if obj["kind"] == "ResourceFlavor"]
    types, queues = [], []
    for obj in sorted(
        (obj for obj in made if obj["kind"] == INSTANCE_TYPE),
        key=lambda obj: obj["metadata"]["name"],
    ):
        name = obj["metadata"]["name"]
        identity = PoolIdentity.of_spec(obj["spec"], "spec")
        live = pool_flavors(flavors, selector_of(identity, False), identity.acceleratable)
        maker = identity.accelerator_group.partition("-")[0]
        resource = quota_resource(identity.acceleratable, maker)
        pool = Pool(name, identity, False)
        checks = [NODE_DEVICES_CHECK] if identity.acceleratable else []
        groups = resource_groups(resource, identity.acceleratable, live)
        queue = cluster_queue(pool, queue_labels(pool, False), groups, STOP_NONE, checks)
        queue["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": NOW,
                    "observedGeneration": 1,
                }
            ],
            "admittedWorkloads": rng.randint(0, 40),
            "reservingWorkloads": rng.randint(0, 40),
            "pendingWorkloads": rng.randint(0, 10),
        }
        queues.append(_served(queue, copy_kept=copy_kept))
        status = _status(rng, obj["spec"], shape, live[0].obj if live else None)
        status["entrance"] = local_queue_name(name)
        typed = {**obj, "status": status}
        types.append(_served(typed, finalizers=(STATUS_FINALIZER,), copy_kept=copy_kept))
    return Member(f"member-{index:02d}", types, queues)


def cluster_state(name: str) -> MemberState:
    return MemberState(name, True, "Active", "Connected")


def pure_pass(
    members: Sequence[tuple[str, list[Obj], list[Obj]]], paused: bool = True
) -> list[Obj]:
    """The pass's pure part over decoded lists: read, sum, render every `FleetPool`; with the
    cycle collector paused, as the gateway's pass runs (`paused=False`: as it ran before)."""
    with collector_paused() if paused else contextlib.nullcontext():
        read = [
            (cluster_state(name), read_pools(name, types, queues))
            for name, types, queues in members
        ]
        return [pool.object() for pool in fleet_pools(read).pools.values()]


@dataclass
class Aggregation:
    members: int
    nodes: int
    pools: int
    types_bytes: int
    queues_bytes: int
    decoded: list[float]
    """`json.loads` of every member's InstanceType list: the goal's baseline."""
    decoded_all: list[float]
    """`json.loads` of every list the pass reads (the pool queues' too)."""
    summed: list[float]
    """The pure part of a pass after one change (one InstanceType of one member new)."""
    started: list[float]
    """The pure part with nothing remembered: the first pass after the gateway starts."""
    collecting: list[float]
    """`started` with the cycle collector left on, as the pass ran before it paused it."""

    def ratios(self) -> tuple[float, float]:
        """The pure part over the baseline, p50 and p95."""
        return (
            statistics.median(self.summed) / statistics.median(self.decoded),
            percentile(self.summed, 0.95) / percentile(self.decoded, 0.95),
        )

    def lines(self) -> list[str]:
        def ms(samples: list[float]) -> str:
            return (
                f"{statistics.median(samples) * 1e3:.2f} / {percentile(samples, 0.95) * 1e3:.2f} ms"
            )

        r50, r95 = self.ratios()
        f50 = statistics.median(self.started) / statistics.median(self.decoded)
        f95 = percentile(self.started, 0.95) / percentile(self.decoded, 0.95)
        c50 = statistics.median(self.collecting) / statistics.median(self.decoded)
        c95 = percentile(self.collecting, 0.95) / percentile(self.decoded, 0.95)
        a50 = statistics.median(self.summed) / statistics.median(self.decoded_all)
        a95 = percentile(self.summed, 0.95) / percentile(self.decoded_all, 0.95)
        return [
            f"{self.members} members x {self.nodes} nodes: {self.pools} fleet pools; "
            f"InstanceType lists {self.types_bytes / 2**20:.2f} MiB, "
            f"pool ClusterQueue lists {self.queues_bytes / 2**20:.2f} MiB",
            f"json.loads of the InstanceType lists p50 / p95: {ms(self.decoded)}",
            f"json.loads of both lists p50 / p95: {ms(self.decoded_all)}",
            f"pass after a change, pure part (read, sum, render) p50 / p95: {ms(self.summed)}",
            f"first pass after a start (every object read) p50 / p95: {ms(self.started)}",
            f"ratio to the InstanceType lists p50 / p95: {r50:.2f} / {r95:.2f} (goal <= 2)",
            f"first pass after a start, ratio p50 / p95: {f50:.2f} / {f95:.2f}",
            f"the same with the cycle collector on, ratio p50 / p95: {c50:.2f} / {c95:.2f}",
            f"ratio to both lists p50 / p95: {a50:.2f} / {a95:.2f}",
        ]


def aggregation(members: int, nodes: int, repeats: int, copy_kept: bool = True) -> Aggregation:
    fleet = [member(index, nodes, copy_kept) for index in range(members)]
    type_lists = [m.listing(INSTANCE_TYPE) for m in fleet]
    queue_lists = [m.listing(CLUSTER_QUEUE) for m in fleet]

    def decode() -> None:
        for raw in type_lists:
            json.loads(raw)

    def decode_all() -> None:
        for raw in (*type_lists, *queue_lists):
            json.loads(raw)

    def decoded() -> list[tuple[str, list[Obj], list[Obj]]]:
        return [
            (m.name, json.loads(types)["items"], json.loads(queues)["items"])
            for m, types, queues in zip(fleet, type_lists, queue_lists, strict=True)
        ]

    changes = iter(range(10**9))

    def summed(start: bool = False, paused: bool = True) -> float:
        """The pure part over lists decoded just before, untimed: young objects, as the
        gateway's pass has them right after its reads. A pass the watches wake follows a
        change, so one InstanceType of one member is new (its resourceVersion moved);
        `start`: nothing is remembered, every object is read, as by the first pass."""
        if start:
            forget_read()
        gc.collect()
        lists = decoded()
        number = next(changes)
        changed = lists[number % len(lists)][1]
        changed[number % len(changed)]["metadata"]["resourceVersion"] = f"9{number}"
        start_at = time.perf_counter()
        pure_pass(lists, paused)
        return time.perf_counter() - start_at

    pools_made = len(pure_pass(decoded()))  # warm imports and caches outside the samples
    decodes: list[float] = []
    decodes_all: list[float] = []
    sums: list[float] = []
    starts: list[float] = []
    collecting: list[float] = []
    for index in range(repeats):
        rounds = [
            lambda: decodes.append(timed(decode)),
            lambda: decodes_all.append(timed(decode_all)),
            lambda: sums.append(summed()),
            lambda: starts.append(summed(start=True)),
            lambda: collecting.append(summed(start=True, paused=False)),
        ]
        for step in rounds if index % 2 == 0 else reversed(rounds):
            step()
    return Aggregation(
        members,
        nodes,
        pools_made,
        sum(len(raw) for raw in type_lists),
        sum(len(raw) for raw in queue_lists),
        decodes,
        decodes_all,
        sums,
        starts,
        collecting,
    )


# -- lag on a real API server -----------------------------------------------------------------

FLEET_NAMESPACE = "gpustack-fleet"


def _kubeconfig(server: str, ca: bytes, cert: bytes, key: bytes) -> str:
    """An inline kubeconfig the gateway accepts (no file paths, https)."""
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "member",
                    "cluster": {"server": server, "certificate-authority-data": b64(ca)},
                }
            ],
            "users": [
                {
                    "name": "gateway",
                    "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
                }
            ],
            "contexts": [{"name": "member", "context": {"cluster": "member", "user": "gateway"}}],
            "current-context": "member",
        }
    )


def _remaining(cache: Any, pool: str, part: str, view: str) -> str | None:
    """A view's `remaining` of `pool` in a watch cache, in `part` (a FleetPool's spec, an
    InstanceType's status); None while it is not there."""
    found = ((cache.get(("", pool)) or {}).get(part) or {}).get(view) or {}
    return str(found["remaining"]) if "remaining" in found else None


def _when(test: Callable[[], bool], deadline: float) -> float | None:
    """When `test` first holds, polled every 2 ms; None if not by `deadline`."""
    while time.monotonic() < deadline:
        if test():
            return time.monotonic()
        time.sleep(0.002)
    return None


def _pair(samples: list[float]) -> str:
    """p50 / p99 of `samples`, in seconds."""
    return f"{statistics.median(samples):.3f} / {percentile(samples, 0.99):.3f} s"


@dataclass
class Lag:
    members: int
    lags: list[float]
    events: list[float]
    servers: bool = False
    """Every member on an API server of its own (else all on the manager's)."""

    def lines(self) -> list[str]:
        over = [lag - event for lag, event in zip(self.lags, self.events, strict=True)]

        return [
            f"{len(self.lags)} changes, {self.members} members "
            + (
                "on an API server each, the manager on another"
                if self.servers
                else "on one API server"
            ),
            f"watch event (the change seen by a plain watch) p50 / p99: {_pair(self.events)}",
            f"lag (the change in the manager's FleetPool) p50 / p99: {_pair(self.lags)}",
            f"lag beyond the watch event p50 / p99: {_pair(over)} (goal <= 1 s)",
        ]


@contextlib.contextmanager
def _control_planes(count: int) -> Iterator[list[Any]]:
    """`count` control planes of etcd and kube-apiserver, started side by side."""
    from testbed.harness import Testbed

    beds = [Testbed(Path(tempfile.mkdtemp(prefix="gpustack-fleet-bench-"))) for _ in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=count) as starting:
            list(starting.map(lambda bed: bed.up(components=("etcd", "kube-apiserver")), beds))
        yield beds
    finally:
        for bed in beds:
            bed.down()


def _crds(bed: Any) -> None:
    from kubeapi import load_yaml_documents, wait_for
    from testbed import crds

    repo = Path(__file__).resolve().parents[1]
    wanted = [
        *load_yaml_documents(repo / "manifests/crds/instancetypes.yaml"),
        *load_yaml_documents(repo / "manifests/fleet/crds/fleetpools.yaml"),
    ]
    for crd in crds.kueue_crds(bed):
        if crd["spec"]["names"]["kind"] in (CLUSTER_QUEUE, "LocalQueue", MULTIKUEUE_CLUSTER):
            crd["spec"].pop("conversion", None)  # no Kueue here to convert: v1beta2 only
            wanted.append(crd)
    for crd in wanted:
        bed.kube.apply(crd)
    for crd in wanted:
        name = crd["metadata"]["name"]
        wait_for(lambda name=name: crds.crd_established(bed, name), 60, f"CRD {name}")
    bed.kube.forget_discovery()


def _seed_pools(bed: Any, one: Member) -> None:
    """The member's pools on a member's server."""
    kube = bed.kube
    for obj in one.cluster_queues:
        queue = {k: v for k, v in obj.items() if k != "status"}
        queue["metadata"] = {key: obj["metadata"][key] for key in ("name", "labels", "annotations")}
        kube.apply(queue)
    for obj in one.instance_types:
        meta = {"name": obj["metadata"]["name"]}
        kube.apply(
            {"apiVersion": WORKER_API, "kind": INSTANCE_TYPE, "metadata": meta, "spec": obj["spec"]}
        )
        kube.apply(
            {
                "apiVersion": WORKER_API,
                "kind": INSTANCE_TYPE,
                "metadata": meta,
                "status": obj["status"],
            },
            subresource="status",
        )


def _seed_members(manager: Any, servers: Sequence[Any]) -> None:
    """An Active MultiKueueCluster on the manager for each of `servers` (the same one more than
    once where the members share a server), with its gateway Secret."""
    kube = manager.kube
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLEET_NAMESPACE}})
    for index, server in enumerate(servers):
        c = server.certs
        config = _kubeconfig(
            server.server,
            c.ca_crt.read_bytes(),
            c.admin_crt.read_bytes(),
            c.admin_key.read_bytes(),
        )
        name = f"member-{index:02d}"
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"gpustack-gateway-{name}", "namespace": FLEET_NAMESPACE},
                "data": {"kubeconfig": base64.b64encode(config.encode()).decode()},
            }
        )
        cluster = {
            "apiVersion": KUEUE_API,
            "kind": MULTIKUEUE_CLUSTER,
            "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"location": f"{name}-kubeconfig"}}},
        }
        kube.apply(cluster)
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "Connected",
            "lastTransitionTime": NOW,
        }
        kube.apply({**cluster, "status": {"conditions": [condition]}}, subresource="status")


def lag(members: int, changes: int, nodes: int, pause: float, servers: bool = False) -> Lag:
    """`servers`: every member on an API server of its own and the manager on another (the
    watches and reads then cross servers, as in a fleet); else all on one."""
    from kubeapi import Kube, wait_for
    from kubeapi.watch import Cache, Watcher

    one = member(0, nodes)
    target = next(
        obj
        for obj in one.instance_types
        if obj["spec"].get("acceleratorGroup") == "nvidia-tesla-t4"
    )
    pool = target["metadata"]["name"]
    with _control_planes(members + 1 if servers else 1) as beds:
        bed, member_beds = (beds[0], beds[1:]) if servers else (beds[0], beds * members)
        for each in beds:
            _crds(each)
        for each in beds[1:] if servers else beds:
            _seed_pools(each, one)
        _seed_members(bed, member_beds)
        changed = member_beds[0]
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workergateway",
                "--kubeconfig",
                str(bed.kubeconfig),
                "--resync",
                "3600",
                "--health-port",
                "-1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(bed.logs / "gateway.log").open("wb"),
        )
        fleet = Watcher(Kube.from_kubeconfig(bed.kubeconfig), FLEET_POOL_API, FLEET_POOL).start()
        # The changed member's own server: its watch event and its write.
        types = Watcher(Kube.from_kubeconfig(changed.kubeconfig), WORKER_API, INSTANCE_TYPE)
        types.start()
        writer = Kube.from_kubeconfig(changed.kubeconfig)

        def sliced(cache: Cache, part: str) -> str | None:
            return _remaining(cache, pool, part, "acceleratorSliced")

        def first(wanted: str, cache: Cache, part: str, deadline: float) -> float | None:
            """When `cache` first shows `wanted`."""
            return _when(lambda: sliced(cache, part) == wanted, deadline)

        stamps = ThreadPoolExecutor(max_workers=1)
        try:
            wait_for(lambda: sliced(fleet.cache, "spec"), 120, f"fleetpools/{pool}")
            lags: list[float] = []
            events: list[float] = []
            written = target["status"]["acceleratorSliced"]
            base = int(str(written["remaining"]))
            for number in range(changes):
                value = base + 1 + number % 50  # every change a new value
                if str(value) == sliced(types.cache, "status"):
                    value += 50
                start = time.monotonic()
                status = {
                    **target["status"],
                    "acceleratorSliced": {**written, "remaining": str(value)},
                }
                meta = {"name": pool}
                writer.apply(
                    {
                        "apiVersion": WORKER_API,
                        "kind": INSTANCE_TYPE,
                        "metadata": meta,
                        "status": status,
                    },
                    manager="benchmark",
                    subresource="status",
                )
                # The plain watch's event on a thread of its own, the fleet's answer here: each
                # stamped within 2 ms of its arrival, whichever comes first.
                deadline = start + 60
                event = stamps.submit(first, str(value), types.cache, "status", deadline)
                # One member changed; on one server every member is that member.
                summed = value * members if not servers else value + base * (members - 1)
                lag_at = first(str(summed), fleet.cache, "spec", deadline)
                event_at = event.result()
                if lag_at is None or event_at is None:
                    raise RuntimeError(f"change {number}: the FleetPool never showed it")
                lags.append(lag_at - start)
                events.append(event_at - start)
                time.sleep(pause)
        except BaseException:
            log = (bed.logs / "gateway.log").read_text(errors="replace")
            print("gateway log, last lines:\n" + "\n".join(log.splitlines()[-30:]), file=sys.stderr)
            raise
        finally:
            stamps.shutdown()
            fleet.stop()
            types.stop()
            gateway.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                gateway.wait(timeout=10)
    return Lag(members, lags, events, servers)


@dataclass
class BedLag:
    """On the fleet bed: from a member node's ledger write to its pool's view on the member,
    and to the fleet's view on the manager."""

    member: list[float]
    fleet: list[float]

    def lines(self) -> list[str]:
        legs = [fleet - member for fleet, member in zip(self.fleet, self.member, strict=True)]

        return [
            f"{len(self.fleet)} changes on the fleet bed (three control planes, the chain's "
            "own hooks, keeper, gateway and Kueue)",
            f"ledger write to the member's InstanceType view p50 / p99: {_pair(self.member)}",
            f"ledger write to the manager's FleetPool p50 / p99: {_pair(self.fleet)}",
            f"the fleet's leg (member view to FleetPool) p50 / p99: {_pair(legs)} (goal <= 1 s "
            "beyond the watch event)",
        ]


def bed_lag(changes: int, pause: float) -> BedLag:
    """A card of member-a's first node taken whole and freed again, `changes` times, as its
    agent writes the ledger; each time, when the member's T4 view and the fleet's show it."""
    from kubeapi import Kube
    from kubeapi.watch import Watcher
    from testbed import build
    from testbed.fleet import MEMBERS, FleetBed, wait_sums, write_ledger
    from testbed.nodes import T4_POOL

    build.ensure()
    bed = FleetBed(Path(tempfile.mkdtemp(prefix="gpustack-fleet-bench-")))
    bed.up()
    try:
        kubes = {name: member.kube for name, member in bed.members.items()}
        wait_sums(bed.manager.kube, kubes, T4_POOL, "2/2 member-a,member-b")
        changed, node = bed.members["member-a"], MEMBERS["member-a"][0]
        own = Watcher(Kube.from_kubeconfig(changed.kubeconfig), WORKER_API, INSTANCE_TYPE)
        fleet = Watcher(Kube.from_kubeconfig(bed.manager.kubeconfig), FLEET_POOL_API, FLEET_POOL)
        own.start()
        fleet.start()
        try:

            def whole(cache: Any, part: str) -> str | None:
                return _remaining(cache, T4_POOL, part, "accelerator")

            def moved(cache: Any, part: str, before: str | None, deadline: float) -> float:
                at = _when(lambda: whole(cache, part) not in (None, before), deadline)
                if at is None:
                    raise RuntimeError(
                        f"change {number}: {T4_POOL}'s {part} stayed {before} for 60 s; "
                        f"member-a's view now {whole(own.cache, 'status')}, "
                        f"the FleetPool's {whole(fleet.cache, 'spec')}"
                    )
                return at

            member_lags: list[float] = []
            fleet_lags: list[float] = []
            for number in range(changes):
                before = (whole(own.cache, "status"), whole(fleet.cache, "spec"))
                start = time.monotonic()
                write_ledger(changed.kube, node, held=1 - number % 2)
                member_lags.append(moved(own.cache, "status", before[0], start + 60) - start)
                fleet_lags.append(moved(fleet.cache, "spec", before[1], start + 60) - start)
                time.sleep(pause)
        finally:
            own.stop()
            fleet.stop()
    finally:
        bed.down()
    return BedLag(member_lags, fleet_lags)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--no-copy",
        action="store_true",
        help="no Metacontroller last-applied copy on the attachments (v4's server-side apply)",
    )
    parser.add_argument("--lag", action="store_true", help="the lag, on an emulated API server")
    parser.add_argument("--lag-members", type=int, default=2)
    parser.add_argument(
        "--lag-servers",
        action="store_true",
        help="the lag with every member on an API server of its own, the manager on another",
    )
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument(
        "--pause", type=float, default=0.5, help="seconds between two changes (lag)"
    )
    parser.add_argument(
        "--bed",
        action="store_true",
        help="the lag on the fleet bed, from a member's ledger write (--changes, --pause)",
    )
    args = parser.parse_args(argv)
    if args.bed:
        print("\n".join(bed_lag(args.changes, args.pause).lines()))
        return
    if args.lag:
        result = lag(args.lag_members, args.changes, args.nodes, args.pause, args.lag_servers)
        print("\n".join(result.lines()))
        return
    found = aggregation(args.members, args.nodes, args.repeats, copy_kept=not args.no_copy)
    print("\n".join(found.lines()))


if __name__ == "__main__":
    main()
