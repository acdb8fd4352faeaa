"""Fixture cases of the status hook: one Metacontroller request each and the exact answer.

Numbers are worked out from the rules (docs/design/control-plane.md, "The four views") by hand, per
case description: EX counts free cards (`remaining` ≥ M), SH shares (160,000 units) on free or
Shared cards, SL percents (16,000 units) on free or Sliced logically sliceable cards, PT partition
instances.
"""

from __future__ import annotations

import copy
from typing import Any

from builders.instancetypes import type_spec
from chain.ledger import Mode
from tests.unit.hooks.clock import EARLIER, NOW
from tests.unit.hooks.instancetype.world import (
    POOL_CARDS_GROUP,
    RESOURCE_MAX_UNITS,
    N,
    Obj,
    card,
    cpu_status,
    customize_request,
    devices,
    flavor,
    group,
    instance_type,
    queue,
    request,
    row,
    settings,
    status,
)

Case = dict[str, Any]

A10G = "gpustack--nvidia-a10g-linux-amd64"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A100 = "gpustack--nvidia-a100-sxm4-80gb-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
EPYC = "gpustack--amd-epyc-7763-linux-amd64"
EPYC_T4 = "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64"
HASH = {
    A10G: "c4680bb149644f1c",
    T4: "6b371caa2da0b799",
    A100: "6355d18d895b5e10",
    GENERIC: "3b93966fd73eb9ec",
    EPYC: "f185b7b11c7b3eb3",
    EPYC_T4: "007a192c49d4a8cf",
}
CREDITS = "credits.gpustack.ai/nvidia"
STOPPED = "Can't admit new workloads: is stopped."

# --- the pools ------------------------------------------------------------------------------

A10G_TYPE = instance_type(A10G, type_spec("nvidia-a10g", display="NVIDIA-A10G"))
T4_TYPE = instance_type(T4, type_spec("nvidia-tesla-t4", display="Tesla-T4"))
A100_TYPE = instance_type(A100, type_spec("nvidia-a100-sxm4-80gb", display="A100"))
GENERIC_TYPE = instance_type(GENERIC, type_spec(display="CPU-only"))

A10G_NOTES = {
    "manufacturer": "nvidia",
    "product": "NVIDIA-A10G",
    "family": "Ampere",
    "memory": "23028Mi",
    "cores": "9216",
}
T4_NOTES = {
    "manufacturer": "nvidia",
    "product": "Tesla-T4",
    "family": "Turing",
    "memory": "15Gi",
    "cores": "2560",
}
A100_NOTES = {
    "manufacturer": "nvidia",
    "product": "NVIDIA-A100-SXM4-80GB",
    "family": "Ampere",
    "memory": "80Gi",
    "cores": "6912",
}
A10G_1D = flavor(
    "gpustack--amd-epyc-7763--nvidia-a10g-linux-amd64-1d",
    "amd-epyc-7763",
    1,
    1,
    "nvidia-a10g",
    A10G_NOTES,
)
T4_2D = flavor(
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d",
    "amd-epyc-7763",
    2,
    2,
    "nvidia-tesla-t4",
    T4_NOTES,
)
T4_3D = flavor(
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-3d",
    "amd-epyc-7763",
    3,
    3,
    "nvidia-tesla-t4",
    T4_NOTES,
)
T4_4D = flavor(
    "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-4d",
    "amd-epyc-7763",
    4,
    4,
    "nvidia-tesla-t4",
    T4_NOTES,
)
A100_4D = flavor(
    "gpustack--amd-epyc-7763--nvidia-a100-sxm4-80gb-linux-amd64-4d",
    "amd-epyc-7763",
    4,
    4,
    "nvidia-a100-sxm4-80gb",
    A100_NOTES,
)
A100_1D = flavor(
    "gpustack--amd-epyc-7763--nvidia-a100-sxm4-80gb-linux-amd64-1d",
    "amd-epyc-7763",
    1,
    1,
    "nvidia-a100-sxm4-80gb",
    A100_NOTES,
)
CPU_4C = flavor("gpustack--amd-25-1-linux-amd64-4c", "amd-25-1", 4, 8)
CPU_16C = flavor("gpustack--amd-25-1-linux-amd64-16c", "amd-25-1", 16, 16)
CPU_48C = flavor(
    "gpustack--intel-xeon-platinum-8358-linux-amd64-48c", "intel-xeon-platinum-8358", 48, 48
)
A10G_QUEUE = queue(A10G, CREDITS, [(A10G_1D["metadata"]["name"], "1600000")])
T4_QUOTAS = [(T4_2D["metadata"]["name"], "3200000"), (T4_3D["metadata"]["name"], "4800000")]
T4_QUEUE = queue(T4, CREDITS, T4_QUOTAS)
A100_QUOTAS = [(A100_1D["metadata"]["name"], "1600000"), (A100_4D["metadata"]["name"], "6400000")]


