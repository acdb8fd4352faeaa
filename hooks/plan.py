"""The offline planner: the chain's hooks run in chain order over a cluster snapshot.

Input is a Kubernetes List (what `kubectl get nodes,namespaces -o json` prints; Settings,
InstanceTypes, ClusterQueues, AdmissionChecks and Devices in it are used too). Each hook is
called with the request body Metacontroller would send, through the same pure functions the
Flask apps serve, so the plan is what the cluster would converge to, without a cluster:

1. the Node decorator on every Node (labels, NodeFlavors summary);
2. the pools decorator on the Settings singleton, relating the summaries;
3. the queue decorator on every InstanceType: its ClusterQueue (a queue of the same name in the
   snapshot is the observed one, and its Kueue status is kept on the planned queue);
4. the pool-cards keeper's tally of the snapshot's Devices for every InstanceType
   (`chain.pool_cards`), then the status decorator on every InstanceType, relating its
   PoolCards, the planned flavors and queues: the views and printer columns;
5. the entrance decorator on every Namespace, relating the planned ClusterQueues;
6. the Instance controller on every Instance, relating the planned InstanceTypes and
   ClusterQueues and owning the snapshot's Pod of the same name: its Pod and its status.

On a fleet's manager the snapshot also holds the worker gateway's `FleetPool`s (what
`python -m workergateway.plan` prints, docs/fleet.md, "Planning a fleet offline"): before the
entrance step, the fleet decorator on each of them (its ClusterQueue, AdmissionCheck,
MultiKueueConfig and fleet InstanceType; a queue of the same name in the snapshot keeps its
Kueue status, as in step 3), then the fleet status decorator on each fleet InstanceType,
relating its FleetPool and queue; the entrance step then relates the fleet's queues too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from chain import cli
from chain.apis import (
    ADMISSION_CHECK,
    CHAIN_API,
    CLUSTER_QUEUE,
    INSTANCE_TYPE,
    KUEUE_API,
    LOCAL_QUEUE,
    NODE_FLAVORS,
    RESOURCE_FLAVOR,
    SETTINGS,
    SETTINGS_NAME,
    TOPOLOGY,
    WORKER_API,
)
from chain.devices import DEVICES_KIND
from chain.fleet_pools import FLEET_POOL, FLEET_POOL_API, MULTIKUEUE_CONFIG
from chain.instances import INSTANCE
from chain.manufacturers import default_manufacturers
from chain.pool_cards import POOL_CARDS, POOL_CARDS_API, pool_cards, pool_cards_object
from chain.quantity import format_quantity, parse_quantity
from chain.release import CHAIN_IMAGE
from chain.settings import Settings, StartupEnv
from hooks.entrance import sync as entrance
from hooks.flavor import node as node_hook
from hooks.flavor import pools as pools_hook
from hooks.fleet import children as fleet_children
from hooks.fleet import status as fleet_status
from hooks.instance import sync as instance_hook
from hooks.instancetype import status as status_hook
from hooks.instancetype.request import read_instance_type
from hooks.queue import queue as queue_hook
from hooks.request import CompositeRequest, DecoratorRequest, Obj, parse_shallow

# Metacontroller always sends one (possibly empty) map per declared attachment/related type.
NODE_ATTACHMENTS = (f"{NODE_FLAVORS}.{CHAIN_API}",)
POOL_ATTACHMENTS = (
    f"{RESOURCE_FLAVOR}.{KUEUE_API}",
    f"{TOPOLOGY}.{KUEUE_API}",
    f"{INSTANCE_TYPE}.{WORKER_API}",
)
QUEUE_RELATED = (f"{RESOURCE_FLAVOR}.{KUEUE_API}", f"{ADMISSION_CHECK}.{KUEUE_API}")
FLEET_ATTACHMENTS = (
    f"{CLUSTER_QUEUE}.{KUEUE_API}",
    f"{ADMISSION_CHECK}.{KUEUE_API}",
    f"{MULTIKUEUE_CONFIG}.{KUEUE_API}",
    f"{INSTANCE_TYPE}.{WORKER_API}",
)
FLEET_STATUS_RELATED = (f"{FLEET_POOL}.{FLEET_POOL_API}", f"{CLUSTER_QUEUE}.{KUEUE_API}")
STATUS_RELATED = (
    f"{POOL_CARDS}.{POOL_CARDS_API}",
    f"{RESOURCE_FLAVOR}.{KUEUE_API}",
    f"{CLUSTER_QUEUE}.{KUEUE_API}",
    f"{SETTINGS}.{CHAIN_API}",
)


def of_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    """The objects of one kind, in their order (the planners read snapshots this way)."""
    return [o for o in objects if o.get("kind") == kind]


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _object_map(groups: Iterable[str], objects: Iterable[Obj]) -> dict[str, dict[str, Obj]]:
    out: dict[str, dict[str, Obj]] = {group: {} for group in groups}
    for obj in objects:
        out.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[_key(obj)] = obj
    return out


def settings_object(objects: Iterable[Obj], overrides: Mapping[str, str]) -> Obj:
    """The snapshot's Settings singleton (or an empty one) with `--setting` overrides applied."""
    found = next(
        (o for o in of_kind(objects, SETTINGS) if o["metadata"]["name"] == SETTINGS_NAME),
        None,
    )
    empty: Obj = {"apiVersion": CHAIN_API, "kind": SETTINGS, "metadata": {"name": SETTINGS_NAME}}
    obj: Obj = copy.deepcopy(found) if found else empty
    obj["spec"] = {**(obj.get("spec") or {}), **overrides}
    Settings.from_spec(obj["spec"])  # a bad override is reported before anything runs
    return obj


