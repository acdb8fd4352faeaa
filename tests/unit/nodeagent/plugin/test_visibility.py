"""The visibility plugin (docs/design/node-agent.md, "Visibility Allocate"): a container is shown
the cards another container of its Pod holds, is charged nothing, and is refused whenever the owner
cannot be vouched for."""

from __future__ import annotations

import dataclasses

import pytest

from chain.allocation import (
    Code,
    GrantRequest,
    Refusal,
    card_tokens,
    decide_grant,
    plugin_resource,
    plugin_socket,
)
from chain.devices import DevicesSpec
from chain.ledger import AcceleratorAllocation, DevicesAllocationGroup, DevicesStatus, Mode
from chain.ledger_rebuild import AllocationRecord, Holder, render_allocated
from nodeagent.plugin import protos
from nodeagent.plugin.allocator import Attempt
from nodeagent.plugin.mig import Made
from nodeagent.plugin.node import Late, NodeState
from nodeagent.plugin.response import ContainerResponse
from nodeagent.plugin.visibility import VisibilityAllocator
from tests.unit.nodeagent.plugin.fakes import (
    GPU,
    NVIDIA,
    FakeCluster,
    agent,
    emulated_kubelet,
    t4_spec,
)

VISIBILITY = "device.gpustack.ai/nvidia.visibility"
SPEC = t4_spec()
GROUP = SPEC.groups[0].id
CARDS = [card.id for _, card in SPEC.cards()]
VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def token(card: int, index: int = 0) -> str:
    """A visibility token (the mode's indexes start at 50000000)."""
    return f"{GROUP}:{CARDS[card]}:{50_000_000 + index}"


def held(*cards: int, mode: Mode = Mode.EXCLUSIVE) -> AllocationRecord:
    """The record a workload grant of these cards writes."""
    ids = tuple(f"{GROUP}:{CARDS[n]}:0000" for n in cards)  # the cards' exclusive tokens
    request = GrantRequest(NVIDIA.name, mode, ids, Holder("someone", "main"))
    return decide_grant(SPEC, DevicesStatus(), {}, request, None)


@dataclasses.dataclass
class Node:
    cluster: FakeCluster
    state: NodeState
    plugin: VisibilityAllocator

    def show(self, count: int = 1, seconds: float = 5.0) -> ContainerResponse:
        """One visibility Allocate of `count` tokens (which ones kubelet picked never matters)."""
        return self.plugin.allocate([token(3, 511 - n) for n in range(count)], Attempt(seconds))

    def refused(self, count: int = 1) -> Refusal:
        with pytest.raises(Refusal) as caught:
            self.show(count)
        return caught.value

    def annotate(self, pod: str, records: dict[str, AllocationRecord]) -> None:
        self.cluster.write("default", pod, render_allocated(records))


def node(spec: DevicesSpec = SPEC) -> Node:
    cluster = FakeCluster()
    state = NodeState(lambda: spec, cluster, cluster)
    return Node(cluster, state, VisibilityAllocator(state, NVIDIA))


def sidecar_pod(n: Node, name: str = "p", *owners: str) -> str:
    """A Pod whose `owners` ask for a whole card and whose `ssh` container asks to see them."""
    containers = [(owner, {GPU: "1"}) for owner in owners]
    n.cluster.add(name, *containers, ("ssh", {VISIBILITY: "1"}))
    return f"uid-{name}"


# --- vectors ------------------------------------------------------------------------------------


def test_resource_socket_and_token_pool_vectors() -> None:
    assert plugin_resource(NVIDIA, Mode.VISIBILITY) == VISIBILITY
    assert plugin_socket("nvidia", Mode.VISIBILITY) == "nvidia.visibility.sock"
    plain = next(card for _, card in SPEC.cards())
    mig = next(card for _, card in t4_spec("a100-40gb-mig").cards())
    assert mig.is_partitioned
    pools = [
        [len(card_tokens("g", card, mode)) for mode in Mode if mode != Mode.NONE]
        for card in (plain, mig)
    ]
    # Exclusive, Shared, Sliced, Partitioned, Visibility
    assert pools == [[1, 10, 128, 0, 512], [0, 0, 0, 7, 512]]