def _sliced(count: int) -> Obj:
    return {"logical": {"count": count, "coresPercentageOvercommit": True}, **_NO_PHYSICAL}


_NO_PHYSICAL: Obj = {"physical": {"count": 0, "profiles": []}}
NO_SLICES: Obj = {"count": 0, "coresPercentageOvercommit": False}


def _card_detail(notes: dict[str, str], capability: str, sliced: Obj, runtimes: list[str]) -> Obj:
    return {
        **notes,
        "computeCapability": capability,
        "slicedDetail": sliced,
        "rdmaNodes": 0,
        "runtimeVersion": runtimes[0],
        "runtimeVersions": runtimes,
    }


A10G_DETAIL = _card_detail(A10G_NOTES, "8.6", _sliced(128), ["12.8"])


def _sync(description: str, body: Obj, expected: Obj) -> Case:
    return {"description": description, "path": "/sync", "request": body, "response": expected}


def _error(description: str, path: str, body: Any, field: str | None) -> Case:
    key = "rawRequest" if isinstance(body, str) else "request"
    case = {"description": description, "path": path, key: body, "status": 400}
    if field is not None:
        case["errorField"] = field
    return case


def _related(group_key: str, name: str) -> str:
    return f"$.related['{group_key}']['{name}']"


# --- the vectors ------------------------------------------------------------------------------


def a10g_node(*rows: Any, name: str = "a10g-1", managed: str | None = "true") -> Obj:
    cards = [card(name, 0)]
    built = [make(cards[0]) for make in rows]
    return devices(name, [group("nvidia-a10g", cards)], built, managed=managed)


ONE_FREE_A10G = status(
    HASH[A10G],
    "1/1 1/10 100/100 0/0",
    detail=A10G_DETAIL,
    ex=("1", "1", "1"),
    sh=("1", "10", "10"),
    sl=("100", "100", "100"),
)


def _vectors() -> dict[str, Case]:
    sliced = a10g_node(lambda c: row(c, Mode.SLICED, remaining=1_280_000, slices=1))
    return {
        "vector-one-free-a10g": _sync(
            "vectors: one free A10G (no ledger row yet: untouched) reads 1/1 1/10 100/100 0/0; "
            "SH's onceMaxRequest counts the node's cards with a free share (1), not shares (10)",
            request(A10G_TYPE, [a10g_node()], [A10G_1D], [A10G_QUEUE]),
            ONE_FREE_A10G,
        ),
        "vector-a10g-after-20-percent-slice": _sync(
            "vectors: after a 20 % slice the card is neither free nor shared: 0/0 0/0 80/80 0/0",
            request(A10G_TYPE, [sliced], [A10G_1D], [A10G_QUEUE]),
            status(
                HASH[A10G],
                "0/0 0/0 80/80 0/0",
                detail=A10G_DETAIL,
                ex=("0", "0", "1"),
                sh=("0", "0", "10"),
                sl=("80", "80", "100"),
            ),
        ),
        "vector-cpu-pool-16-4-4-48": _sync(
            "vectors: CPU pool of 16+4+4+48 cores reads 48/72; the collapsed CPU pool mixes CPU "
            "models, so its detail is empty",
            request(
                GENERIC_TYPE,
                flavors=[CPU_48C, CPU_16C, CPU_4C],
                queues=[_cpu_queue(("4c", "8"), ("16c", "16"), ("48c", "48"))],
            ),
            cpu_status(HASH[GENERIC], "48/72", cpu=("48", "72", "72")),
        ),
        "vector-cpu-pool-4-core-node-removed": _sync(
            "vectors: removing a 4-core node (the 4c flavor's quota 8 -> 4) reads 48/68",
            request(
                GENERIC_TYPE,
                flavors=[CPU_48C, CPU_16C, CPU_4C],
                queues=[_cpu_queue(("4c", "4"), ("16c", "16"), ("48c", "48"))],
            ),
            cpu_status(HASH[GENERIC], "48/68", cpu=("48", "68", "68")),
        ),
    }


_CPU_FLAVORS = {
    "4c": CPU_4C["metadata"]["name"],
    "16c": CPU_16C["metadata"]["name"],
    "48c": CPU_48C["metadata"]["name"],
}


def _cpu_queue(*quotas: tuple[str, str], reserved: tuple[tuple[str, str], ...] = ()) -> Obj:
    return queue(
        GENERIC,
        "cpu",
        [(_CPU_FLAVORS[size], amount) for size, amount in quotas],
        reserved=[(_CPU_FLAVORS[size], total) for size, total in reserved],
    )


