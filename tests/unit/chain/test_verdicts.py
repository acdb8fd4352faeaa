"""The per-card verdict (docs/design/vectors.md, "Feasibility (logical cards, 10 slices each)"), its
messages, topology decoding, promised cards, and a property test against a brute-force placement
search."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chain.charged_pods import charged_pods
from chain.charging import Demand, Miss, demands, first_miss
from chain.devices import Devices
from chain.families import Family
from chain.ledger import Mode
from chain.ledger_rebuild import PodAllocations
from chain.manufacturers import ManufacturerTable, manufacturers
from chain.requests import PodDemand
from chain.topology_assignment import Domain, hostname_domains
from chain.units import RESOURCE_MAX_UNITS
from chain.verdicts import (
    LEDGER_NOT_READY,
    NO_KEY,
    NODE_READY,
    NODE_RETRY,
    NOT_PARTITIONED,
    POOL_READY,
    POOL_RETRY,
    PROFILE_FULL,
    PROMISE_FLAVOR,
    PROMISED,
    UNRESOLVED,
    Snapshot,
    Verdict,
    judge,
)
from chain.workload_state import Share, State, holds_cards, needs_verdict

TABLE = manufacturers({})
GPU = "nvidia.com/gpu"
AKEY = "nvidia-t4"
FLAVOR = "gpustack--generic--nvidia-t4-linux-amd64-4d"
HOSTNAME = "kubernetes.io/hostname"
POOL = "in the assigned flavor pool"
_ = POOL


# --- builders -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class C:
    """A card: its ledger row and what it can be cut into."""

    mode: Mode = Mode.NONE
    left: int = RESOURCE_MAX_UNITS
    slices: int = 10
    held: int = 0
    partitions: int = 0
    profiles: dict[str, int] | None = None
    """remainingProfiles of the row (None: the row reports none, ledger not ready)."""


FREE = C()


def sliced(left: int, held: int = 1) -> C:
    return C(Mode.SLICED, left, held=held)


def flavor(name: str = FLAVOR, akey: str | None = AKEY, count: str | None = None) -> dict[str, Any]:
    labels = {"gpustack.ai/managed": "true", "kubernetes.io/os": "linux"}
    if akey is not None:
        labels[f"acceleratable.feature.gpustack.ai/{akey}"] = "true"
    if count is not None:
        labels[f"acceleratable.feature.gpustack.ai/{akey}.count"] = count
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels},
    }


def node(name: str, cards: list[C], group: str = "t4") -> Devices:
    spec_cards = []
    rows = []
    for i, c in enumerate(cards):
        status: dict[str, Any] = {"logicalSliced": {"count": c.slices}} if c.slices else {}
        if c.partitions:
            status = {"physicalSliced": {"count": c.partitions}}
        spec_cards.append({"id": f"{name}-{i}", "index": i, "status": status})
        row: dict[str, Any] = {"id": f"{name}-{i}", "index": i, "mode": int(c.mode)}
        row.update(remaining=c.left, allocatedSlices=c.held)
        if c.profiles is not None:
            row["remainingProfiles"] = [{"name": k, "count": v} for k, v in c.profiles.items()]
        rows.append(row)
    labels = {
        "gpustack.ai/managed": "true",
        "kubernetes.io/os": "linux",
        f"acceleratable.feature.gpustack.ai/nvidia-{group}": "true",
    }
    group_spec = {"id": group, "manufacturer": "nvidia", "name": group, "memory": 15360}
    return Devices.parse(
        {
            "kind": "Devices",
            "metadata": {"name": name, "labels": labels},
            "spec": {"groups": [{**group_spec, "accelerators": spec_cards}]},
            "status": {"groups": [{"id": group, "manufacturer": "nvidia", "accelerators": rows}]},
        }
    )


def podset(name: str, count: int, limits: dict[str, str], *more: dict[str, str]) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "resources": {"limits": lim}} for i, lim in enumerate((limits, *more))
    ]
    return {"name": name, "count": count, "template": {"spec": {"containers": containers}}}


def tas(*hosts: tuple[str, int]) -> dict[str, Any]:
    return {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": len(hosts),
                "valuesPerLevel": [{"individual": {"roots": [h for h, _ in hosts]}}],
                "podCounts": {"individual": [n for _, n in hosts]},
            }
        ],
    }


def workload(
    *podsets: dict[str, Any],
    flavors: dict[str, str] | None = None,
    topology: dict[str, dict[str, Any]] | None = None,
    name: str = "job-a",
    conditions: tuple[str, ...] = ("QuotaReserved",),
    checks: dict[str, str] | None = None,
) -> dict[str, Any]:
    assignments = []
    for ps in podsets:
        entry: dict[str, Any] = {
            "name": ps["name"],
            "count": ps["count"],
            "flavors": {"credits.gpustack.ai/nvidia": (flavors or {}).get(ps["name"], FLAVOR)},
        }
        if topology and ps["name"] in topology:
            entry["topologyAssignment"] = topology[ps["name"]]
        assignments.append(entry)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"queueName": "gpustack-fnv64-6b371caa2da0b799", "podSets": list(podsets)},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": assignments},
            "conditions": [{"type": t, "status": "True"} for t in conditions],
            "admissionChecks": [
                {"name": k, "state": v, "message": ""} for k, v in (checks or {}).items()
            ],
        },
    }


def verdict(
    wl: dict[str, Any],
    nodes: list[Devices],
    flavors: list[dict[str, Any]] | None = None,
    gone: tuple[str, ...] = (),
    others: tuple[dict[str, Any], ...] = (),
    charged: dict[tuple[str, str, str, str], int] | None = None,
) -> Verdict:
    hostnames = {d.name: d.name for d in nodes if d.name not in gone}
    rfs = {rf["metadata"]["name"]: rf for rf in (flavors if flavors is not None else [flavor()])}
    snap = Snapshot(rfs, nodes, hostnames, others, charged or {})
    return judge(wl, snap, TABLE)


def exclusive(n: int, name: str = "main") -> dict[str, Any]:
    return podset(name, 1, {GPU: str(n)})


def slices(pods: int, units: int, name: str = "main") -> dict[str, Any]:
    return podset(name, pods, {GPU + ".sliced": "1", GPU + ".sliced.units": str(units)})


def retry(roles: str = "") -> Verdict:
    return Verdict(State.RETRY, POOL_RETRY.format(roles=roles))


READY = Verdict(State.READY, POOL_READY)


# --- vectors ------------------------------------------------------------------------------------


def test_exclusive_5_on_8_partly_sliced_cards() -> None:
    assert verdict(workload(exclusive(5)), [node("a", [sliced(800000)] * 8)]) == retry()


def test_exclusive_5_on_5_free_and_3_sliced() -> None:
    cards = [FREE] * 5 + [sliced(800000)] * 3
    assert verdict(workload(exclusive(5)), [node("a", cards)]) == READY


def test_exclusive_5_on_4_free() -> None:
    assert verdict(workload(exclusive(5)), [node("a", [FREE] * 4)]) == retry()


def test_sliced_3_on_4_partly_sliced_cards() -> None:
    assert verdict(workload(slices(3, 800000)), [node("a", [sliced(800000)] * 4)]) == READY


def test_no_demands() -> None:
    cpu_only = podset("main", 2, {"cpu": "4"})
    assert verdict(workload(cpu_only), []) == READY


def test_one_free_card() -> None:
    assert verdict(workload(exclusive(1)), [node("a", [FREE])]) == READY
    both = workload(exclusive(1, "trainer"), slices(1, 800000, "server"))
    assert verdict(both, [node("a", [FREE])]) == retry(' for role "trainer"')


@pytest.mark.parametrize(
    "ps",
    [exclusive(1), podset("main", 1, {GPU + ".shared": "1"}), slices(1, 160000)],
)
def test_partitioned_card_serves_no_whole_or_sliced_request(ps: dict[str, Any]) -> None:
    mig = C(partitions=7, profiles={"1g.5gb": 7})
    assert verdict(workload(ps), [node("a", [mig])]) == retry()


def _partition(profile: str = "1g.5gb", pods: int = 1) -> dict[str, Any]:
    limits = {GPU + ".partitioned": "1", f"{GPU}.partitioned.mig-{profile}": "1"}
    return podset("main", pods, limits)


def _where(message: str) -> str:
    return message.format(where=POOL, profile="1g.5gb", roles="")


def test_partition_against_unpartitioned_card() -> None:
    found = verdict(workload(_partition()), [node("a", [FREE])])
    assert found == Verdict(State.RETRY, _where(NOT_PARTITIONED))
    assert "no card in the assigned flavor pool is partitioned" in found.message


def test_partition_profile_full() -> None:
    full = C(Mode.PARTITIONED, partitions=7, profiles={"1g.5gb": 0, "2g.10gb": 1})
    assert verdict(workload(_partition()), [node("a", [full])]) == Verdict(
        State.RETRY, _where(PROFILE_FULL)
    )


def test_partition_ledger_not_ready() -> None:
    unknown = C(partitions=7, profiles=None)
    assert verdict(workload(_partition()), [node("a", [unknown])]) == Verdict(
        State.RETRY, _where(LEDGER_NOT_READY)
    )


def test_partitions_spread_over_cards_with_room() -> None:
    cards = [C(partitions=7, profiles={"1g.5gb": 2}), C(partitions=7, profiles={"1g.5gb": 1})]
    assert verdict(workload(_partition(pods=3)), [node("a", cards)]) == READY
    assert verdict(workload(_partition(pods=4)), [node("a", cards)]).state == State.RETRY


# --- shared -------------------------------------------------------------------------------------


def test_shared_holder_needs_its_cards_on_one_node() -> None:
    two_nodes = [node("a", [FREE, FREE]), node("b", [FREE, FREE])]
    assert verdict(workload(podset("main", 1, {GPU + ".shared": "3"})), two_nodes) == retry()
    assert verdict(workload(podset("main", 1, {GPU + ".shared": "2"})), two_nodes) == READY


def test_shared_cards_hold_ten_owners() -> None:
    almost = C(Mode.SHARED, 160000)
    ps = podset("main", 2, {GPU + ".shared": "1"})
    assert verdict(workload(ps), [node("a", [almost])]) == retry()
    assert verdict(workload(podset("main", 1, {GPU + ".shared": "1"})), [node("a", [almost])]) == (
        READY
    )


# --- node-scoped (TAS) --------------------------------------------------------------------------


def test_node_scoped_verdicts() -> None:
    nodes = [node("a", [FREE]), node("b", [FREE, FREE])]
    on_b = workload(exclusive(2), topology={"main": tas(("b", 1))})
    assert verdict(on_b, nodes) == Verdict(State.READY, NODE_READY.format(node="b"))
    on_a = workload(exclusive(2), topology={"main": tas(("a", 1))})
    assert verdict(on_a, nodes) == Verdict(State.RETRY, NODE_RETRY.format(node="a", roles=""))
    assert verdict(on_a, nodes).message == (
        'no card on the node "a" Kueue assigned can host the request; will retry as capacity frees'
    )


def test_node_gone_serves_no_pinned_demand() -> None:
    on_b = workload(exclusive(1), topology={"main": tas(("b", 1))})
    assert verdict(on_b, [node("b", [FREE])], gone=("b",)).state == State.RETRY


def test_pods_spread_over_two_nodes_are_each_judged_on_their_node() -> None:
    wl = workload(podset("main", 3, {GPU: "1"}), topology={"main": tas(("a", 1), ("b", 2))})
    assert verdict(wl, [node("a", [FREE]), node("b", [FREE, FREE])]) == READY
    found = verdict(wl, [node("a", [FREE, FREE]), node("b", [FREE])])
    assert found == Verdict(State.RETRY, NODE_RETRY.format(node="b", roles=""))


def test_roles_are_named_on_multi_podset_workloads() -> None:
    # The slice is fitted first (more units per card) and takes the only card.
    wl = workload(exclusive(1, "a"), slices(1, RESOURCE_MAX_UNITS, "c"))
    assert verdict(wl, [node("n", [FREE])]) == retry(' for role "a"')
    merged = demands(
        [
            Share("a", FLAVOR, "", 1, (PodDemand(Family.EXCLUSIVE, "nvidia", 2),)),
            Share("b", FLAVOR, "", 1, (PodDemand(Family.EXCLUSIVE, "nvidia", 2),)),
        ]
    )
    assert merged == [
        Demand(Family.EXCLUSIVE, 4, flavor=FLAVOR, manufacturer="nvidia", roles=("a", "b"))
    ]
    wl = workload(exclusive(2, "a"), exclusive(2, "b"))
    assert verdict(wl, [node("n", [FREE] * 3)]) == retry(' for roles "a", "b"')


# --- gangs across nodes (docs/topology.md, "Gangs across nodes") -------------------------------

RACK = "cloud.provider.com/topology-rack"


def rack_tas(*racks: tuple[str, tuple[tuple[str, int], ...]]) -> dict[str, Any]:
    """A rack/hostname assignment in Kueue's compact form: one slice per rack, the rack's value
    universal, its hostnames individual (as Kueue writes a PodSet placed inside one rack)."""
    return {
        "levels": [RACK, HOSTNAME],
        "slices": [
            {
                "domainCount": len(hosts),
                "valuesPerLevel": [
                    {"universal": rack},
                    {"individual": {"prefix": "", "roots": [h for h, _ in hosts], "suffix": ""}},
                ],
                "podCounts": {"individual": [n for _, n in hosts]},
            }
            for rack, hosts in racks
        ],
    }


def test_a_rack_gang_is_judged_node_by_node_for_its_own_share() -> None:
    # 4 Pods x 2 cards in rack-1: 2 Pods on a (4 cards), 1 each on b and c.
    gang = workload(
        podset("main", 4, {GPU: "2"}),
        topology={"main": rack_tas(("rack-1", (("a", 2), ("b", 1), ("c", 1))))},
    )
    exact = [node("a", [FREE] * 4), node("b", [FREE] * 2), node("c", [FREE] * 2)]
    assert verdict(gang, exact) == READY  # exactly enough: no false Retry
    # The rack holds 9 free cards (more than the 8 asked) but a holds 3 for its 2 Pods' 4: the
    # shares are not pooled across nodes (no false Ready).
    short_a = [node("a", [FREE] * 3), node("b", [FREE] * 3), node("c", [FREE] * 3)]
    assert verdict(gang, short_a) == Verdict(State.RETRY, NODE_RETRY.format(node="a", roles=""))
    # A half-sliced card is no whole card, even where the scalar total looks fine.
    sliced_c = [node("a", [FREE] * 4), node("b", [FREE] * 2), node("c", [FREE, sliced(5)])]
    assert verdict(gang, sliced_c) == Verdict(State.RETRY, NODE_RETRY.format(node="c", roles=""))
    # A node of the assignment that is gone serves nothing.
    assert verdict(gang, exact, gone=("b",)).state == State.RETRY


def test_a_preferred_rack_gang_split_over_two_racks_is_judged_on_every_node() -> None:
    # podset-preferred-topology: Kueue may spill into a second rack; every node still counts.
    gang = workload(
        podset("main", 3, {GPU: "4"}),
        topology={"main": rack_tas(("rack-1", (("a", 1), ("b", 1))), ("rack-2", (("d", 1),)))},
    )
    four = [FREE] * 4
    assert verdict(gang, [node("a", four), node("b", four), node("d", four)]) == READY
    held_d = [node("a", four), node("b", four), node("d", [FREE] * 3 + [sliced(1)])]
    assert verdict(gang, held_d) == Verdict(State.RETRY, NODE_RETRY.format(node="d", roles=""))


def test_the_starved_role_of_a_gang_is_named() -> None:
    # prefill: 2 Pods x 2 cards on a and b; decode: 2 Pods x 4 cards on c and d, all in rack-1.
    def gang() -> dict[str, Any]:
        return workload(
            podset("prefill", 2, {GPU: "2"}),
            podset("decode", 2, {GPU: "4"}),
            topology={
                "prefill": rack_tas(("rack-1", (("a", 1), ("b", 1)))),
                "decode": rack_tas(("rack-1", (("c", 1), ("d", 1)))),
            },
        )

    four = [FREE] * 4
    fits = [node("a", four), node("b", four), node("c", four), node("d", four)]
    assert verdict(gang(), fits) == READY
    decode_short = [node("a", four), node("b", four), node("c", four), node("d", [FREE] * 3)]
    assert verdict(gang(), decode_short) == Verdict(
        State.RETRY, NODE_RETRY.format(node="d", roles=' for role "decode"')
    )
    prefill_short = [node("a", [FREE]), node("b", four), node("c", four), node("d", four)]
    assert verdict(gang(), prefill_short).message == (
        'no card on the node "a" Kueue assigned can host the request for role "prefill"; '
        "will retry as capacity frees"
    )


def test_two_roles_on_one_node_share_its_cards() -> None:
    # prefill and decode each put a 2-card Pod on node a: 4 cards are needed there, together.
    gang = workload(
        podset("prefill", 1, {GPU: "2"}),
        podset("decode", 1, {GPU: "2"}),
        topology={
            "prefill": rack_tas(("rack-1", (("a", 1),))),
            "decode": rack_tas(("rack-1", (("a", 1),))),
        },
    )
    assert verdict(gang, [node("a", [FREE] * 4)]) == Verdict(
        State.READY, NODE_READY.format(node="a")
    )
    assert verdict(gang, [node("a", [FREE] * 3)]) == Verdict(
        State.RETRY, NODE_RETRY.format(node="a", roles=' for roles "prefill", "decode"')
    )


# --- flavors ------------------------------------------------------------------------------------


def test_unresolved_flavor() -> None:
    wl = workload(exclusive(1))
    wl["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"cpu": "x"}
    assert verdict(wl, [node("a", [FREE])]) == Verdict(State.RETRY, UNRESOLVED.format(roles=""))


def test_flavor_without_an_accelerator_key() -> None:
    assert verdict(workload(exclusive(1)), [node("a", [FREE])], [flavor(akey=None)]) == Verdict(
        State.RETRY, NO_KEY.format(flavor=FLAVOR, roles="")
    )


def test_missing_flavor_places_nothing() -> None:
    assert verdict(workload(exclusive(1)), [node("a", [FREE])], flavors=[]) == retry()


def test_flavor_count_must_match_the_nodes_cards() -> None:
    wl = workload(exclusive(1))
    assert verdict(wl, [node("a", [FREE])], [flavor(count="1")]) == READY
    assert verdict(wl, [node("a", [FREE])], [flavor(count="2")]) == retry()
    assert verdict(wl, [node("a", [FREE])], [flavor(count="x")]) == retry()


def test_flavor_selects_only_its_model() -> None:
    wl = workload(exclusive(1))
    assert verdict(wl, [node("a", [FREE], group="a10")]) == retry()


# --- promised cards -------------------------------------------------------------------------


def _admitted(name: str, host: str, pods: int = 1) -> dict[str, Any]:
    ps = podset("main", pods, {GPU: "1"})
    return workload(
        ps,
        name=name,
        topology={"main": tas((host, pods))},
        conditions=("QuotaReserved", "Admitted"),
    )


def test_cards_promised_to_admitted_workloads_count_as_taken() -> None:
    mine = workload(exclusive(1), topology={"main": tas(("a", 1))})
    found = verdict(mine, [node("a", [FREE])], others=(_admitted("other", "a"),))
    assert found == Verdict(State.RETRY, NODE_RETRY.format(node="a", roles="") + PROMISED)
    charged = {("team-a", "other", "main", "a"): 1}
    both = verdict(mine, [node("a", [FREE])], others=(_admitted("other", "a"),), charged=charged)
    assert both.state == State.READY


def test_ready_check_counts_as_holding_cards() -> None:
    ready = workload(
        exclusive(1),
        name="other",
        topology={"main": tas(("a", 1))},
        checks={"gpustack-node-devices": "Ready"},
    )
    pending = {**ready, "status": {**ready["status"], "admissionChecks": []}}
    mine = workload(exclusive(1))
    assert verdict(mine, [node("a", [FREE])], others=(ready,)).state == State.RETRY
    assert verdict(mine, [node("a", [FREE])], others=(pending,)) == READY


def test_promises_on_other_nodes_or_without_hostnames_are_ignored() -> None:
    mine = workload(exclusive(1), topology={"main": tas(("a", 1))})
    elsewhere = _admitted("other", "b")
    assert verdict(mine, [node("a", [FREE]), node("b", [FREE])], others=(elsewhere,)).state == (
        State.READY
    )
    pool_wide = workload(exclusive(1), name="other", conditions=("QuotaReserved", "Admitted"))
    assert verdict(mine, [node("a", [FREE])], others=(pool_wide,)).state == State.READY
    itself = _admitted("job-a", "a")
    assert verdict(mine, [node("a", [FREE])], others=(itself,)).state == State.READY


def test_promise_with_a_gone_flavor() -> None:
    other = _admitted("other", "a")
    other["status"]["admission"]["podSetAssignments"][0]["flavors"] = {
        "credits.gpustack.ai/nvidia": "gone"
    }
    found = verdict(workload(exclusive(1)), [node("a", [FREE, FREE])], others=(other,))
    assert found == Verdict(State.RETRY, PROMISE_FLAVOR.format(node="a", flavor="gone"))


def test_workload_states() -> None:
    reserved = workload(exclusive(1))
    assert needs_verdict(reserved) and not holds_cards(reserved)
    admitted = workload(exclusive(1), conditions=("QuotaReserved", "Admitted"))
    assert holds_cards(admitted) and not needs_verdict(admitted)
    evicted = workload(exclusive(1), conditions=("QuotaReserved", "Admitted", "Evicted"))
    assert not holds_cards(evicted) and not needs_verdict(evicted)
    inactive = workload(exclusive(1), conditions=("QuotaReserved", "Admitted"))
    inactive["spec"]["active"] = False
    assert not holds_cards(inactive)


def test_charged_pods() -> None:
    def pod(name: str, record: object, node_name: str = "node-a") -> dict[str, Any]:
        annotations: dict[str, Any] = {"kueue.x-k8s.io/workload": "other"}
        if record is not None:
            annotations["device.gpustack.ai/accelerator.allocated"] = (
                record if isinstance(record, str) else json.dumps(record)
            )
        return {
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/podset": "main"},
                "annotations": annotations,
            },
            "spec": {
                "nodeName": node_name,
                "containers": [
                    {"name": "main", "resources": {"limits": {GPU: "1"}}},
                    {"name": "sshd", "resources": {}},
                ],
            },
        }

    pods = [
        pod("p0", {"main": {}}),
        pod("p1", {"sshd": {}}),
        pod("p2", None),
        pod("p3", "not json"),
        pod("p4", {"main": {}}, node_name="gone"),
        # A record the ledger cannot read charges nothing there, so it counts as charged nowhere:
        # its Pod stays promised (one parser for both readers).
        pod("p5", {"main": 5}),
        pod("p6", {"main": {"devices": "x"}}),
    ]
    found = charged_pods(pods, {"node-a": "host-a"}, TABLE)
    assert found == {("team-a", "other", "main", "host-a"): 1}
    for broken in pods[5:]:
        assert PodAllocations.from_pod(broken).problem


# --- topology decoding --------------------------------------------------------------------------


def test_compact_topology_assignment() -> None:
    assignment = {
        "levels": ["cloud.provider.com/rack", HOSTNAME],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "rack-1"},
                    {"individual": {"prefix": "rack-1-node-", "roots": ["1", "2"], "suffix": "x"}},
                ],
                "podCounts": {"individual": [2, 3]},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "rack-2"}, {"universal": "solo"}],
                "podCounts": {"universal": 4},
            },
        ],
    }
    assert hostname_domains(assignment, "t", 9) == [
        Domain("rack-1-node-1x", 2),
        Domain("rack-1-node-2x", 3),
        Domain("solo", 4),
    ]
    assert hostname_domains({"levels": ["rack"], "slices": []}, "t", 9) is None
    assert hostname_domains({}, "t", 9) is None
    # Every domain holds a Pod: more domains than the PodSet's Pods is refused at once, before
    # any is built (1e18 domains would otherwise loop for ever).
    with pytest.raises(ValueError, match=r"slices\[1\]\.domainCount: 3 domains in all"):
        hostname_domains(assignment, "t", 2)
    huge = {**assignment, "slices": [{**assignment["slices"][1], "domainCount": 10**18}]}
    with pytest.raises(ValueError, match="domainCount"):
        hostname_domains(huge, "t", 9)


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        (
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"roots": ["a"]}}],
                "podCounts": {"universal": 1},
            },
            r"roots\[1\]",
        ),
        (
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "a"}],
                "podCounts": {"individual": []},
            },
            r"individual\[0\]",
        ),
        ({"domainCount": 1, "valuesPerLevel": [], "podCounts": {"universal": 1}}, "valuesPerLevel"),
    ],
)
def test_malformed_topology_names_the_field(broken: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        hostname_domains({"levels": [HOSTNAME], "slices": [broken]}, "t", 9)


def test_demand_order() -> None:
    pod = PodDemand
    shares = [
        Share("x", "f", "b", 1, (pod(Family.EXCLUSIVE, "nvidia", 1),)),
        Share("x", "f", "a", 1, (pod(Family.EXCLUSIVE, "nvidia", 1),)),
        Share("y", "f", "", 2, (pod(Family.SLICED, "nvidia", 1, 320000),)),
        Share("z", "f", "", 1, (pod(Family.PARTITIONED, "nvidia", 1, 1, "1g.5gb"),)),
        Share("w", "f", "", 3, (pod(Family.SHARED, "nvidia", 2, holders=(2,)),)),
        Share("v", "f", "", 0, (pod(Family.EXCLUSIVE, "nvidia", 1),)),
    ]
    found = [(d.family, d.node, d.cards, d.holders) for d in demands(shares)]
    assert found == [
        (Family.PARTITIONED, "", 1, ()),
        (Family.SLICED, "", 2, ()),
        (Family.EXCLUSIVE, "a", 1, ()),
        (Family.EXCLUSIVE, "b", 1, ()),
        (Family.SHARED, "", 6, ((2, 3),)),
    ]


# --- property: the greedy fit agrees with an exhaustive search --------------------------------


def _slice_ok(c: C, k: int, units: int) -> bool:
    if k == 0:
        return True
    return (
        c.slices > 0
        and not c.partitions
        and c.mode in (Mode.NONE, Mode.SLICED)
        and k <= c.slices - c.held
        and k * units <= c.left
    )


def brute_force(cards: list[C], family: Family, count: int, units: int) -> bool:
    """Does any assignment of the `count` requested cards/slices to `cards` respect every card?"""
    if family == Family.EXCLUSIVE:
        free = [i for i, c in enumerate(cards) if c.mode == Mode.NONE and not c.partitions]
        return any(True for _ in itertools.combinations(free, count))
    for choice in itertools.product(range(len(cards)), repeat=count):
        taken = [choice.count(i) for i in range(len(cards))]
        if all(_slice_ok(c, k, units) for c, k in zip(cards, taken, strict=True)):
            return True
    return False


@st.composite
def a_card(draw: st.DrawFn) -> C:
    slices = draw(st.sampled_from([0, 2, 10]))
    mode = draw(st.sampled_from([Mode.NONE, Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED]))
    if mode == Mode.NONE:
        return C(slices=slices)
    if mode == Mode.EXCLUSIVE:
        return C(mode, 0, slices)
    if mode == Mode.SHARED:
        return C(mode, draw(st.integers(0, 9)) * 160000, slices)
    # A slice costs at least one unit, so a sliced card never has all M units left.
    held = draw(st.integers(1, max(slices, 1)))
    return C(mode, draw(st.integers(0, 9)) * 160000 + draw(st.sampled_from([0, 1])), slices, held)


@given(
    first=st.lists(a_card(), min_size=1, max_size=3),
    second=st.lists(a_card(), max_size=3),
    family=st.sampled_from([Family.EXCLUSIVE, Family.SLICED]),
    count=st.integers(1, 4),
    units=st.sampled_from([0, 160000, 320000, 800000, 1200000, RESOURCE_MAX_UNITS]),
    pinned=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_verdict_matches_brute_force(
    first: list[C], second: list[C], family: Family, count: int, units: int, pinned: bool
) -> None:
    nodes = [node("a", first)] + ([node("b", second)] if second else [])
    if family == Family.EXCLUSIVE:
        ps = podset("main", 1, {GPU: str(count)})
    else:
        ps = slices(count, units)
    topology = {"main": tas(("a", 1 if family == Family.EXCLUSIVE else count))} if pinned else None
    found = verdict(workload(ps, topology=topology), nodes)
    candidates = first if pinned else first + second
    possible = brute_force(candidates, family, count, units)
    assert (found.state == State.READY) == possible, (found, candidates)


def test_brute_force_itself() -> None:
    assert brute_force([FREE, FREE], Family.EXCLUSIVE, 2, 0)
    assert not brute_force([FREE, sliced(RESOURCE_MAX_UNITS - 1)], Family.EXCLUSIVE, 2, 0)
    assert brute_force([sliced(800000), sliced(800000)], Family.SLICED, 2, 800000)
    assert not brute_force([sliced(800000, held=10)], Family.SLICED, 1, 1)


def test_table_fixture_is_the_builtin_table(table: ManufacturerTable) -> None:
    assert table == TABLE


def test_a_shared_demand_of_a_billion_pods_misses_at_once() -> None:
    """Once no host has room for a share, none appears later in the same verdict: the fit stops
    there instead of trying every one of the PodSet's Pods."""
    demand = Demand(Family.SHARED, 10**9, holders=((1, 10**9),))
    assert first_miss([], demand) == Miss.CARDS


