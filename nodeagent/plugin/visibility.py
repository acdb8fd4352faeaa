"""The visibility plugin of one manufacturer (docs/design/node-agent.md, "Visibility Allocate"): a
container asking for `device.gpustack.ai/<mfr>.visibility` is shown the cards another container of
its own Pod holds (an SSH sidecar seeing its workload's GPUs), and is charged nothing.

Every card advertises 512 tokens, Healthy unless the card itself is: a visibility container
never takes a card from anyone, so holds do not matter here. The token kubelet picked is
ignored; only how many it picked counts, and it must equal the number of cards shown.

Allocate runs: mutex { list Pods, identify the container (skipping ones already granted),
record the grant, pick the owner record (`chain.allocation.visibility_owner`) } then, outside
the mutex, render the vendor response. Any failure after the grant is recorded revokes it, so
kubelet's retry can identify the same container again. No annotation, no ledger units.

Judgment calls:
- A failed identification is `Internal`, as for the workload modes; every refusal about the
  owner is `FailedPrecondition` with a message naming the container and what to change.
- Showing a partition-backed owner needs the Partitioned plugin's capability (`partitions`,
  which names the partition after checking it is live, and the responder's `partition`, which
  shows it as the owner was shown it); without one the call fails closed rather than showing
  the parent card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from chain.allocation import (
    Code,
    Refusal,
    card_tokens,
    plugin_resource,
    shown_partitions,
    token_card,
    visibility_owner,
)
from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import AllocationRecord, Holder, PodAllocations
from chain.manufacturers import Manufacturer
from nodeagent.plugin.allocator import (
    KUBELET_LIST_TIMEOUT_S,
    Advertised,
    Attempt,
    numa_nodes,
    runtime_class,
)
from nodeagent.plugin.grants import DeviceNodes, GrantedCard, Responder, granted_cards
from nodeagent.plugin.identify import (
    Candidate,
    KubeletDevices,
    KubeletPods,
    KubeletView,
    identify,
)
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.mig import Made
from nodeagent.plugin.node import Held, Late, NodeState, Pod, Unidentified
from nodeagent.plugin.responders import responder_for
from nodeagent.plugin.response import ContainerResponse

LivePartition = Callable[[Holder], Made | None]
"""The Partitioned plugin's word on an owner container: its partition when an ownership marker
names it and the instance is still on its card, else None."""


class VisibilityAllocator:
    """The decisions of one manufacturer's visibility plugin."""

    mode = Mode.VISIBILITY

    def __init__(
        self,
        node: NodeState,
        maker: Manufacturer,
        kubelet: KubeletPods | None = None,
        channel: Channel | None = None,
        partitions: LivePartition | None = None,
        nodes: DeviceNodes | None = None,
        responder: Responder | None = None,
    ) -> None:
        self.node = node
        self.maker = maker
        self.resource = plugin_resource(maker, Mode.VISIBILITY)
        self.kubelet = kubelet
        self.channel = channel or Channel(maker.name, maker.runtime_name)
        self.partitions = partitions
        self.nodes = nodes or DeviceNodes()
        self.responder = responder or responder_for(maker.name)
        self._advertised: tuple[DevicesSpec, list[Advertised]] | None = None

    def advertised(self) -> list[Advertised]:
        """512 tokens per card of the manufacturer; only a card's own fault makes them
        Unhealthy. The list follows the spec alone, so it is built once per spec object."""
        spec = self.node.spec()
        if self._advertised is not None and self._advertised[0] is spec:
            return self._advertised[1]
        found: list[Advertised] = []
        for group, card in spec.cards():
            if group.manufacturer != self.maker.name:
                continue
            numa = numa_nodes(card.topology.numa_affinity)
            found.extend(
                Advertised(str(token), not card.status.unhealthy, numa)
                for token in card_tokens(group.id, card, self.mode)
            )
        self._advertised = (spec, found)
        return found

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """One token on each card the owner holds, so that what the kubelet records for the
        sidecar (pod-resources, its checkpoint) names the cards it is shown. Every token shows
        the same thing; no hint when the container or its owner cannot be found yet."""
        kubelet = None
        if self.kubelet is not None:
            kubelet = self.kubelet.devices(self.resource, KUBELET_LIST_TIMEOUT_S)

        def look(held: Held) -> tuple[Sequence[Pod], dict[Holder, AllocationRecord], set[Holder]]:
            return held.listed(), dict(held.reservations), held.granted()

        def read(fresh: bool) -> AllocationRecord | None:
            raw, reservations, granted = self.node.read(look, fresh)
            try:
                found = self._identify(raw, size, kubelet, granted)
            except LookupError as error:
                if not fresh:
                    raise Unidentified(str(error)) from None
                return None
            try:
                _, record = visibility_owner(
                    found.holder,
                    found.allocations,
                    reservations,
                    self.node.spec(),
                    self.maker.name,
                    size,
                )
            except Refusal:
                return None  # Allocate refuses with the reason
            return record

        record = self.node.identified(read)
        if record is None:
            return []
        cards = [c.ref.card for c in record.claims() if c.manufacturer == self.maker.name]
        chosen = list(must)
        for card in cards:
            if any(token_card(text) == card for text in chosen):
                continue
            chosen.extend(
                next(([t] for t in available if t not in chosen and token_card(t) == card), [])
            )
        return chosen if len(chosen) == size else []

    def allocate(self, device_ids: Sequence[str], attempt: Attempt) -> ContainerResponse:
        """The response showing the owner's cards; `Refusal` or `Late` otherwise (then the
        grant is revoked)."""
        if not device_ids:
            raise Refusal(Code.INVALID_ARGUMENT, "no device IDs")
        found, owner = self.node.decide(
            lambda held: self._decide(held, len(device_ids), attempt), max(attempt.left(), 0.0)
        )
        try:
            response = self._render(found, owner)
            if not attempt.commit():
                raise Late("the deadline passed while the grant was answered")
        except Exception as error:
            self.node.revoke(found.holder)
            if isinstance(error, (Late, Refusal)):
                raise
            raise Refusal(Code.INTERNAL, str(error)) from error
        return response

    def _decide(
        self, held: Held, requested: int, attempt: Attempt
    ) -> tuple[Candidate, tuple[Holder, AllocationRecord]]:
        """Identify, grant and pick the owner; called under the node mutex."""
        raw = held.listed()
        held.prune({PodAllocations.from_pod(pod).uid for pod in raw})
        try:
            found = self._identify(raw, requested, self._ask_kubelet(attempt), held.granted())
        except LookupError as error:
            raise Unidentified(str(error)) from None
        held.grant(found.holder)
        try:
            owner = visibility_owner(
                found.holder,
                found.allocations,
                held.reservations,
                self.node.spec(),
                self.maker.name,
                requested,
            )
            if attempt.left() <= 0:
                raise Late("the deadline passed while the owner was looked up")
        except BaseException:
            held.revoke(found.holder)
            raise
        return found, owner

    def _identify(
        self,
        raw: Sequence[Pod],
        requested: int,
        kubelet: KubeletView,
        granted: set[Holder],
    ) -> Candidate:
        """The container asking, skipping any already shown its cards (a visibility grant
        charges nothing and is served to anyone, so only the count narrows it)."""
        return identify(
            raw,
            self.resource,
            requested,
            kubelet,
            served=lambda _: False,
            feasible=lambda _: True,
            skip=lambda candidate: candidate.holder in granted,
        )

    def _ask_kubelet(self, attempt: Attempt) -> Callable[[], KubeletDevices | None]:
        """How to ask kubelet what it holds, within what the attempt has left."""

        def ask() -> KubeletDevices | None:
            if self.kubelet is None:
                return None
            wait = max(min(KUBELET_LIST_TIMEOUT_S, attempt.left()), 0.01)
            return self.kubelet.devices(self.resource, wait)

        return ask

    def _render(
        self, found: Candidate, owner: tuple[Holder, AllocationRecord]
    ) -> ContainerResponse:
        holder, record = owner
        partitioned = shown_partitions(record)
        if partitioned:
            return self._show_partition(holder, partitioned)
        responder = self.responder
        if responder is None:
            raise Refusal(Code.INTERNAL, f"no container response for {self.maker.name}")
        channel = dataclasses.replace(self.channel, pod_runtime_class=runtime_class(found.pod))
        cards = granted_cards(record, self.node.spec(), self.maker.name)
        return responder.shown(cards, Mode.VISIBILITY, channel, self.nodes)

    def _show_partition(self, owner: Holder, cards: tuple[str, ...]) -> ContainerResponse:
        """The owner's partition, never its parent card, and only once the Partitioned plugin
        vouches that the instance is still there; fails closed otherwise."""
        made = self.partitions(owner) if self.partitions is not None else None
        if made is None:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"container {owner.container} holds a partition of card {', '.join(cards)} "
                f"that this node cannot vouch for (no live MIG instance is recorded for it); "
                f"restart the Pod so its partition is made again",
            )
        granted = next(
            (GrantedCard(g, c) for g, c in self.node.spec().cards() if c.id == made.card), None
        )
        try:
            if granted is None or self.responder is None:
                raise ValueError(f"card {made.card} of the owner's partition left this node")
            return self.responder.partition(granted, made, self.nodes)
        except ValueError as error:
            raise Refusal(Code.FAILED_PRECONDITION, str(error)) from error