# --- card modes and nodes ---------------------------------------------------------------------


def t4_node(name: str, runtime: str, *rows: Any, gkey: str = "amd-epyc-7763") -> Obj:
    """A T4 node with one card per entry of `rows` (None = the card has no ledger row)."""
    cards = [card(name, number) for number in range(len(rows))]
    built = [make(cards[i]) for i, make in enumerate(rows) if make is not None]
    return devices(name, [group("nvidia-tesla-t4", cards, runtime)], built, gkey=gkey)


def _modes() -> dict[str, Case]:
    modes = t4_node(
        "t4-1",
        "12.4",
        None,
        lambda c: row(c, Mode.EXCLUSIVE),
        lambda c: row(c, Mode.SHARED, remaining=1_120_000),
        lambda c: row(c, Mode.SLICED, remaining=560_000, slices=3),
        lambda c: row(c, Mode.NONE, remaining=RESOURCE_MAX_UNITS),
    )
    nodes = [
        t4_node("t4-1", "12.4", None, lambda c: row(c, Mode.SHARED, remaining=480_000)),
        t4_node("t4-2", "12.8", None, None, lambda c: row(c, Mode.EXCLUSIVE)),
        t4_node(
            "t4-3",
            "12.4",
            lambda c: row(c, Mode.SHARED, remaining=160_000),
            lambda c: row(c, Mode.SHARED, remaining=1_440_000),
            lambda c: row(c, Mode.SHARED, remaining=320_000),
            lambda c: row(c, Mode.SLICED, remaining=1_584_000, slices=1),
        ),
    ]
    return {
        "card-in-every-mode": _sync(
            "one node, 5 T4 cards: untouched (free), Exclusive without `remaining` (read as 0), "
            "Shared with 7 shares left, Sliced with 35 % left, a free row. EX 2 free; SH 10+10+7 "
            "shares on 3 cards; SL 100+100+35 %, the freest card 100",
            request(T4_TYPE, [modes], [T4_2D, T4_3D], [T4_QUEUE]),
            status(
                HASH[T4],
                "2/2 3/27 100/235 0/0",
                detail=_card_detail(T4_NOTES, "7.5", _sliced(640), ["12.4"]),
                ex=("2", "2", "5"),
                sh=("3", "27", "50"),
                sl=("100", "235", "500"),
            ),
        ),
        "once-max-request-per-node": _sync(
            "three nodes: EX once = the node with most free cards (t4-2: 2); SH once = the node "
            "with most cards holding a free share (t4-3: 3 shared cards, 12 shares; an older "
            "upstream summed shares and would say 20); SL once = the freest card (100)",
            request(T4_TYPE, nodes, [T4_2D, T4_3D, T4_4D], [T4_QUEUE]),
            status(
                HASH[T4],
                "2/3 3/45 100/399 0/0",
                detail=_card_detail(T4_NOTES, "7.5", _sliced(1152), ["12.4", "12.8"]),
                ex=("2", "3", "9"),
                sh=("3", "45", "90"),
                sl=("100", "399", "900"),
            ),
        ),
    }


# --- partitions -------------------------------------------------------------------------------

ALL_PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")


def _a100(name: str, kinds: list[str], *rows: Any) -> Obj:
    cards = [card(name, number, kind) for number, kind in enumerate(kinds)]
    built = [make(cards[i]) for i, make in enumerate(rows) if make is not None]
    return devices(name, [group("nvidia-a100-sxm4-80gb", cards)], built)


def _mig_detail(cards: int) -> Obj:
    profiles = [
        {"name": "1g.10gb", "count": 7 * cards, "memoryMib": 9728},
        {"name": "2g.20gb", "count": 3 * cards, "memoryMib": 19968},
        {"name": "3g.40gb", "count": 2 * cards, "memoryMib": 40192},
        {"name": "7g.80gb", "count": cards, "memoryMib": 80896},
    ]
    sliced = {
        "logical": {"count": 0, "coresPercentageOvercommit": False},
        "physical": {"count": 7 * cards, "profiles": profiles},
    }
    return _card_detail(A100_NOTES, "8.0", sliced, ["12.8"])


