"""Fixture cases of the queue hook: one Metacontroller request each and the exact answer.

Pools are the vectors' cluster (awareness off): T4 cards 2+2 on two EPYC 7763 nodes and 1 on a
Xeon node (5 cards, 8,000,000 credits), one A10G card (1,600,000), and the CPU pool.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.hooks.queue.world import (
    A10G_1D,
    A10G_LABELS,
    A10G_SPEC,
    CPU_8C,
    CPU_16C,
    CPU_R13_96C,
    CPU_XEON_96C,
    GENERIC_LABELS,
    GENERIC_SPEC,
    NVIDIA_CREDITS,
    PROBLEM,
    T4_1D,
    T4_2D,
    T4_LABELS,
    T4_SPEC,
    A,
    G,
    Obj,
    admission_check,
    answer,
    finalize_answer,
    flavor,
    group,
    instance_type,
    kueue_status,
    queue,
    request,
    served_queue,
    settings,
    slim_flavor,
)

Case = dict[str, Any]

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
A10G = "gpustack--nvidia-a10g-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
T4_1D_NAME = T4_1D["metadata"]["name"]
T4_2D_NAME = T4_2D["metadata"]["name"]

T4_GROUPS = group(NVIDIA_CREDITS, (T4_1D_NAME, "1600000"), (T4_2D_NAME, "6400000"))
A10G_GROUPS = group(NVIDIA_CREDITS, (A10G_1D["metadata"]["name"], "1600000"))
CPU_GROUPS = group(
    "cpu",
    ("gpustack--amd-epyc-7763-linux-amd64-8c", "16"),
    ("gpustack--amd-25-1-linux-amd64-16c", "16"),
    ("gpustack--amd-epyc-7r13-linux-amd64-96c", "96"),
    ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-96c", "96"),
)

ACTIVE = admission_check(active=True)
T4_TYPE = instance_type(T4, T4_SPEC)
T4_DELETING = instance_type(T4, T4_SPEC, deleting=True)
T4_INACTIVE = instance_type(T4, {**T4_SPEC, "inactive": True})
WAIT = 10
TOO_MANY = (
    "TooManyFlavors: the pool has 65 flavors and Kueue allows at most 64 in a resource group; "
    "the queue keeps its last accepted flavors"
)


def _sync(description: str, body: Obj, expected: Obj) -> Case:
    return {"description": description, "path": "/sync", "request": body, "response": expected}


def _finalize(description: str, body: Obj, expected: Obj, path: str = "/finalize") -> Case:
    return {"description": description, "path": path, "request": body, "response": expected}


def _error(description: str, path: str, body: Any, field: str | None) -> Case:
    key = "rawRequest" if isinstance(body, str) else "request"
    case = {"description": description, "path": path, key: body, "status": 400}
    if field is not None:
        case["errorField"] = field
    return case


def _t4(stop: str, groups: list[Obj] | None = T4_GROUPS, decided: str | None = None) -> Obj:
    return queue(T4, T4_LABELS, stop, groups, checks=True, decided=decided)


def _t4_served(stop: str, generation: int, status: Obj | None, **kw: Any) -> Obj:
    groups = kw.pop("groups", T4_GROUPS)
    return served_queue(_t4(stop, groups), T4_TYPE, generation, status, **kw)


RUNNING = kueue_status(
    1, reserving=2, admitted=2, reserved={T4_1D_NAME: "1600000", T4_2D_NAME: "3200000"}
)
DRAINING = kueue_status(2, stopped=True, reserving=1, admitted=1, reserved={T4_2D_NAME: "3200000"})
DRAINED_STATUS = kueue_status(2, stopped=True, reserved={T4_1D_NAME: "0", T4_2D_NAME: "0"})
STALE = kueue_status(1, reserved={T4_1D_NAME: "0", T4_2D_NAME: "0"})
STALE_IDLE = kueue_status(2, reserved={T4_1D_NAME: "0", T4_2D_NAME: "0"})


def _echo(stop: str) -> Obj:
    """The T4 queue as finalize answers it: the observed spec (with Kueue's default) held."""
    echoed = _t4(stop)
    echoed["spec"]["queueingStrategy"] = "BestEffortFIFO"
    return echoed


def _by_hand(served: Obj, stop: str) -> Obj:
    """A served queue whose stop policy someone else set, leaving the hook's record as it was."""
    changed = copy.deepcopy(served)
    changed["spec"]["stopPolicy"] = stop
    changed["metadata"]["generation"] += 1
    return changed


def _record(served: Obj, decided: str) -> Obj:
    changed = copy.deepcopy(served)
    changed["metadata"]["annotations"]["schedule.gpustack.ai/stop-policy"] = decided
    return changed


def _renamed(queue: Obj) -> Obj:
    return {**queue, "metadata": {**queue["metadata"], "name": "gpustack--t4-by-hand"}}


def _many(count: int) -> list[Obj]:
    return [
        slim_flavor(
            f"gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-{n}d",
            "amd-epyc-7763",
            n,
            n,
            "nvidia-tesla-t4",
        )
        for n in range(1, count + 1)
    ]


def _pools() -> dict[str, Case]:
    aware_type = instance_type(
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
        {**T4_SPEC, "generalGroup": "amd-epyc-7763"},
    )
    aware_labels = {**T4_LABELS, G + "amd-epyc-7763": "true"}
    acme_spec = {**T4_SPEC, "acceleratorGroup": "acme-x1", "displayName": "X1"}
    acme = flavor(
        "gpustack--amd-epyc-7763--acme-x1-linux-amd64-4d", "amd-epyc-7763", 4, 8, "acme-x1"
    )
    acme_labels = {**T4_LABELS, A + "acme-x1": "true"}
    del acme_labels[A + "nvidia-tesla-t4"]
    sixty_four = group(
        NVIDIA_CREDITS,
        *[
            (f"gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-{n}d", str(n * 1_600_000))
            for n in range(1, 65)
        ],
    )
    with_problem = instance_type(A10G, A10G_SPEC, {PROBLEM: TOO_MANY})
    return {
        "a10g-new-queue": _sync(
            "vectors: the A10G pool (1 card) gets a queue of 1,600,000 credits and the check",
            request(instance_type(A10G, A10G_SPEC), flavors=[A10G_1D], check=ACTIVE),
            answer([queue(A10G, A10G_LABELS, "None", A10G_GROUPS, checks=True)]),
        ),
        "t4-flavor-order": _sync(
            "vectors: 5 T4 cards = 8,000,000 credits; the 1-card flavor comes before the 2-card",
            request(T4_TYPE, [_t4_served("None", 1, RUNNING)], [T4_2D, T4_1D], ACTIVE),
            answer([_t4("None")]),
        ),
        "cpu-pool": _sync(
            "vectors: the CPU pool covers cpu only, nominal = cores, smallest node first; no check",
            request(
                instance_type(GENERIC, GENERIC_SPEC),
                flavors=[CPU_XEON_96C, CPU_16C, CPU_R13_96C, CPU_8C],
                check=ACTIVE,
            ),
            answer([queue(GENERIC, GENERIC_LABELS, "None", CPU_GROUPS)]),
        ),
        "finalizing-flavor-absent": _sync(
            "a flavor Kueue is finalizing counts as absent",
            request(
                T4_TYPE,
                flavors=[
                    T4_1D,
                    flavor(T4_2D_NAME, "amd-epyc-7763", 2, 4, "nvidia-tesla-t4", deleting=True),
                ],
                check=ACTIVE,
            ),
            answer([_t4("None", group(NVIDIA_CREDITS, (T4_1D_NAME, "1600000")))]),
        ),
        "aware-narrows-flavors": _sync(
            "CPU awareness on: the queue carries the CPU key and keeps only that CPU's flavors",
            request(
                aware_type,
                flavors=[T4_1D, T4_2D, CPU_8C],
                check=ACTIVE,
                chain_settings=settings(instance_type_aware_cpu_manufacturer=True),
            ),
            answer(
                [
                    queue(
                        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
                        aware_labels,
                        "None",
                        group(NVIDIA_CREDITS, (T4_2D_NAME, "6400000")),
                        checks=True,
                    )
                ]
            ),
        ),
        "exactly-64-flavors": _sync(
            "64 flavors is Kueue's limit and still fits in one group",
            request(T4_TYPE, flavors=_many(64), check=ACTIVE),
            answer([_t4("None", sixty_four)]),
        ),
        "too-many-flavors-keeps-groups": _sync(
            "65 flavors: refused, the queue keeps its last groups, the type says why",
            request(T4_TYPE, [_t4_served("None", 1, RUNNING)], _many(65), ACTIVE),
            answer([_t4("None")], problem=TOO_MANY),
        ),
        "too-many-flavors-new-queue": _sync(
            "65 flavors and no groups to keep: an empty queue on Hold, the type says why",
            request(T4_TYPE, flavors=_many(65), check=ACTIVE),
            answer([_t4("Hold", None)], problem=TOO_MANY),
        ),
        "problem-cleared": _sync(
            "a type whose problem went away gets the annotation removed (answered as null)",
            request(with_problem, flavors=[A10G_1D], check=ACTIVE),
            answer([queue(A10G, A10G_LABELS, "None", A10G_GROUPS, checks=True)]),
        ),
        "unknown-manufacturer": _sync(
            "an accelerated type of no known manufacturer has no credits resource: refused",
            request(instance_type("gpustack--acme-x1-linux-amd64", acme_spec), flavors=[acme]),
            answer(
                [queue("gpustack--acme-x1-linux-amd64", acme_labels, "Hold")],
                problem="UnknownManufacturer: spec.acceleratorGroup 'acme-x1' names no known "
                "manufacturer, so the queue has no credits resource",
            ),
        ),
        "check-inactive": _sync(
            "the node-devices check exists but is not Active: not named",
            request(
                instance_type(A10G, A10G_SPEC), flavors=[A10G_1D], check=admission_check(False)
            ),
            answer([queue(A10G, A10G_LABELS, "None", A10G_GROUPS)]),
        ),
        "check-absent": _sync(
            "no node-devices check at all: not named",
            request(instance_type(A10G, A10G_SPEC), flavors=[A10G_1D]),
            answer([queue(A10G, A10G_LABELS, "None", A10G_GROUPS)]),
        ),
        "check-derived-off": _sync(
            "instance-type-derived-from-node off: the check is not named even when Active",
            request(
                instance_type(A10G, A10G_SPEC),
                flavors=[A10G_1D],
                check=ACTIVE,
                chain_settings=settings(instance_type_derived_from_node=False),
            ),
            answer([queue(A10G, A10G_LABELS, "None", A10G_GROUPS)]),
        ),
        "inactive-hold": _sync(
            "spec.inactive: the queue keeps its flavors on Hold",
            request(
                instance_type(A10G, {**A10G_SPEC, "inactive": True}),
                flavors=[A10G_1D],
                check=ACTIVE,
            ),
            answer([queue(A10G, A10G_LABELS, "Hold", A10G_GROUPS, checks=True)]),
        ),
        "new-type-no-flavors": _sync(
            "a type whose pool has no flavor yet: an empty queue on Hold, nothing to drain",
            request(T4_TYPE, check=ACTIVE),
            answer([_t4("Hold", None)]),
        ),
    }


def _drain() -> dict[str, Case]:
    empty_held = _t4_served("Hold", 3, kueue_status(3, stopped=True), groups=None)
    return {
        "drain-1-start": _sync(
            "the pool lost every flavor while workloads run (its nodes' labels went, as when the "
            "node agents are uninstalled): HoldAndDrain; the type is not marked inactive",
            request(T4_TYPE, [_t4_served("None", 1, RUNNING)], check=ACTIVE),
            answer([_t4("HoldAndDrain")], resync=WAIT),
        ),
        "drain-2-evicting": _sync(
            "still a workload holding quota: keep draining",
            request(T4_TYPE, [_t4_served("HoldAndDrain", 2, DRAINING)], check=ACTIVE),
            answer([_t4("HoldAndDrain")], resync=WAIT),
        ),
        "drain-3-stale-status": _sync(
            "Kueue has not seen the HoldAndDrain generation yet: its zero counts prove nothing",
            request(T4_TYPE, [_t4_served("HoldAndDrain", 2, STALE)], check=ACTIVE),
            answer([_t4("HoldAndDrain")], resync=WAIT),
        ),
        "drain-4-drained": _sync(
            "stopped at the current generation and nothing holds quota: the groups go, Hold",
            request(T4_TYPE, [_t4_served("HoldAndDrain", 2, DRAINED_STATUS)], check=ACTIVE),
            answer([_t4("Hold", None)]),
        ),
        "drain-5-empty": _sync(
            "drained and still no flavors: the empty queue stays on Hold",
            request(T4_TYPE, [empty_held], check=ACTIVE),
            answer([_t4("Hold", None)]),
        ),
        "drain-6-flavors-back": _sync(
            "flavors are back (the nodes' agents reported again): the queue reopens by itself",
            request(T4_TYPE, [empty_held], [T4_1D, T4_2D], ACTIVE),
            answer([_t4("None")]),
        ),
        "drain-6-flavors-back-inactive": _sync(
            "flavors are back to a type an admin set inactive meanwhile: groups back, on Hold",
            request(T4_INACTIVE, [empty_held], [T4_1D, T4_2D], ACTIVE),
            answer([_t4("Hold")]),
        ),
        "drain-7-admin-reactivates": _sync(
            "an admin cleared spec.inactive: the hook's own Hold is released",
            request(
                T4_TYPE,
                [_t4_served("Hold", 4, kueue_status(4, stopped=True))],
                [T4_1D, T4_2D],
                ACTIVE,
            ),
            answer([_t4("None")]),
        ),
        "drain-flavors-back-midway": _sync(
            "flavors return while draining: groups back, the hook's own drain lifted",
            request(T4_TYPE, [_t4_served("HoldAndDrain", 2, DRAINING)], [T4_1D, T4_2D], ACTIVE),
            answer([_t4("None")]),
        ),
        "drain-flavors-back-midway-inactive": _sync(
            "flavors return while draining a type an admin set inactive: groups back, Hold",
            request(T4_INACTIVE, [_t4_served("HoldAndDrain", 2, DRAINING)], [T4_1D, T4_2D], ACTIVE),
            answer([_t4("Hold")]),
        ),
        "admin-hold-kept": _sync(
            "an admin set Hold on the queue of an active type: the Hold is kept (the record "
            "still says the hook decided None, so the lifecycle keeper marks the type inactive)",
            request(
                T4_TYPE, [_by_hand(_t4_served("None", 1, RUNNING), "Hold")], [T4_1D, T4_2D], ACTIVE
            ),
            answer([_t4("Hold", decided="None")]),
        ),
        "admin-hold-marked": _sync(
            "the type is marked inactive after an admin's Hold: the Hold is the hook's own now",
            request(
                T4_INACTIVE,
                [_by_hand(_t4_served("None", 1, RUNNING), "Hold")],
                [T4_1D, T4_2D],
                ACTIVE,
            ),
            answer([_t4("Hold")]),
        ),
        "admin-drain-kept": _sync(
            "an admin drained the queue by hand: the drain is kept after the type is marked "
            "inactive, until the admin lifts it on the queue",
            request(
                T4_INACTIVE,
                [_by_hand(_t4_served("Hold", 2, RUNNING), "HoldAndDrain")],
                [T4_1D, T4_2D],
                ACTIVE,
            ),
            answer([_t4("HoldAndDrain", decided="Hold")]),
        ),
        "record-unreadable": _sync(
            "a queue whose record was edited to nonsense: its stop counts as the hook's own",
            request(
                T4_TYPE,
                [_record(_t4_served("Hold", 2, RUNNING), "Paused")],
                [T4_1D, T4_2D],
                ACTIVE,
            ),
            answer([_t4("None")]),
        ),
        "drain-off-1-waits": _sync(
            "drain-when-no-flavors off gates the drain only: while workloads hold quota the "
            "queue keeps its groups and its stop policy (no Hold, no HoldAndDrain) and waits",
            request(
                T4_TYPE,
                [_t4_served("None", 1, RUNNING)],
                check=ACTIVE,
                chain_settings=settings(instance_type_drain_when_no_flavors=False),
            ),
            answer([_t4("None")], resync=WAIT),
        ),
        "drain-off-2-waiting": _sync(
            "drain-when-no-flavors off: a stop the type asked for (inactive) is kept while "
            "admitted workloads still run",
            request(
                T4_INACTIVE,
                [_t4_served("Hold", 2, DRAINING)],
                check=ACTIVE,
                chain_settings=settings(instance_type_drain_when_no_flavors=False),
            ),
            answer([_t4("Hold")], resync=WAIT),
        ),
        "drain-off-3-empty": _sync(
            "drain-when-no-flavors off: no reservation left, the groups go; no mark",
            request(
                T4_TYPE,
                [_t4_served("None", 2, STALE_IDLE)],
                check=ACTIVE,
                chain_settings=settings(instance_type_drain_when_no_flavors=False),
            ),
            answer([_t4("Hold", None)]),
        ),
        "drain-off-4-flavors-back": _sync(
            "drain-when-no-flavors off: nothing was evicted, so returning flavors release it",
            request(
                T4_TYPE,
                [empty_held],
                [T4_1D, T4_2D],
                ACTIVE,
                chain_settings=settings(instance_type_drain_when_no_flavors=False),
            ),
            answer([_t4("None")]),
        ),
    }


def _finalizing() -> dict[str, Case]:
    gone = request(T4_DELETING, check=ACTIVE, finalizing=True)
    deleting = _t4_served("HoldAndDrain", 2, DRAINING, deleting=True)
    return {
        "finalize-1-hold-and-drain": _finalize(
            "the type is deleted while workloads run: its queue goes HoldAndDrain",
            request(
                T4_DELETING, [_t4_served("None", 1, RUNNING)], [T4_1D, T4_2D], ACTIVE, None, True
            ),
            finalize_answer([_echo("HoldAndDrain")], finalized=False, resync=WAIT),
        ),
        "finalize-2-evicting": _finalize(
            "still draining: keep the queue, HoldAndDrain",
            request(T4_DELETING, [_t4_served("HoldAndDrain", 2, DRAINING)], finalizing=True),
            finalize_answer([_echo("HoldAndDrain")], finalized=False, resync=WAIT),
        ),
        "finalize-3-drained": _finalize(
            "drained: the queue is left out so Metacontroller deletes it; not finalized yet",
            request(T4_DELETING, [_t4_served("HoldAndDrain", 2, DRAINED_STATUS)], finalizing=True),
            finalize_answer([], finalized=False, resync=WAIT),
        ),
        "finalize-4-queue-deleting": _finalize(
            "the queue is being deleted (Kueue's finalizer holds it): wait, never finalized",
            request(T4_DELETING, [deleting], finalizing=True),
            finalize_answer([], finalized=False, resync=WAIT),
        ),
        "finalize-5-queue-gone": _finalize(
            "the queue is gone: the InstanceType may go",
            gone,
            finalize_answer([], finalized=True, resync=0),
        ),
        "finalize-6-queue-named-otherwise": _finalize(
            "the type owns a queue under another name (renamed by hand, say): it is the type's "
            "all the same, and it is drained before the type goes",
            request(T4_DELETING, [_renamed(_t4_served("None", 1, RUNNING))], finalizing=True),
            finalize_answer([_renamed(_echo("HoldAndDrain"))], finalized=False, resync=WAIT),
        ),
        "finalize-on-sync-route": _finalize(
            "a finalize body sent to /sync is finalized all the same",
            gone,
            finalize_answer([], finalized=True, resync=0),
            path="/sync",
        ),
    }


def _customize() -> dict[str, Case]:
    def body(target: Obj) -> Obj:
        from tests.unit.hooks.queue.world import CONTROLLER

        return {"controller": CONTROLLER, "parent": copy.deepcopy(target)}

    def rules(selector: dict[str, str]) -> Obj:
        return {
            "relatedResources": [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "resource": "resourceflavors",
                    "labelSelector": {
                        "matchLabels": {"resource.gpustack.ai/type": "nodes", **selector}
                    },
                },
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "resource": "admissionchecks",
                    "names": ["gpustack-node-devices"],
                },
                {
                    "apiVersion": "gpustack.ai/v1alpha1",
                    "resource": "settings",
                    "names": ["default"],
                },
            ]
        }

    t4_selector = {
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        A + "nvidia-tesla-t4": "true",
    }
    cpu_selector = {
        "feature.gpustack.ai/acceleratable": "false",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    aware = instance_type(
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64",
        {**T4_SPEC, "generalGroup": "amd-epyc-7763"},
    )

    def case(description: str, target: Obj, selector: dict[str, str]) -> Case:
        return {
            "description": description,
            "path": "/customize",
            "request": body(target),
            "response": rules(selector),
        }

    return {
        "customize-accelerated": case(
            "the T4 pool's flavors, the check, the settings", T4_TYPE, t4_selector
        ),
        "customize-cpu": case(
            "the CPU pool's flavors", instance_type(GENERIC, GENERIC_SPEC), cpu_selector
        ),
        "customize-cpu-aware-type": case(
            "a CPU-keyed type relates without the CPU key (spec only; sync narrows)",
            aware,
            t4_selector,
        ),
        "error-customize-no-parent": _error(
            "customize without a parent", "/customize", {"controller": {}}, "$"
        ),
        "error-customize-bad-spec": _error(
            "customize of a type whose acceleratable is not a boolean",
            "/customize",
            body(instance_type(T4, {**T4_SPEC, "acceleratable": "yes"})),
            "$.parent.spec.acceleratable",
        ),
    }


def _errors() -> dict[str, Case]:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-t4-1"}}
    bad_capacity = copy.deepcopy(T4_2D)
    key = A + "nvidia-tesla-t4.capacity"
    bad_capacity["metadata"]["labels"][key] = "four"
    rf = "$.related['ResourceFlavor.kueue.x-k8s.io/v1beta2']"
    cq = "$.attachments['ClusterQueue.kueue.x-k8s.io/v1beta2']"
    paused = _t4_served("None", 1, RUNNING)
    paused["spec"]["stopPolicy"] = "Pause"
    as_list = request(T4_TYPE)
    as_list["attachments"]["ClusterQueue.kueue.x-k8s.io/v1beta2"] = [_t4("None")]
    no_object = request(T4_TYPE)
    del no_object["object"]
    return {
        "error-not-json": _error("a body that is not JSON", "/sync", "{not json", None),
        "error-no-object": _error("no object", "/sync", no_object, "$"),
        "error-finalize-no-object": _error(
            "finalize without an object", "/finalize", no_object, "$"
        ),
        "error-not-an-instance-type": _error(
            "a Node is not an InstanceType", "/sync", request(node), "$.object.kind"
        ),
        "error-inactive-not-boolean": _error(
            "spec.inactive must be a boolean",
            "/sync",
            request(instance_type(T4, {**T4_SPEC, "inactive": "yes"})),
            "$.object.spec.inactive",
        ),
        "error-flavor-capacity": _error(
            "a flavor whose capacity label is not a number",
            "/sync",
            request(T4_TYPE, flavors=[T4_1D, bad_capacity]),
            f"{rf}['{T4_2D_NAME}'].metadata.labels['{key}']",
        ),
        "error-bad-setting": _error(
            "a setting that is not a boolean",
            "/sync",
            request(T4_TYPE, chain_settings=settings(instance_type_drain_when_no_flavors="often")),
            "$.related['Settings.gpustack.ai/v1alpha1']['default'].spec"
            ".instance-type-drain-when-no-flavors",
        ),
        "error-queue-stop-policy": _error(
            "an observed queue with an unknown stop policy",
            "/sync",
            request(T4_TYPE, [paused]),
            f"{cq}['{T4}'].spec.stopPolicy",
        ),
        "error-attachments-list": _error(
            "an attachment group sent as a list", "/sync", as_list, f"{cq}"
        ),
    }


CASES: dict[str, Case] = {**_pools(), **_drain(), **_finalizing(), **_customize(), **_errors()}