def test_mixed_slice_sizes_are_placed_together() -> None:
    """The case that broke the greedy order: card A has 20 % and two free slots, card B 30 %
    and one. "big" (1 x 20 %) best-fitted onto A leaves no room for "small" (2 x 10 %); big on B
    and both smalls on A fits, and the verdict must say so."""
    fifth, tenth = RESOURCE_MAX_UNITS // 5, RESOURCE_MAX_UNITS // 10
    a = C(Mode.SLICED, fifth, slices=3, held=1)
    b = C(Mode.SLICED, RESOURCE_MAX_UNITS * 3 // 10, slices=2, held=1)
    found = verdict(
        workload(slices(1, fifth, "big"), slices(2, tenth, "small")), [node("a", [a, b])]
    )
    assert found.state == State.READY, found
    # And where nothing fits, the Retry still names a role.
    tight = C(Mode.SLICED, fifth, slices=2, held=1)
    found = verdict(
        workload(slices(1, fifth, "big"), slices(2, tenth, "small")), [node("a", [tight, b])]
    )
    assert found.state == State.RETRY and "small" in found.message


def _slices_fit(cards: list[C], sizes: list[int]) -> bool:
    """Brute force: can the slices of `sizes` be given cards so that no card exceeds its room
    or its free slots?"""
    for choice in itertools.product(range(len(cards)), repeat=len(sizes)):
        ok = True
        for i, c in enumerate(cards):
            taken = [sizes[n] for n, at in enumerate(choice) if at == i]
            if taken and not (
                c.slices > 0
                and c.mode in (Mode.NONE, Mode.SLICED)
                and len(taken) <= c.slices - c.held
                and sum(taken) <= c.left
            ):
                ok = False
                break
        if ok:
            return True
    return False


@st.composite
def a_slot_card(draw: st.DrawFn) -> C:
    """A card where slots bind as often as room: few slots, some held, room in tenths."""
    slots = draw(st.integers(1, 3))
    held = draw(st.integers(0, slots - 1))
    if held == 0:
        return C(slices=slots)
    return C(Mode.SLICED, draw(st.integers(0, 9)) * 160000, slots, held)


@given(
    cards=st.lists(a_card() | a_slot_card(), min_size=1, max_size=3),
    podsets=st.lists(
        st.tuples(
            st.integers(1, 2), st.sampled_from([160000, 320000, 480000, 800000, RESOURCE_MAX_UNITS])
        ),
        min_size=1,
        max_size=3,
    ),
)
@settings(max_examples=500, deadline=None)
def test_several_podsets_of_mixed_slice_sizes_match_brute_force(
    cards: list[C], podsets: list[tuple[int, int]]
) -> None:
    sets = [slices(pods, units, f"ps{n}") for n, (pods, units) in enumerate(podsets)]
    found = verdict(workload(*sets), [node("a", cards)])
    sizes = [units for pods, units in podsets for _ in range(pods)]
    assert (found.state == State.READY) == _slices_fit(cards, sizes), (found, cards, podsets)