def _partitions() -> dict[str, Case]:
    a100_1 = _a100(
        "a100-1",
        ["mig", "mig", "mig", "whole"],
        lambda c: row(
            c,
            Mode.PARTITIONED,
            remaining=RESOURCE_MAX_UNITS,
            allocated=[("1g.10gb", 2), ("2g.20gb", 1)],
            left=[("1g.10gb", 3), ("2g.20gb", 1), ("3g.40gb", 0), ("7g.80gb", 0)],
        ),
        None,
        lambda c: row(c, Mode.NONE, remaining=RESOURCE_MAX_UNITS),
    )
    full = [("1g.10gb", 0), ("2g.20gb", 0), ("3g.40gb", 0), ("7g.80gb", 0)]
    a100_2 = _a100(
        "a100-2",
        ["mig"],
        lambda c: row(
            c, Mode.PARTITIONED, remaining=RESOURCE_MAX_UNITS, allocated=[("7g.80gb", 1)], left=full
        ),
    )
    return {
        "partitioned-cards": _sync(
            "A100s: partitioned cards feed PT only. a100-1: a ready ledger row (largest free "
            "profile count 3), a card without a row and one with an empty row (both read at "
            "their catalog ceiling 7, never as full), a whole card (EX and SH, not SL). a100-2: "
            "a full card (0). PT 1/17 of 28; every offered profile listed, 0 included",
            request(A100_TYPE, [a100_2, a100_1], [A100_4D, A100_1D], []),
            status(
                HASH[A100],
                "1/1 1/10 0/0 1/17",
                detail=_mig_detail(4),
                phase=("Pending", f"waiting for the ClusterQueue {A100} to be created"),
                ex=("1", "1", "1"),
                sh=("1", "10", "10"),
                pt=("1", "17", "28"),
                allocated=[("1g.10gb", 2), ("2g.20gb", 1), ("7g.80gb", 1)],
                offered=[("1g.10gb", 17), ("2g.20gb", 7), ("3g.40gb", 4), ("7g.80gb", 2)],
                reasons=("QueuePending", "Inactive", "QueuePending"),
            ),
        ),
        "partitioned-pool-full": _sync(
            "a partition-only pool whose one card is full: 0/0 0/0 0/0 0/0, and every profile "
            "still listed at 0 (offered but full, not unoffered)",
            request(A100_TYPE, [a100_2], [A100_1D], [queue(A100, CREDITS, A100_QUOTAS[:1])]),
            status(
                HASH[A100],
                "0/0 0/0 0/0 0/0",
                detail=_mig_detail(1),
                pt=("0", "0", "7"),
                allocated=[("7g.80gb", 1)],
                offered=full,
                reasons=("QueueActive", "Full", "Ready"),
            ),
        ),
    }


# --- queue states and phase -------------------------------------------------------------------

RACK_DOMAINS = [
    {"name": "rack-1", "freeWholeCards": [8, 8, 6], "idleNodes": 2},
    {"name": "rack-2", "freeWholeCards": [8, 8, 8, 8], "idleNodes": 4},
]


def _with_domains(body: Obj) -> Obj:
    """`body` with its PoolCards tallied per rack, as the keeper writes it under a rack
    profile (docs/topology.md, "Views")."""
    for pool_cards in body["related"]["PoolCards.gpustack.ai/v1alpha1"].values():
        pool_cards["spec"]["domains"] = copy.deepcopy(RACK_DOMAINS)
    return body


def _domains_shown(expected: Obj) -> Obj:
    expected["status"]["topologyDomains"] = copy.deepcopy(RACK_DOMAINS)
    expected["status"]["gangSummary"] = "rack-1:2/3,rack-2:4/4"
    return expected