def test_every_card_advertises_512_tokens_healthy_unless_the_card_is_not() -> None:
    broken = dataclasses.replace(
        SPEC.groups[0],
        accelerators=tuple(
            dataclasses.replace(
                card, status=dataclasses.replace(card.status, unhealthy=card.id == CARDS[2])
            )
            for card in SPEC.groups[0].accelerators
        ),
    )
    n = node(DevicesSpec((broken,)))
    n.state.restore({Holder("uid-x", "main"): held(0)})  # holds never matter here
    n.cluster.add("x", ("main", {GPU: "1"}))
    n.annotate("x", {"main": held(1)})
    devices = n.plugin.advertised()
    assert len(devices) == 4 * 512
    sick = {d.id.split(":")[1] for d in devices if not d.healthy}
    assert sick == {CARDS[2]}
    assert f"{GROUP}:{CARDS[0]}:50000511" in {d.id for d in devices}


def test_the_hint_names_the_cards_the_sidecar_is_shown() -> None:
    """What the kubelet records for the sidecar (pod-resources, its checkpoint) is the token it
    was hinted: one on each card of its owner, not whichever came first."""
    n = node()
    n.cluster.add("p", ("main", {GPU: "2"}), ("ssh", {VISIBILITY: "2"}))
    n.annotate("p", {"main": held(1, 3)})
    offered = [d.id for d in n.plugin.advertised()]
    hint = n.plugin.preferred(offered, [], 2)
    assert sorted(t.split(":")[1] for t in hint) == sorted([CARDS[1], CARDS[3]])
    # A token the kubelet must keep stands for its card.
    assert sorted(n.plugin.preferred(offered, [token(3, 7)], 2)) == sorted([token(1), token(3, 7)])
    # No owner yet: no hint rather than a wrong one.
    n2 = node()
    n2.cluster.add("q", ("ssh", {VISIBILITY: "1"}))
    assert n2.plugin.preferred(offered, [], 1) == []


# --- the owner ----------------------------------------------------------------------------------


def test_shows_the_owner_cards_and_writes_nothing() -> None:
    n = node()
    n.cluster.add("p", ("main", {GPU: "2"}), ("ssh", {VISIBILITY: "2"}))
    n.annotate("p", {"main": held(1, 2)})
    before = (list(n.cluster.writes), n.state.ledger(), dict(n.state.reserved()))
    response = n.show(2)
    assert response.envs == {VISIBLE: f"{CARDS[1]},{CARDS[2]}"}
    assert (list(n.cluster.writes), n.state.ledger(), dict(n.state.reserved())) == before
    assert n.state.granted() == {Holder("uid-p", "ssh")}


def test_a_reservation_is_the_owner_before_the_annotation() -> None:
    n = node()
    uid = sidecar_pod(n, "p", "a", "b")
    n.annotate("p", {"a": held(1)})
    n.state.restore({Holder(uid, "b"): held(2)})
    assert n.show().envs[VISIBLE] == CARDS[2]


def test_the_lowest_container_name_owns() -> None:
    n = node()
    sidecar_pod(n, "annotated", "z", "b")
    n.annotate("annotated", {"z": held(0), "b": held(3)})
    assert n.show().envs[VISIBLE] == CARDS[3]
    uid = sidecar_pod(n, "reserved", "m", "c")
    n.state.restore({Holder(uid, "m"): held(0)})
    n.state.restore({Holder(uid, "c"): held(1)})
    assert n.show().envs[VISIBLE] == CARDS[1]


def test_no_owner_fails_closed_with_a_message_a_user_can_act_on() -> None:
    n = node()
    sidecar_pod(n, "p", "main")
    refusal = n.refused()
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message == (
        "container ssh asks to see its Pod's nvidia cards, but no other container of the Pod "
        "holds any; give another container a card resource"
    )
    assert n.state.granted() == set()


def test_an_unreadable_annotation_fails_closed() -> None:
    n = node()
    sidecar_pod(n, "p", "main")
    n.cluster.write("default", "p", "{not json")
    refusal = n.refused()
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message.startswith("container ssh cannot be shown its Pod's nvidia cards: ")


def test_a_vanished_owner_card_fails_closed() -> None:
    n = node()
    sidecar_pod(n, "p", "main")
    n.annotate("p", {"main": held(1)})
    n.state.spec = lambda: DevicesSpec(t4_spec("l4x2").groups)  # the T4s were swapped out
    refusal = n.refused()
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message == f"card {CARDS[1]} of container main is no longer on this node"


def test_a_count_mismatch_fails_closed() -> None:
    n = node()
    sidecar_pod(n, "p", "main")
    n.annotate("p", {"main": held(0, 1)})
    refusal = n.refused(1)
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message == (
        "container main holds 2 nvidia cards but ssh asks to see 1; "
        "ask for as many visibility devices as it holds cards"
    )


