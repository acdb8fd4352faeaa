"""How the InstanceType status hook's cost compares with just decoding its request.

    python -m benchmarks.instancetype_hook [--sizes 1000] [--repeats 30]

For each size: one A100 pool of that many nodes, each with a `Devices` object as the API server
serves it (server metadata, managedFields, 8 cards: 2 MIG-partitioned with 5 profiles and their
placements, 6 logically sliceable) and a ledger of mixed modes (free, exclusive, shared, sliced,
partitioned, cards without a row).

- The hook: the request Metacontroller sends in steady state (the InstanceType, its PoolCards as
  served, the pool's flavors, its ClusterQueue, the settings); interleaved in one run, time
  `json.loads` of the body alone and `json.loads` + the route (its shallow parse, then
  `status.sync`) + `json.dumps(answer)`, and print p50/p95 of both and their ratio. Beside it,
  the size the request had when it related every Devices of the pool instead.
- The pool-cards keeper over the same Devices (its API server a sink): its first pass (every
  node parsed), then p50/p95 of a pass after one node's ledger changed, what each ledger write
  costs it.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
from typing import Any

from benchmarks.timing import measure, percentile, timed
from chain.apis import KUEUE_API as KUEUE
from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    Devices,
    DevicesGroup,
    DevicesSpec,
    DeviceTopology,
    LogicalSliced,
    PartitionProfile,
    PhysicalSliced,
    Placement,
    aggregate_sliced_detail,
)
from chain.ledger import (
    AcceleratorAllocation,
    DevicesAllocationGroup,
    DevicesStatus,
    Mode,
    ProfileCount,
)
from chain.pool_cards import POOL_CARDS, POOL_CARDS_API, pool_cards, pool_cards_object
from chain.pools import PoolIdentity
from chain.units import RESOURCE_MAX_UNITS, SHARE_UNITS
from hooks.instancetype import status
from hooks.request import DecoratorRequest, parse_shallow
from hooks.transport import now, shallow_route
from verdictdriver.pool_cards import PoolCardsKeeper

Obj = dict[str, Any]
WORKER = "worker.gpustack.ai/v1alpha1"
AKEY = "nvidia-a100-sxm4-80gb"
POOL = f"gpustack--{AKEY}-linux-amd64"
FLAVOR = f"gpustack--amd-epyc-7763--{AKEY}-linux-amd64-8d"
# A100 80GB MIG: (profile, memory MiB, instances per card, slots each).
MIG = (("1g.10gb", 9728, 7, 1), ("1g.20gb", 19968, 4, 2), ("2g.20gb", 19968, 3, 2))
MIG += (("3g.40gb", 40192, 2, 4), ("7g.80gb", 80896, 1, 8))


def _profiles() -> tuple[PartitionProfile, ...]:
    return tuple(
        PartitionProfile(
            name,
            memory,
            count,
            compute_slices=length,
            memory_slices=length,
            placements=tuple(Placement(start * length, length) for start in range(count)),
        )
        for name, memory, count, length in MIG
    )


def _card(number: int, node: int) -> Accelerator:
    partitioned = number < 2
    status_ = AcceleratorStatus(
        logical_sliced=LogicalSliced() if partitioned else LogicalSliced(128, True),
        physical_sliced=PhysicalSliced(7, _profiles()) if partitioned else PhysicalSliced(),
    )
    topology = DeviceTopology(
        pci_bus_id=f"0000:{16 + number * 16:02x}:00.0",
        pci_root_id=f"pci0000:{number // 4 * 64:02x}",
        pci_class="0302",
        numa_affinity=str(number // 4),
        cpu_affinity="0-63" if number < 4 else "64-127",
    )
    ident = f"GPU-{node:08x}-{number:04x}-4a1e-9c2d-{random.getrandbits(48):012x}"
    return Accelerator(ident, number, (number,), topology, status_)


def _row(card: Accelerator) -> AcceleratorAllocation | None:
    pick = random.random()
    if card.is_partitioned:
        if pick < 0.3:
            return None
        used = random.randint(0, 3)
        return AcceleratorAllocation(
            card.id,
            card.index,
            Mode.PARTITIONED if used else Mode.NONE,
            remaining=RESOURCE_MAX_UNITS,
            allocated_profiles=(ProfileCount("1g.10gb", used),) if used else (),
            remaining_profiles=tuple(
                ProfileCount(name, max(0, count - used)) for name, _, count, _ in MIG
            ),
        )
    if pick < 0.2:
        return None
    if pick < 0.4:
        return AcceleratorAllocation(card.id, card.index, Mode.NONE, remaining=RESOURCE_MAX_UNITS)
    if pick < 0.55:
        return AcceleratorAllocation(card.id, card.index, Mode.EXCLUSIVE)
    if pick < 0.75:
        left = RESOURCE_MAX_UNITS - SHARE_UNITS * random.randint(1, 9)
        return AcceleratorAllocation(card.id, card.index, Mode.SHARED, remaining=left)
    slices = random.randint(1, 6)
    left = RESOURCE_MAX_UNITS - slices * random.choice((80_000, 160_000, 240_000))
    return AcceleratorAllocation(
        card.id, card.index, Mode.SLICED, remaining=left, allocated_slices=slices
    )


def devices(node: int) -> Obj:
    """One node's Devices object, as served."""
    name = f"ip-10-0-{node // 250}-{node % 250}.eu-west-1.compute.internal"
    cards = tuple(_card(number, node) for number in range(8))
    group = DevicesGroup(
        "a100-sxm4-80gb",
        "nvidia",
        "NVIDIA A100-SXM4-80GB",
        81920,
        cores=6912,
        driver_version="570.124.06",
        runtime_version=random.choice(("12.8", "12.4")),
        compute_capability="8.0",
        family="Ampere",
        accelerators=cards,
        sliced_detail=aggregate_sliced_detail(cards),
    )
    rows = tuple(row for row in map(_row, cards) if row is not None)
    labels = {
        "gpustack.ai/managed": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        f"acceleratable.feature.gpustack.ai/{AKEY}": "true",
        "general.feature.gpustack.ai/amd-epyc-7763": "true",
        "topology.gpustack.ai/profile": "fnv64-87bf574bea2a4f23",
    }
    ledger = DevicesStatus((DevicesAllocationGroup(group.id, "nvidia", rows),))
    obj = Devices(name, DevicesSpec((group,)), ledger, labels).render()
    obj["metadata"].update(
        uid=f"5c1e{node:04x}-8a1f-4d2e-9b3c-{node:012x}",
        resourceVersion=str(700000 + node),
        generation=3,
        creationTimestamp="2026-11-30T05:00:00Z",
        ownerReferences=[
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": f"9d2f{node:04x}-1b2c-4d3e-8f4a-{node:012x}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        managedFields=[
            {
                "manager": "gpustack-device-manager",
                "operation": "Update",
                "apiVersion": WORKER,
                "time": "2026-11-30T05:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}, "f:ownerReferences": {}}, "f:spec": {}},
            },
            {
                "manager": "gpustack-device-manager",
                "operation": "Update",
                "apiVersion": WORKER,
                "time": "2026-11-30T07:12:44Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {".": {}, "f:groups": {}}},
                "subresource": "status",
            },
        ],
    )
    return obj


def served_pool_cards(target: Obj, nodes: list[Obj]) -> Obj:
    """The keeper's PoolCards for `target` over `nodes`, as the API server serves it."""
    identity = PoolIdentity.of_spec(target["spec"], "spec")
    cards = pool_cards(identity, False, nodes)
    assert cards is not None
    obj = pool_cards_object(target, cards)
    obj["metadata"].update(
        uid="7f3a0c2e-5b1d-4e8f-9a6c-2d4b8e1f0a37",
        resourceVersion="2000417",
        generation=214,
        creationTimestamp="2026-11-30T05:00:00Z",
        managedFields=[
            {
                "manager": "gpustack-pool-cards",
                "operation": "Apply",
                "apiVersion": "gpustack.ai/v1alpha1",
                "time": "2026-11-30T07:12:44Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:ownerReferences": {}},
                    "f:spec": {
                        "f:computeCapability": {},
                        "f:nodes": {},
                        "f:runtimeVersions": {},
                        "f:slicedDetail": {},
                        "f:views": {},
                    },
                },
            }
        ],
    )
    return obj