def _phases() -> dict[str, Case]:
    node = t4_node("t4-1", "12.4", None, lambda c: row(c, Mode.SHARED, remaining=480_000))
    detail = _card_detail(T4_NOTES, "7.5", _sliced(256), ["12.4"])
    views = {"ex": ("1", "1", "2"), "sh": ("2", "13", "20"), "sl": ("100", "100", "200")}
    summary = "1/1 2/13 100/100 0/0"
    held = queue(T4, CREDITS, T4_QUOTAS, stop="Hold", active=False, message=STOPPED)
    draining = queue(T4, CREDITS, T4_QUOTAS, stop="HoldAndDrain", active=False, message=STOPPED)
    unreported = queue(T4, CREDITS, T4_QUOTAS, active=None)
    deleting = instance_type(T4, type_spec("nvidia-tesla-t4", display="Tesla-T4"), deleting=True)
    was = [
        ("Active", "True", "QueueActive"),
        ("Available", "False", "Full"),
        ("Ready", "True", "Ready"),
    ]
    held_conditions = instance_type(
        T4,
        type_spec("nvidia-tesla-t4", display="Tesla-T4"),
        status={
            "phase": "Active",
            "conditions": [
                {"type": t, "status": v, "lastTransitionTime": EARLIER, "reason": r, "message": ""}
                for t, v, r in was
            ],
        },
    )
    drained_status = status(
        HASH[T4],
        "0/0 0/0 0/0 0/0",
        detail=detail,
        phase=("Inactive", STOPPED),
        reasons=("Draining", "Inactive", "Draining"),
    )
    held_status = status(
        HASH[T4],
        summary,
        detail=detail,
        phase=("Inactive", STOPPED),
        **views,
        reasons=("Stopped", "Inactive", "Stopped"),
    )
    return {
        "hold-and-drain-zeroes-every-view": _sync(
            "the queue is HoldAndDrain: it admits nothing and evicts what it has, so every view "
            "reads zero (capacity too); the detail stays",
            request(T4_TYPE, [node], [T4_2D], [draining]),
            copy.deepcopy(drained_status),
        ),
        "rack-domains-shown": _sync(
            "the keeper tallied the pool per rack (a rack profile): the status lists each rack's"
            " free whole cards per node and the Gangs column its wholly free nodes",
            _with_domains(request(T4_TYPE, [node], [T4_2D], [held])),
            _domains_shown(copy.deepcopy(held_status)),
        ),
        "rack-domains-hidden-while-draining": _sync(
            "a draining queue admits nothing: no domains shown, as every view reads zero",
            _with_domains(request(T4_TYPE, [node], [T4_2D], [draining])),
            copy.deepcopy(drained_status),
        ),
        "hold-keeps-the-views": _sync(
            "plain Hold (the inactive switch): Kueue says Inactive, the views still show the pool",
            request(T4_TYPE, [node], [T4_2D], [held]),
            copy.deepcopy(held_status),
        ),
        "no-queue-yet": _sync(
            "no ClusterQueue yet (the queue hook has not made it): Pending",
            request(T4_TYPE, [node], [T4_2D]),
            status(
                HASH[T4],
                summary,
                detail=detail,
                phase=("Pending", f"waiting for the ClusterQueue {T4} to be created"),
                **views,
                reasons=("QueuePending", "Inactive", "QueuePending"),
            ),
        ),
        "queue-not-reported-yet": _sync(
            "the queue exists but Kueue has not written its Active condition: Pending",
            request(T4_TYPE, [node], [T4_2D], [unreported]),
            status(
                HASH[T4],
                summary,
                detail=detail,
                phase=("Pending", f"waiting for Kueue to report on the ClusterQueue {T4}"),
                **views,
                reasons=("QueuePending", "Inactive", "QueuePending"),
            ),
        ),
        "conditions-keep-their-time": _sync(
            "the conditions the InstanceType already holds with the same status keep their "
            "transition time; one that flips (Available, the pool was full) takes the clock's",
            request(held_conditions, [node], [T4_2D], [T4_QUEUE]),
            status(HASH[T4], summary, detail=detail, since=(EARLIER, NOW, EARLIER), **views),
        ),
        "no-nodes-held": _sync(
            "no node of the pool reported: no flavor, the queue hook holds the queue (Kueue: "
            "stopped), and the conditions say what the pool lacks rather than Kueue's Stopped",
            request(T4_TYPE, [], [], [held]),
            status(
                HASH[T4],
                "0/0 0/0 0/0 0/0",
                # No card reported: no descriptor, no slice (no card to overcommit).
                detail={"slicedDetail": {"logical": NO_SLICES, **_NO_PHYSICAL}, "rdmaNodes": 0},
                phase=("Inactive", STOPPED),
                reasons=("NoCapacity", "NoCapacity", "NoCapacity"),
            ),
        ),
        "terminating": _sync(
            "the InstanceType is being deleted: Inactive, as upstream's teardown says",
            request(deleting, [node], [T4_2D], [T4_QUEUE]),
            status(
                HASH[T4],
                summary,
                detail=detail,
                phase=("Inactive", "instance type is terminating"),
                **views,
                reasons=("Terminating", "Inactive", "Terminating"),
            ),
        ),
    }


# --- CPU --------------------------------------------------------------------------------------

CPU_DETAIL_NOTE = (
    '{"cache":{"l2":"512 KiB","l3":"256 MiB"},"logicalCores":"128","physicalCores":"64",'
    '"threadsPerPhysicalCore":"2"}'
)
EPYC_NOTES = {
    "manufacturer": "amd",
    "product": "AMD EPYC 7763 64-Core Processor",
    "family": "25",
    "cpuDetail": CPU_DETAIL_NOTE,
}
CPU_DETAIL = {
    "cache": {"l2": "512 KiB", "l3": "256 MiB"},
    "logicalCores": "128",
    "physicalCores": "64",
    "threadsPerPhysicalCore": "2",
}