def _labelled(node: Obj, labels: Mapping[str, str | None]) -> Obj:
    """The Node as it reads once Metacontroller applied the decorator's labels."""
    out = copy.deepcopy(node)
    current = out["metadata"].setdefault("labels", {})
    for key, value in labels.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return out


def _node_step(node: Obj, related_settings: Mapping[str, Any]) -> tuple[Obj, list[Obj]]:
    """A Node as labelled, and its NodeFlavors summary."""
    answer: Obj = {}
    # Metacontroller resyncs a Node after labelling it; two rounds reach the fixed point.
    for _ in range(2):
        answer = node_hook.sync(
            DecoratorRequest.parse(
                {
                    "object": node,
                    "attachments": _object_map(NODE_ATTACHMENTS, []),
                    "related": related_settings,
                }
            )
        )
        node = _labelled(node, answer.get("labels") or {})
    return node, answer.get("attachments") or []


def _queue_step(
    instance_type: Obj, flavors: list[Obj], snapshot: list[Obj], settings: Obj
) -> tuple[Obj, Obj]:
    """An InstanceType with the queue hook's annotations applied, and its ClusterQueue."""
    name = instance_type["metadata"]["name"]
    observed = [q for q in of_kind(snapshot, CLUSTER_QUEUE) if q["metadata"]["name"] == name]
    related = (*QUEUE_RELATED, f"{SETTINGS}.{CHAIN_API}")
    answer = queue_hook.sync(
        DecoratorRequest.parse(
            {
                "object": instance_type,
                "attachments": _object_map((f"{CLUSTER_QUEUE}.{KUEUE_API}",), observed),
                "related": _object_map(
                    related, [*flavors, *of_kind(snapshot, ADMISSION_CHECK), settings]
                ),
            }
        ),
        default_manufacturers(),
    )
    planned = _kueues_word(answer["attachments"][0], observed)
    annotated = copy.deepcopy(instance_type)
    notes = annotated["metadata"].setdefault("annotations", {})
    for key, value in (answer.get("annotations") or {}).items():
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value
    return annotated, planned


def _kueues_word(planned: Obj, observed: list[Obj]) -> Obj:
    """A planned ClusterQueue with the status Kueue wrote on the snapshot's queue of its name:
    Kueue's word is not the hooks' to plan."""
    out = copy.deepcopy(planned)
    if observed and "status" in observed[0]:
        out["status"] = copy.deepcopy(observed[0]["status"])
    return out


def _status_step(instance_type: Obj, related: dict[str, dict[str, Obj]], now: str) -> Obj:
    """An InstanceType with the status the status hook writes."""
    answer = status_hook.sync(
        parse_shallow({"object": instance_type, "attachments": {}, "related": related}), now
    )
    return {**instance_type, "status": answer["status"]}


def _pool_cards_step(types: list[Obj], devices: list[Obj], settings: Obj) -> list[Obj]:
    """What the pool-cards keeper would write for each planned InstanceType."""
    aware = Settings.from_spec(settings.get("spec")).instance_type_aware_cpu_manufacturer
    out = []
    for instance_type in types:
        identity = read_instance_type(instance_type, "$").identity
        cards = pool_cards(identity, aware, devices)
        if cards is not None:
            out.append(pool_cards_object(instance_type, cards))
    return out


