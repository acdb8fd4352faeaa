"""An agent restart rebuilds the same ledger and the same reservations (issue #6).

The plugin keeps its reservations in memory; the Pods' annotations are what survives it. A first
agent admits a mix of Exclusive, Shared, Sliced and Visibility grants through a kubelet emulator,
one Pod left Pending with its grant already written. A second agent over the same kubelet and the
same Pods must then see exactly what the first one held: the same ledger, the same holders, the
same health per token; a kubelet replaying the pending Pod's Allocate gets the same cards at no
extra charge; and no new Allocate can take what the first agent granted. A Pod whose two
containers each hold a whole card is replayed container by container: each keeps its own card
(this once moved the first container's record onto the second one's card).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from chain.ledger import Mode
from chain.ledger_rebuild import AllocationRecord, PodAllocations, node_holdings, render_allocated
from chain.units import RESOURCE_MAX_UNITS
from nodeagent.plugin import protos
from nodeagent.plugin.identify import identify
from nodeagent.plugin.node import NodeState
from testbed.kubelet import AdmissionError, Endpoint, KubeletEmulator
from tests.unit.nodeagent.plugin.fakes import (
    GPU,
    SHARED,
    SLICED,
    FakeCluster,
    agent,
    emulated_kubelet,
    t4_spec,
)

grpc = protos.grpc_runtime()
SPEC = t4_spec()
GROUP = SPEC.groups[0].id
CARDS = [card.id for _, card in SPEC.cards()]
VISIBILITY = "device.gpustack.ai/nvidia.visibility"
RESOURCES = (GPU, SHARED, SLICED, VISIBILITY)
VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def sliced(units: int) -> dict[str, str]:
    return {SLICED: "1", SLICED + ".units": str(units), SLICED + ".memory-percentage": "50"}


def allocate(kubelet: KubeletEmulator, resource: str, ids: list[str]) -> Any:
    """An Allocate call as kubelet sends it, bypassing its own token bookkeeping."""
    api = protos.deviceplugin()
    answer = kubelet.wait_endpoint(resource).stub.Allocate(
        api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]),
        timeout=10,
    )
    return answer.container_responses[0]


def listed(kubelet: KubeletEmulator) -> dict[str, dict[str, str]]:
    """Every resource's token health, once each plugin has listed."""
    return {r: kubelet.wait_devices(r, lambda d: len(d) > 0) for r in RESOURCES}


def reconnected(kubelet: KubeletEmulator, before: dict[str, Endpoint]) -> None:
    """Wait until kubelet dialled every plugin the restarted agent registered."""
    deadline = time.monotonic() + 10
    while any(kubelet.endpoints.get(r) is before[r] for r in RESOURCES):
        assert time.monotonic() < deadline, "the restarted agent never registered"
        time.sleep(0.02)


def holdings(cluster: FakeCluster, node: NodeState) -> dict[Any, Any]:
    pods = [PodAllocations.from_pod(pod) for pod in cluster.pods()]
    return node_holdings(pods, node.reserved(), node.release_terminated)


def admit_mix(kubelet: KubeletEmulator, cluster: FakeCluster) -> dict[tuple[str, str], Any]:
    """The first agent's work; every Pod but `pending` then runs. Returns the responses."""
    pods = [
        cluster.add("whole", ("main", {GPU: "1"})),
        cluster.add("share", ("main", {SHARED: "1"})),
        cluster.add("slice", ("main", sliced(800000))),
        cluster.add("pending", ("main", sliced(800000)), ("ssh", {VISIBILITY: "1"})),
        cluster.add("dev", ("main", {GPU: "1"}), ("ssh", {VISIBILITY: "1"})),
    ]
    for pod in pods:
        kubelet.admit(pod)
        name = pod["metadata"]["name"]
        if name != "pending":
            cluster.set_phase(name, "Running")
    names = [pod["metadata"]["name"] for pod in pods for _ in pod["spec"]["containers"]]
    return {
        (name, container): response
        for name, (container, _, response) in zip(names, kubelet.responses, strict=True)
    }