def target_type() -> Obj:
    spec = {
        "generalGroup": "generic",
        "acceleratorGroup": AKEY,
        "acceleratable": True,
        "os": "linux",
        "arch": "amd64",
        "displayName": "NVIDIA-A100-SXM4-80GB",
        "unitResources": {"cpu": "16", "ram": "128Gi"},
        "localStorage": "100Gi",
    }
    return {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": {
            "name": POOL,
            "uid": "1b7c0d4e-2f3a-4b5c-8d6e-7f8091a2b3c4",
            "generation": 1,
            "resourceVersion": "30017",
        },
        "spec": spec,
    }


def request(size: int, nodes: list[Obj]) -> Obj:
    """The steady-state request over a pool of `size` nodes (`nodes`: their Devices)."""
    target = target_type()
    own = f"acceleratable.feature.gpustack.ai/{AKEY}"
    flavor = {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": FLAVOR,
            "labels": {
                own: "true",
                f"{own}.count": "8",
                f"{own}.capacity": str(8 * size),
                "general.feature.gpustack.ai/amd-epyc-7763": "true",
                "feature.gpustack.ai/acceleratable": "true",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "resource.gpustack.ai/type": "nodes",
            },
            "annotations": {
                "note.gpustack.ai/manufacturer": "nvidia",
                "note.gpustack.ai/product": "NVIDIA-A100-SXM4-80GB",
                "note.gpustack.ai/family": "Ampere",
                "note.gpustack.ai/memory": "80Gi",
                "note.gpustack.ai/cores": "6912",
            },
        },
        "spec": {"nodeLabels": {own: "true"}, "tolerations": [{"operator": "Exists"}]},
    }
    quota = {
        "name": "credits.gpustack.ai/nvidia",
        "nominalQuota": str(8 * size * RESOURCE_MAX_UNITS),
    }
    queue = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": POOL, "generation": 2},
        "spec": {
            "stopPolicy": "None",
            "resourceGroups": [
                {
                    "coveredResources": [quota["name"]],
                    "flavors": [{"name": FLAVOR, "resources": [quota]}],
                }
            ],
        },
        "status": {
            "conditions": [
                {"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit"}
            ]
        },
    }
    cards = served_pool_cards(target, nodes)
    return {
        "controller": {"kind": "DecoratorController", "metadata": {"name": "x"}},
        "object": target,
        "attachments": {},
        "related": {
            f"{POOL_CARDS}.{POOL_CARDS_API}": {POOL: cards},
            f"ResourceFlavor.{KUEUE}": {FLAVOR: flavor},
            f"ClusterQueue.{KUEUE}": {POOL: queue},
            "Settings.gpustack.ai/v1alpha1": {},
        },
    }