def plan(objects: list[Obj], overrides: Mapping[str, str], env: StartupEnv, now: str) -> list[Obj]:
    """The planned objects; `now` is the transition time of the conditions the plan sets."""
    settings = settings_object(objects, overrides)
    related_settings = _object_map((f"{SETTINGS}.{CHAIN_API}",), [settings])

    nodes: list[Obj] = []
    summaries: list[Obj] = []
    for node in of_kind(objects, "Node"):
        labelled, summary = _node_step(node, related_settings)
        nodes.append(labelled)
        summaries += summary

    observed_types = of_kind(objects, INSTANCE_TYPE)
    pools = (
        pools_hook.sync(
            parse_shallow(
                {
                    "object": settings,
                    "attachments": _object_map(POOL_ATTACHMENTS, observed_types),
                    "related": _object_map((f"{NODE_FLAVORS}.{CHAIN_API}",), summaries),
                }
            )
        ).get("attachments")
        or []
    )
    flavors = of_kind(pools, RESOURCE_FLAVOR)

    types: list[Obj] = []
    cluster_queues: list[Obj] = []
    for instance_type in of_kind(pools, INSTANCE_TYPE):
        annotated, planned = _queue_step(instance_type, flavors, objects, settings)
        types.append(annotated)
        cluster_queues.append(planned)
    cards = _pool_cards_step(types, of_kind(objects, DEVICES_KIND), settings)
    related = _object_map(
        STATUS_RELATED,
        [*cards, *flavors, *cluster_queues, settings],
    )
    types = [_status_step(instance_type, related, now) for instance_type in types]
    fleet = _fleet_step(objects, now)
    fleet_queues = of_kind(fleet, CLUSTER_QUEUE)

    local_queues: list[Obj] = []
    for namespace in of_kind(objects, "Namespace"):
        answer = entrance.sync(
            DecoratorRequest.parse(
                {
                    "object": namespace,
                    "attachments": _object_map((f"{LOCAL_QUEUE}.{KUEUE_API}",), []),
                    "related": _object_map(
                        (f"{CLUSTER_QUEUE}.{KUEUE_API}", f"{SETTINGS}.{CHAIN_API}"),
                        [*cluster_queues, *fleet_queues, settings],
                    ),
                }
            ),
            env,
        )
        local_queues += answer.get("attachments") or []
    instances, instance_pods = _instance_step(objects, types, cluster_queues, now)
    others = [obj for obj in pools if obj["kind"] != INSTANCE_TYPE]
    return [
        settings,
        *nodes,
        *summaries,
        *others,
        *cards,
        *types,
        *cluster_queues,
        *fleet,
        *local_queues,
        *instances,
        *instance_pods,
    ]


def _fleet_step(snapshot: list[Obj], now: str) -> list[Obj]:
    """The fleet hooks' answer for every `FleetPool` of the snapshot: each pool's children, its
    fleet InstanceType with the status the fleet status decorator writes."""
    pools = [o for o in of_kind(snapshot, FLEET_POOL) if o.get("apiVersion") == FLEET_POOL_API]
    children: list[Obj] = []
    for pool in pools:
        name = pool["metadata"]["name"]
        observed = [q for q in of_kind(snapshot, CLUSTER_QUEUE) if q["metadata"]["name"] == name]
        answer = fleet_children.sync(
            DecoratorRequest.parse(
                {
                    "object": pool,
                    "attachments": _object_map(FLEET_ATTACHMENTS, []),
                    "related": {},
                }
            )
        )
        children += [
            _kueues_word(child, observed) if child["kind"] == CLUSTER_QUEUE else child
            for child in answer["attachments"]
        ]
    related = _object_map(FLEET_STATUS_RELATED, [*pools, *of_kind(children, CLUSTER_QUEUE)])
    planned: list[Obj] = []
    for child in children:
        if child["kind"] == INSTANCE_TYPE:
            request = DecoratorRequest.parse({"object": child, "related": related})
            child = {**child, "status": fleet_status.sync(request, now)["status"]}
        planned.append(child)
    return planned


def _instance_step(
    snapshot: list[Obj], types: list[Obj], cluster_queues: list[Obj], now: str
) -> tuple[list[Obj], list[Obj]]:
    """Every Instance with the status its controller writes, and the Pods it would run as."""
    instances: list[Obj] = []
    pods: list[Obj] = []
    related = _object_map(
        (f"{INSTANCE_TYPE}.{WORKER_API}", f"{CLUSTER_QUEUE}.{KUEUE_API}"),
        [*types, *cluster_queues],
    )
    for instance in of_kind(snapshot, INSTANCE):
        meta = instance["metadata"]
        owned = [
            pod
            for pod in of_kind(snapshot, "Pod")
            if (pod["metadata"]["name"], pod["metadata"].get("namespace"))
            == (meta["name"], meta.get("namespace"))
        ]
        answer = instance_hook.sync(
            CompositeRequest.parse(
                {
                    "parent": instance,
                    "children": _object_map(("Pod.v1",), owned),
                    "related": related,
                }
            ),
            default_manufacturers(),
            CHAIN_IMAGE,
            now,
        )
        instances.append({**instance, "status": answer["status"]})
        pods += answer["children"]
    return instances, pods