def test_a_restarted_agent_sees_what_the_old_one_granted() -> None:
    cluster = FakeCluster()
    with emulated_kubelet() as kubelet:
        with agent(kubelet, cluster, SPEC) as old:
            listed(kubelet)
            answers = admit_mix(kubelet, cluster)
            shown = {key: answer.envs[VISIBLE] for key, answer in answers.items()}
            assert [shown[(pod, "main")] for pod in ("whole", "share", "slice", "dev")] == CARDS
            assert shown[("pending", "main")] == CARDS[2]  # packed onto the slice that fits
            assert shown[("pending", "ssh")] == CARDS[2]
            assert shown[("dev", "ssh")] == CARDS[3]
            old_ledger = old.ledger()
            old_holdings = holdings(cluster, old)
            old_reservations = dict(old.reserved())
            old_health = listed(kubelet)
            endpoints = dict(kubelet.endpoints)
        annotations = {name: cluster.annotation(name) for name in ("pending", "dev")}
        assert len(old_reservations) == 5  # one per workload container; visibility reserves none

        with agent(kubelet, cluster, SPEC) as new:
            reconnected(kubelet, endpoints)
            for resource in RESOURCES:  # the same holds, so the same health per token
                kubelet.wait_devices(resource, lambda d, r=resource: d == old_health[r])
            assert new.reserved() == {}
            assert new.ledger() == old_ledger
            assert holdings(cluster, new) == old_holdings
            for holder, record in old_reservations.items():
                assert holdings(cluster, new)[holder] == record
            row = old_ledger.row("nvidia", GROUP, CARDS[2])
            assert row is not None and (row.mode, row.remaining) == (Mode.SLICED, 0)

            # Kubelet replays the pending Pod's Allocates: the same cards, no second charge.
            held = kubelet.known[("default", "pending")]
            sidecar = allocate(kubelet, VISIBILITY, held["ssh"][VISIBILITY])
            assert sidecar.envs[VISIBLE] == CARDS[2]  # the owner, read from the annotation
            replay = allocate(kubelet, SLICED, held["main"][SLICED])
            assert dict(replay.envs) == dict(answers[("pending", "main")].envs)
            assert {name: cluster.annotation(name) for name in annotations} == annotations
            assert new.ledger() == old_ledger

            # No new Allocate takes what the old agent granted.
            cluster.add("late", ("main", sliced(800000)))
            with pytest.raises(grpc.RpcError) as caught:
                allocate(kubelet, SLICED, [f"{GROUP}:{CARDS[2]}:0005"])
            assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert caught.value.details() == (
                f"card {CARDS[2]} has 0 of {RESOURCE_MAX_UNITS} units free"
                " and the slice needs 800000"
            )
            cluster.add("share-whole", ("main", {SHARED: "1"}))
            with pytest.raises(grpc.RpcError) as caught:
                allocate(kubelet, SHARED, [f"{GROUP}:{CARDS[0]}:0000"])
            assert caught.value.details() == (
                f"card {CARDS[0]} is held in Exclusive mode, cannot allocate it in Shared mode"
            )
            cluster.remove("share-whole")
            assert cluster.annotation("late") == ""
            with pytest.raises(AdmissionError) as refused:
                kubelet.admit(cluster.add("whole-2", ("main", {GPU: "1"})))
            assert refused.value.code == "Insufficient"  # both whole cards are taken
            kubelet.admit(cluster.add("share-2", ("main", {SHARED: "1"})))
            assert kubelet.responses[-1][2].envs[VISIBLE] == CARDS[1]  # beside the old share
            share_row = new.ledger().row("nvidia", GROUP, CARDS[1])
            assert (
                share_row is not None
                and share_row.remaining == RESOURCE_MAX_UNITS - 2 * RESOURCE_MAX_UNITS // 10
            )
            assert new.ledger().row("nvidia", GROUP, CARDS[2]) == row


def test_a_replay_of_every_container_keeps_each_one_on_its_cards() -> None:
    cluster = FakeCluster()
    with emulated_kubelet() as kubelet:
        with agent(kubelet, cluster, SPEC):
            listed(kubelet)
            kubelet.admit(cluster.add("pair", ("a", {GPU: "1"}), ("b", {GPU: "1"})))
            endpoints = dict(kubelet.endpoints)
        before = cluster.annotation("pair")
        with agent(kubelet, cluster, SPEC) as new:
            reconnected(kubelet, endpoints)
            ledger = new.ledger()
            held = kubelet.known[("default", "pair")]
            for container in ("a", "b"):
                answer = allocate(kubelet, GPU, held[container][GPU])
                assert answer.envs[VISIBLE] == held[container][GPU][0].split(":")[1]
            assert cluster.annotation("pair") == before
            assert new.ledger() == ledger


def test_identify_replays_the_container_whose_record_names_the_offered_ids() -> None:
    cluster = FakeCluster()
    cluster.add("pair", ("a", {GPU: "1"}), ("b", {GPU: "1"}))
    ids = {name: [f"{GROUP}:{CARDS[n]}:0000"] for n, name in enumerate("ab")}
    records = {name: AllocationRecord(device_ids=tuple(ids[name])) for name in "ab"}
    cluster.write("default", "pair", render_allocated(records))

    def pick(offered: list[str]) -> str:
        found = identify(
            cluster.pods(), GPU, 1, None, lambda _: True, lambda _: True, offered=offered
        )
        return found.holder.container

    assert pick(ids["b"]) == "b"
    assert pick(ids["a"]) == "a"
    assert pick([f"{GROUP}:{CARDS[3]}:0000"]) == "a"  # no record matches: the oldest, as before