def _cpu() -> dict[str, Case]:
    epyc_128c = flavor("gpustack--amd-epyc-7763-linux-amd64-128c", "amd-epyc-7763", 128, 256)
    epyc_128c["metadata"]["annotations"].update({N + k: v for k, v in EPYC_NOTES.items()})
    aware = settings(instance_type_aware_cpu_manufacturer=True)
    epyc_type = instance_type(EPYC, type_spec(general="amd-epyc-7763", display="AMD EPYC"))
    epyc_queue = queue(EPYC, "cpu", [(epyc_128c["metadata"]["name"], "256")])
    return {
        "cpu-reservations": _sync(
            "CPU view: 72 cores of quota, 3.5 + 16 + 24 reserved: 28.5 left, and the largest "
            "node (48) is capped at what is left",
            request(
                GENERIC_TYPE,
                flavors=[CPU_4C, CPU_16C, CPU_48C],
                queues=[
                    _cpu_queue(
                        ("4c", "8"),
                        ("16c", "16"),
                        ("48c", "48"),
                        reserved=(("4c", "3500m"), ("16c", "16"), ("48c", "24")),
                    )
                ],
            ),
            cpu_status(
                HASH[GENERIC],
                "28500m/28500m",
                cpu=("28500m", "28500m", "72"),
            ),
        ),
        "cpu-over-reserved": _sync(
            "a node left while its workloads still hold quota: more reserved than the quota, "
            "so nothing is left (never negative)",
            request(
                GENERIC_TYPE,
                flavors=[CPU_16C, CPU_48C],
                queues=[
                    _cpu_queue(
                        ("16c", "16"), ("48c", "48"), reserved=(("16c", "16"), ("48c", "50"))
                    )
                ],
            ),
            cpu_status(
                HASH[GENERIC],
                "0/0",
                cpu=("0", "0", "64"),
                reasons=("QueueActive", "Full", "Ready"),
            ),
        ),
        "cpu-aware-pool-detail": _sync(
            "CPU awareness: the pool is one CPU model, described by its flavor's notes with "
            "cpuDetail inlined; the other CPU's flavor is not the pool's",
            request(epyc_type, [], [CPU_16C, epyc_128c], [epyc_queue], aware),
            cpu_status(
                HASH[EPYC],
                "128/256",
                detail={**{k: v for k, v in EPYC_NOTES.items() if k != "cpuDetail"}, **CPU_DETAIL},
                cpu=("128", "256", "256"),
            ),
        ),
    }


# --- selection: awareness, managed, other models, runtime versions ---------------------------