def build(size: int) -> tuple[list[Obj], Obj]:
    """A pool of `size` nodes (seeded by its size): their Devices, and the hook's request."""
    random.seed(size)
    nodes = [devices(node) for node in range(size)]
    return nodes, request(size, nodes)


class _Sink:
    """The keeper's API server: takes every apply."""

    def __init__(self) -> None:
        self.applied: list[Obj] = []

    def apply(self, obj: Obj, manager: str = "") -> Obj:
        self.applied.append(obj)
        return obj


def keeper_passes(size: int, nodes: list[Obj], repeats: int) -> tuple[float, list[float]]:
    """The keeper's first pass over the pool (every node parsed), then `repeats` passes each
    after one node's ledger changed (a new version of one Devices), timed without the cache
    updates themselves."""
    sink = _Sink()
    keeper = PoolCardsKeeper(sink)  # type: ignore[arg-type]
    keeper.types.replace([target_type()], "1")
    keeper.settings.replace([], "1")
    keeper.written.replace([], "1")
    keeper.devices.replace(nodes, "1")
    keeper.nodes.replace([], "1")  # hostname-only profile: the Nodes are not read
    cold = timed(keeper.keep_once)
    steady: list[float] = []
    current = list(nodes)
    for turn in range(repeats):
        keeper.written.replace(sink.applied[-1:], str(turn + 2))
        number = random.randrange(size)
        changed = copy.deepcopy(current[number])
        changed["metadata"]["resourceVersion"] = str(900000 + turn)
        rows = changed["status"]["groups"][0]["accelerators"]
        if rows:
            rows.pop()
        current[number] = changed
        keeper.devices.replace(current, str(turn + 2))
        steady.append(timed(keeper.keep_once))
    return cold, steady


def served_sync(request: DecoratorRequest) -> Any:
    """`/sync` as the app serves it: the status hook with the shell's clock read per request."""
    return status.sync(request, now())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    print(
        f"{'nodes':>6} {'body':>9} {'if Devices':>10} {'loads p50':>9} {'p95':>7}"
        f" {'sync p50':>9} {'p95':>7} {'ratio p50':>9} {'p95':>5}"
        f" {'keeper cold':>11} {'pass p50':>8} {'p95':>7}  summary"
    )
    for size in args.sizes:
        nodes, body = build(size)
        related_devices = len(json.dumps({obj["metadata"]["name"]: obj for obj in nodes}))
        raw = json.dumps(body).encode()
        summary = served_sync(parse_shallow(json.loads(raw)))["status"]["acceleratorSummary"]
        decoded, synced = measure(raw, shallow_route(served_sync), args.repeats)
        d50, d95 = statistics.median(decoded), percentile(decoded, 0.95)
        s50, s95 = statistics.median(synced), percentile(synced, 0.95)
        cold, steady = keeper_passes(size, nodes, args.repeats)
        k50, k95 = statistics.median(steady), percentile(steady, 0.95)
        print(
            f"{size:>6} {len(raw) / 2**10:>7.1f}Ki {related_devices / 2**20:>8.2f}Mi"
            f" {d50 * 1e3:>7.2f}ms {d95 * 1e3:>5.2f}ms {s50 * 1e3:>7.2f}ms {s95 * 1e3:>5.2f}ms"
            f" {s50 / d50:>9.2f} {s95 / d95:>5.2f} {cold * 1e3:>9.0f}ms"
            f" {k50 * 1e3:>6.0f}ms {k95 * 1e3:>5.0f}ms  {summary}"
        )


if __name__ == "__main__":
    main()