def _labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def table(objects: list[Obj]) -> str:
    """A human summary: nodes, pools (flavors with capacity), InstanceTypes with their views,
    ClusterQueues, LocalQueues."""
    lines: list[str] = []

    def section(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        if not rows:
            return
        lines.append(f"\n{title}")
        lines.extend(f"  {line}".rstrip() for line in cli.columns([header, *rows]))

    node_rows = []
    for node in of_kind(objects, "Node"):
        labels = _labels(node)
        node_rows.append((node["metadata"]["name"], labels.get("gpustack.ai/managed", "-")))
    summaries = {s["metadata"]["name"]: s for s in of_kind(objects, NODE_FLAVORS)}
    section(
        "Nodes",
        ("NODE", "MANAGED", "FLAVORS"),
        [
            (
                name,
                managed,
                ", ".join(
                    f["name"] for f in summaries.get(name, {}).get("spec", {}).get("flavors", [])
                )
                or "-",
            )
            for name, managed in node_rows
        ],
    )

    def capacity(flavor: Obj) -> str:
        return next((v for k, v in _labels(flavor).items() if k.endswith(".capacity")), "?")

    section(
        "ResourceFlavors (pools)",
        ("FLAVOR", "CAPACITY", "TOPOLOGY"),
        [
            (f["metadata"]["name"], capacity(f), f["spec"].get("topologyName", "-"))
            for f in of_kind(objects, RESOURCE_FLAVOR)
        ],
    )
    section(
        "InstanceTypes",
        ("NAME", "DISPLAY", "UNITS (cpu/ram)", "ACCELERATOR(EX/SH/SL/PT)", "CPU", "PHASE"),
        [
            (
                t["metadata"]["name"],
                t["spec"].get("displayName", ""),
                "{cpu}/{ram}".format(**t["spec"].get("unitResources", {"cpu": "?", "ram": "?"})),
                t.get("status", {}).get("acceleratorSummary", "-"),
                t.get("status", {}).get("cpuSummary", "-"),
                t.get("status", {}).get("phase", "-"),
            )
            for t in of_kind(objects, INSTANCE_TYPE)
        ],
    )
    section(
        "Instances",
        ("NAMESPACE", "NAME", "TYPE", "ACCELERATOR", "PHASE", "NODE"),
        [
            (
                i["metadata"].get("namespace", ""),
                i["metadata"]["name"],
                i["spec"]["instanceType"],
                i["status"].get("accelerator", "-"),
                i["status"].get("phase", "-"),
                i["status"].get("node", "-"),
            )
            for i in of_kind(objects, INSTANCE)
        ],
    )
    section(
        "ClusterQueues",
        ("NAME", "STOP POLICY", "RESOURCE", "NOMINAL", "FLAVORS"),
        [_queue_row(q) for q in of_kind(objects, CLUSTER_QUEUE)],
    )
    section(
        "MultiKueueConfigs (the fleet's pools)",
        ("NAME", "CLUSTERS"),
        [
            (c["metadata"]["name"], ",".join(c["spec"]["clusters"]))
            for c in of_kind(objects, MULTIKUEUE_CONFIG)
        ],
    )
    section(
        "LocalQueues",
        ("NAMESPACE", "NAME", "CLUSTERQUEUE"),
        [
            (q["metadata"]["namespace"], q["metadata"]["name"], q["spec"]["clusterQueue"])
            for q in of_kind(objects, LOCAL_QUEUE)
        ],
    )
    return "\n".join(lines).lstrip("\n") + "\n"


def _queue_row(cq: Obj) -> tuple[str, ...]:
    """Name, stop policy, the covered resource, its total nominal quota, #flavors."""
    spec = cq["spec"]
    groups = spec.get("resourceGroups") or []
    flavors = [f for g in groups for f in g.get("flavors") or []]
    quotas = [r["nominalQuota"] for f in flavors for r in f.get("resources") or []]
    total = format_quantity(sum((parse_quantity(str(q)) for q in quotas), Fraction(0)))
    covered = ", ".join(r for g in groups for r in g.get("coveredResources") or []) or "-"
    return (
        cq["metadata"]["name"],
        spec.get("stopPolicy", "None"),
        covered,
        total,
        str(len(flavors)),
    )


def parse_setting(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"--setting {text!r}: expected NAME=VALUE")
    return name, value
