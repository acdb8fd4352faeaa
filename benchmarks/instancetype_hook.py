"""How the InstanceType status hook's cost compares with just decoding its request.

    python -m benchmarks.instancetype_hook [--sizes 1000] [--repeats 30]

For each size: one A100 pool of that many nodes, each with a `Devices` object as the API server
serves it (server metadata, managedFields, 8 cards: 2 MIG-partitioned with 5 profiles and their
placements, 6 logically sliceable) and a ledger of mixed modes (free, exclusive, shared, sliced,
partitioned, cards without a row). The request is what Metacontroller sends in steady state:
the InstanceType, every Devices of the pool, the pool's flavors, its ClusterQueue, the settings.
Interleaved in one run, time `json.loads` of the body alone and `json.loads` + `status.sync` +
`json.dumps(answer)`, and print p50/p95 of both and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from typing import Any

from benchmarks.timing import measure, percentile
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
from chain.units import SHARE_UNITS, M
from hooks.instancetype import status

Obj = dict[str, Any]
WORKER = "worker.gpustack.ai/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
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
            remaining=M,
            allocated_profiles=(ProfileCount("1g.10gb", used),) if used else (),
            remaining_profiles=tuple(
                ProfileCount(name, max(0, count - used)) for name, _, count, _ in MIG
            ),
        )
    if pick < 0.2:
        return None
    if pick < 0.4:
        return AcceleratorAllocation(card.id, card.index, Mode.NONE, remaining=M)
    if pick < 0.55:
        return AcceleratorAllocation(card.id, card.index, Mode.EXCLUSIVE)
    if pick < 0.75:
        left = M - SHARE_UNITS * random.randint(1, 9)
        return AcceleratorAllocation(card.id, card.index, Mode.SHARED, remaining=left)
    slices = random.randint(1, 6)
    left = M - slices * random.choice((80_000, 160_000, 240_000))
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


def request(size: int) -> Obj:
    random.seed(size)
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
    target = {
        "apiVersion": WORKER,
        "kind": "InstanceType",
        "metadata": {"name": POOL, "uid": "1b7c", "generation": 1, "resourceVersion": "30017"},
        "spec": spec,
    }
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
    quota = {"name": "credits.gpustack.ai/nvidia", "nominalQuota": str(8 * size * M)}
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
    nodes = [devices(node) for node in range(size)]
    return {
        "controller": {"kind": "DecoratorController", "metadata": {"name": "x"}},
        "object": target,
        "attachments": {},
        "related": {
            f"Devices.{WORKER}": {obj["metadata"]["name"]: obj for obj in nodes},
            f"ResourceFlavor.{KUEUE}": {FLAVOR: flavor},
            f"ClusterQueue.{KUEUE}": {POOL: queue},
            "Settings.gpustack.ai/v1alpha1": {},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    print(
        f"{'nodes':>6} {'cards':>6} {'body':>9} {'loads p50':>9} {'p95':>7}"
        f" {'sync p50':>9} {'p95':>7} {'ratio p50':>9} {'p95':>5}  summary"
    )
    for size in args.sizes:
        body = request(size)
        raw = json.dumps(body).encode()
        summary = status.sync(json.loads(raw))["status"]["acceleratorSummary"]
        decoded, synced = measure(raw, status.sync, args.repeats)
        d50, d95 = statistics.median(decoded), percentile(decoded, 0.95)
        s50, s95 = statistics.median(synced), percentile(synced, 0.95)
        print(
            f"{size:>6} {size * 8:>6} {len(raw) / 2**20:>7.2f}Mi {d50 * 1e3:>7.1f}ms"
            f" {d95 * 1e3:>5.1f}ms {s50 * 1e3:>7.1f}ms {s95 * 1e3:>5.1f}ms"
            f" {s50 / d50:>9.2f} {s95 / d95:>5.2f}  {summary}"
        )


if __name__ == "__main__":
    main()