def test_a_partition_owner_fails_closed_until_partitions_can_be_shown() -> None:
    mig = DevicesSpec(t4_spec("a100-40gb-mig").groups)
    group, card = next(iter(mig.cards()))
    row = AcceleratorAllocation(
        id=card.id,
        index=card.index,
        mode=Mode.PARTITIONED,
        allocated=200000,
        allocated_physical_profile="1g.5gb",
    )
    record = AllocationRecord(
        DevicesStatus((DevicesAllocationGroup(group.id, "nvidia", (row,)),)),
        (f"{group.id}:{card.id}:0000",),
    )
    n = node(mig)
    sidecar_pod(n, "p", "main")
    n.annotate("p", {"main": record})
    refusal = n.refused()
    assert refusal.code == Code.FAILED_PRECONDITION
    assert "holds a partition of card" in refusal.message
    assert n.state.granted() == set()
    asked: list[Holder] = []

    def live(owner: Holder) -> Made | None:
        asked.append(owner)
        return None if len(asked) == 1 else Made("MIG-0", False, card.id, 1, 0)

    n.plugin.partitions = live
    refusal = n.refused()  # no live instance recorded: closed, and the grant revoked
    assert refusal.code == Code.FAILED_PRECONDITION
    assert refusal.message == (
        f"container main holds a partition of card {card.id} that this node cannot vouch for "
        "(no live MIG instance is recorded for it); restart the Pod so its partition is made again"
    )
    assert n.state.granted() == set()
    assert n.show().envs == {VISIBLE: "MIG-0"}  # the partition, never the parent card
    assert asked == [Holder("uid-p", "main"), Holder("uid-p", "main")]


# --- grants ---------------------------------------------------------------------------------------


def test_a_grant_is_not_handed_twice_to_the_same_container() -> None:
    n = node()
    n.cluster.add(
        "p", ("main", {GPU: "1"}), ("ssh-a", {VISIBILITY: "1"}), ("ssh-b", {VISIBILITY: "1"})
    )
    n.annotate("p", {"main": held(2)})
    for _ in range(2):
        assert n.show().envs[VISIBLE] == CARDS[2]
    assert n.state.granted() == {Holder("uid-p", "ssh-a"), Holder("uid-p", "ssh-b")}
    with pytest.raises(Refusal) as caught:  # both are served: nobody is left to identify
        n.show()
    assert caught.value.code == Code.INTERNAL
    n.cluster.remove("p")
    with pytest.raises(Refusal):
        n.show()
    assert n.state.granted() == set()  # the Pod is gone, so are its grants


def test_a_failure_revokes_the_grant() -> None:
    n = node()
    uid = sidecar_pod(n, "p", "main")
    assert n.refused().code == Code.FAILED_PRECONDITION  # the owner is not granted yet
    assert n.state.granted() == set()
    n.state.restore({Holder(uid, "main"): held(0)})
    with pytest.raises(Late):  # the answer comes too late for kubelet
        n.show(seconds=0.0)
    assert n.state.granted() == set()
    assert n.show().envs[VISIBLE] == CARDS[0]  # kubelet's retry finds the same container


# --- over gRPC, through the production wiring -----------------------------------------------------


def test_kubelet_shows_a_sidecar_the_card_of_its_workload() -> None:
    cluster = FakeCluster()
    with emulated_kubelet() as kubelet, agent(kubelet, cluster, SPEC):
        devices = kubelet.wait_devices(VISIBILITY, lambda d: len(d) == 4 * 512)
        assert set(devices.values()) == {protos.HEALTHY}
        assert (VISIBILITY, "nvidia.visibility.sock") in kubelet.registrations
        kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        pod = cluster.add("dev", ("main", {GPU: "1"}), ("ssh", {VISIBILITY: "1"}))
        kubelet.admit(pod)
        shown = {(c, r): response.envs[VISIBLE] for c, r, response in kubelet.responses}
        assert shown[("ssh", VISIBILITY)] == shown[("main", GPU)]
        assert shown[("main", GPU)] in CARDS
        written = [value for _, name, value in cluster.writes if name == "dev"]
        assert len(written) == 1 and '"ssh"' not in written[0]  # only the owner's grant
        assert kubelet.wait_devices(VISIBILITY, lambda d: len(d) == 2048) == devices