def _selection() -> dict[str, Case]:
    aware_type = instance_type(
        EPYC_T4, type_spec("nvidia-tesla-t4", general="amd-epyc-7763", display="Tesla-T4")
    )
    epyc_t4 = copy.deepcopy(T4_2D)
    epyc_t4["metadata"]["annotations"][N + "cpuDetail"] = CPU_DETAIL_NOTE
    xeon_t4 = flavor(
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
        "intel-xeon-platinum-8259cl",
        1,
        1,
        "nvidia-tesla-t4",
        T4_NOTES,
    )
    aware_nodes = [
        t4_node("t4-1", "12.4", None, None),
        t4_node("t4-x", "12.4", None, gkey="intel-xeon-platinum-8259cl"),
    ]
    mixed = devices(
        "a10g-1",
        [
            group("nvidia-a10g", [card("a10g-1", 0)]),
            group("nvidia-tesla-t4", [card("a10g-1", 1), card("a10g-1", 2)], "12.4"),
        ],
    )
    others = [
        mixed,
        a10g_node(name="a10g-2", managed="false"),
        a10g_node(name="a10g-3", managed=None),
    ]
    runtimes = [
        t4_node(f"t4-{n}", runtime, None)
        for n, runtime in enumerate(("12.8", "12.4.1", "12.4", "n/a", "11.8"), start=1)
    ]
    return {
        "aware-narrows-devices": _sync(
            "CPU awareness on: only Devices carrying the pool's CPU key count (t4-x has another "
            "CPU), and the pool's CPU shows in detail.cpu",
            request(
                aware_type,
                aware_nodes,
                [xeon_t4, epyc_t4],
                [],
                settings(instance_type_aware_cpu_manufacturer=True),
            ),
            status(
                HASH[EPYC_T4],
                "2/2 2/20 100/200 0/0",
                detail={
                    **_card_detail(T4_NOTES, "7.5", _sliced(256), ["12.4"]),
                    "cpu": CPU_DETAIL,
                },
                phase=("Pending", f"waiting for the ClusterQueue {EPYC_T4} to be created"),
                ex=("2", "2", "2"),
                sh=("2", "20", "20"),
                sl=("100", "200", "200"),
                reasons=("QueuePending", "Inactive", "QueuePending"),
            ),
        ),
        "only-managed-nodes-and-the-pools-model": _sync(
            "a node with A10G and T4 cards counts only its A10G; Devices marked managed=false or "
            "not marked at all are not the pool's",
            request(A10G_TYPE, others, [A10G_1D], [A10G_QUEUE]),
            ONE_FREE_A10G,
        ),
        "runtime-versions": _sync(
            "runtime versions sorted by (major, minor), 12.4 and 12.4.1 counted once, `n/a` "
            "dropped; runtimeVersion is the oldest; computeCapability from the first node",
            request(T4_TYPE, runtimes, [T4_2D], [T4_QUEUE]),
            status(
                HASH[T4],
                "1/5 1/50 100/500 0/0",
                detail=_card_detail(T4_NOTES, "7.5", _sliced(640), ["11.8", "12.4", "12.8"]),
                ex=("1", "5", "5"),
                sh=("1", "50", "50"),
                sl=("100", "500", "500"),
            ),
        ),
        "descriptors-from-first-live-flavor": _sync(
            "detail comes from the pool's first live flavor (fewest cards per node, then name); "
            "a flavor being deleted is not the pool's any more",
            request(
                T4_TYPE,
                [t4_node("t4-1", "12.4", None)],
                [
                    T4_3D,
                    flavor(
                        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-1d",
                        "amd-epyc-7763",
                        1,
                        1,
                        "nvidia-tesla-t4",
                        {**T4_NOTES, "product": "Tesla-T4-old"},
                        deleting=True,
                    ),
                    flavor(
                        T4_2D["metadata"]["name"],
                        "amd-epyc-7763",
                        2,
                        2,
                        "nvidia-tesla-t4",
                        {**T4_NOTES, "family": "Turing-2"},
                    ),
                ],
                [T4_QUEUE],
            ),
            status(
                HASH[T4],
                "1/1 1/10 100/100 0/0",
                detail=_card_detail(
                    {**T4_NOTES, "family": "Turing-2"}, "7.5", _sliced(128), ["12.4"]
                ),
                ex=("1", "1", "1"),
                sh=("1", "10", "10"),
                sl=("100", "100", "100"),
            ),
        ),
        "lenient-numbers-through-the-slow-path": _sync(
            "a decoder's 128.0 is still a count: the fast reader refuses it, the field reader "
            "accepts it, and the answer is the same as for 128",
            request(A10G_TYPE, [_float_counts(a10g_node())], [A10G_1D], [A10G_QUEUE]),
            ONE_FREE_A10G,
        ),
    }


def _float_counts(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    out["spec"]["groups"][0]["accelerators"][0]["status"]["logicalSliced"]["count"] = 128.0
    return out


# --- malformed requests -----------------------------------------------------------------------


def _errors() -> dict[str, Case]:
    t4_pool = [t4_node("t4-1", "12.4", None, None)]

    def bad_cards(spoil: Any) -> Obj:
        body = request(T4_TYPE, t4_pool, [T4_2D], [T4_QUEUE])
        spoil(body["related"][POOL_CARDS_GROUP][T4]["spec"])
        return body

    bad_note = copy.deepcopy(T4_2D)
    bad_note["metadata"]["annotations"][N + "cpuDetail"] = "{cache: l2}"
    bad_quota = _cpu_queue(("16c", "lots"))
    unsized = copy.deepcopy(T4_2D)
    del unsized["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.capacity"]
    not_a_type = copy.deepcopy(T4_TYPE)
    not_a_type["kind"] = "Node"
    bad_spec = copy.deepcopy(T4_TYPE)
    bad_spec["spec"]["acceleratable"] = "yes"
    cards_at = _related(POOL_CARDS_GROUP, T4)
    t4_2d = T4_2D["metadata"]["name"]
    return {
        "error-pool-cards-view-not-a-quantity": _error(
            "the PoolCards' exclusive view has a remaining that is not a quantity: 400 naming "
            "the field, status untouched",
            "/sync",
            bad_cards(lambda spec: spec["views"]["accelerator"].update(remaining="lots")),
            f"{cards_at}.spec.views.accelerator.remaining",
        ),
        "error-pool-cards-without-views": _error(
            "the PoolCards carry no views",
            "/sync",
            bad_cards(lambda spec: spec.pop("views")),
            f"{cards_at}.spec.views",
        ),
        "error-pool-cards-versions-not-strings": _error(
            "the PoolCards' runtime versions are numbers",
            "/sync",
            bad_cards(lambda spec: spec.update(runtimeVersions=[12.4])),
            f"{cards_at}.spec.runtimeVersions",
        ),
        "error-cpu-detail-note": _error(
            "a flavor's cpuDetail note is not JSON (CPU awareness on, so it is read)",
            "/sync",
            request(
                instance_type(
                    EPYC_T4, type_spec("nvidia-tesla-t4", general="amd-epyc-7763", display="T4")
                ),
                [],
                [bad_note],
                [],
                settings(instance_type_aware_cpu_manufacturer=True),
            ),
            f"{_related('ResourceFlavor.kueue.x-k8s.io/v1beta2', t4_2d)}.metadata.annotations"
            "['note.gpustack.ai/cpuDetail']",
        ),
        "error-flavor-not-sized": _error(
            "a pool flavor without its .capacity label",
            "/sync",
            request(T4_TYPE, [], [unsized], [T4_QUEUE]),
            f"{_related('ResourceFlavor.kueue.x-k8s.io/v1beta2', t4_2d)}.metadata.labels",
        ),
        "error-queue-quota": _error(
            "the queue's cpu nominalQuota is not a quantity",
            "/sync",
            request(GENERIC_TYPE, [], [CPU_16C], [bad_quota]),
            f"{_related('ClusterQueue.kueue.x-k8s.io/v1beta2', GENERIC)}"
            ".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
        ),
        "error-not-an-instance-type": _error(
            "the target is not an InstanceType",
            "/sync",
            request(not_a_type),
            "$.object.kind",
        ),
        "error-spec-type": _error(
            "spec.acceleratable is a string",
            "/sync",
            request(bad_spec),
            "$.object.spec.acceleratable",
        ),
        "error-not-json": _error("the body is not JSON", "/sync", '{"object": ', None),
        "error-customize-parent": _error(
            "customize for something that is not an InstanceType",
            "/customize",
            customize_request(not_a_type),
            "$.parent.kind",
        ),
    }


# --- customize --------------------------------------------------------------------------------


def _customize() -> dict[str, Case]:
    def rules(name: str, cards: bool, flavor_labels: Obj | None) -> Obj:
        found: list[Obj] = []
        if cards:
            found.append(
                {"apiVersion": "gpustack.ai/v1alpha1", "resource": "poolcards", "names": [name]}
            )
        if flavor_labels is not None:
            found.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "resource": "resourceflavors",
                    "labelSelector": {"matchLabels": flavor_labels},
                }
            )
        found += [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "resource": "clusterqueues", "names": [name]},
            {"apiVersion": "gpustack.ai/v1alpha1", "resource": "settings", "names": ["default"]},
        ]
        return {"relatedResources": found}

    platform = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    t4_key = {"acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true"}
    t4_flavors = {
        "resource.gpustack.ai/type": "nodes",
        "feature.gpustack.ai/acceleratable": "true",
        **platform,
        **t4_key,
    }
    cpu_flavors = {
        "resource.gpustack.ai/type": "nodes",
        "feature.gpustack.ai/acceleratable": "false",
        **platform,
    }
    aware_type = instance_type(
        EPYC_T4, type_spec("nvidia-tesla-t4", general="amd-epyc-7763", display="Tesla-T4")
    )
    return {
        "customize-accelerated": {
            "description": "a card pool relates its PoolCards and its queue by name (both named "
            "after the type), its flavors (feature key, os/arch) and the settings",
            "path": "/customize",
            "request": customize_request(T4_TYPE),
            "response": rules(T4, True, t4_flavors),
        },
        "customize-cpu": {
            "description": "a CPU pool relates no PoolCards (it has no cards to tally)",
            "path": "/customize",
            "request": customize_request(GENERIC_TYPE),
            "response": rules(GENERIC, False, cpu_flavors),
        },
        "customize-aware-type": {
            "description": "the answer is cached per generation, so it ignores the CPU key "
            "(the wider flavor selector); sync narrows it when awareness is on, and the keeper "
            "tallies the narrower pool into the PoolCards",
            "path": "/customize",
            "request": customize_request(aware_type),
            "response": rules(EPYC_T4, True, t4_flavors),
        },
        "customize-card-pool-without-group": {
            "description": "a card pool without acceleratorGroup (validation refuses it) relates "
            "no flavors and no PoolCards: its labels alone would match every card flavor",
            "path": "/customize",
            "request": customize_request(
                instance_type("odd", type_spec() | {"acceleratable": True})
            ),
            "response": rules("odd", False, None),
        },
    }


CASES: dict[str, Case] = {
    **_vectors(),
    **_modes(),
    **_partitions(),
    **_phases(),
    **_cpu(),
    **_selection(),
    **_errors(),
    **_customize(),
}
