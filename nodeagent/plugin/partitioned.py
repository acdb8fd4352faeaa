"""The Partitioned (MIG) plugin's decisions (docs/design/node-agent.md, "Partitioned (MIG)",
"Allocate").

Allocate: mutex { list Pods, identify the container, pick profile/card/slot and check modes
(`decide_partition`), reserve } then, outside the mutex, make the partition (per-card lock),
build the manufacturer's answer for it (`Responder.partition`: NVIDIA's
`NVIDIA_VISIBLE_DEVICES=<MIG UUID>`, T-Head's capability nodes, Hygon's registry file and
`DMI_MIG_VISIBLE_DEVICE`), record the grant with the MIG UUID on the Pod, and answer.
Each step undoes the ones before it when it fails: a failed partition releases the reservation;
a failed annotation write unmakes the partition it made and releases; a late answer restores
the annotation, unmakes and releases. A retry of a recorded grant finds its instance again
(ownership marker) and is never unmade by its own failure.

Making a MIG instance takes the driver a second or more, so this plugin answers under a longer
deadline than the others (`PARTITION_DEADLINE_S`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from chain.allocation import Code, Refusal, token_card
from chain.families import PARTITIONED_UNITS
from chain.ledger import DevicesStatus, Mode
from chain.ledger_rebuild import (
    AllocationRecord,
    CardRef,
    Claim,
    Holder,
    PodAllocations,
    charging_reservations,
    node_holdings,
    rebuild_status,
)
from chain.manufacturers import Manufacturer
from chain.partitions import Placement, vendor_profile_name
from nodeagent.plugin.allocator import (
    DEFAULT_DEADLINE_S,
    Advertised,
    Allocator,
    Attempt,
    Recording,
)
from nodeagent.plugin.grants import DeviceNodes, GrantedCard, Responder
from nodeagent.plugin.identify import Candidate, KubeletPods, container_limit, identify
from nodeagent.plugin.mig import Partitioner, PartitionError
from nodeagent.plugin.node import Held, Late, NodeState, Pod, Unidentified
from nodeagent.plugin.partition_grant import (
    PartitionGrant,
    PartitionRequest,
    choose_site,
    decide_partition,
    occupied_placements,
    partition_health,
    prior_partition,
    requested_profile,
    with_partition_id,
)
from nodeagent.plugin.responders import responder_for
from nodeagent.plugin.response import ContainerResponse

log = logging.getLogger(__name__)

PARTITION_DEADLINE_S = 20.0
Occupied = dict[CardRef, list[Placement]]
"""The slots taken on each partitioned card."""
Reservations = dict[Holder, AllocationRecord]
Served = Callable[[Candidate], bool]


def _any(_candidate: Candidate) -> bool:
    return True


def _limit_keys(container: Mapping[str, object]) -> list[str]:
    """The container's limit keys with a positive whole value."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    if not isinstance(limits, Mapping):
        return []
    return [str(key) for key in limits if container_limit(container, str(key)) > 0]


def _holdings_status(
    node: NodeState,
    pods: Sequence[PodAllocations],
    reservations: Mapping[Holder, AllocationRecord],
) -> tuple[DevicesStatus, dict[Holder, AllocationRecord]]:
    """The ledger with this process's reservations folded in (a partition being made holds its
    slot before its annotation lands), and the holdings it adds up."""
    holdings = node_holdings(pods, reservations, node.release_terminated)
    by_pod: dict[str, dict[str, AllocationRecord]] = {}
    for holder, record in holdings.items():
        by_pod.setdefault(holder.pod_uid, {})[holder.container] = record
    folded = [PodAllocations(uid, records=records) for uid, records in by_pod.items()]
    return rebuild_status(node.spec(), folded, node.release_terminated).status, holdings


class PartitionedAllocator(Allocator):
    """The decisions of one manufacturer's Partitioned plugin."""

    MODES = (Mode.PARTITIONED,)

    def __init__(
        self,
        node: NodeState,
        maker: Manufacturer,
        partitioner: Partitioner,
        kubelet: KubeletPods | None = None,
        responder: Responder | None = None,
        nodes: DeviceNodes | None = None,
    ) -> None:
        super().__init__(node, maker, Mode.PARTITIONED, kubelet)
        self.partitioner = partitioner
        self.responder = responder or responder_for(maker.name)
        self.nodes = nodes or DeviceNodes()

    # --- ListAndWatch -----------------------------------------------------------------------

    def advertised(self) -> list[Advertised]:
        """Every partitioned token; `room` of them healthy, the held ones first
        (docs/design/node-agent.md, "Device-plugin resources")."""
        spec = self.node.spec()
        pods, reservations = self.node.live()
        status, holdings = _holdings_status(self.node, pods, reservations)
        held = [
            text
            for record in holdings.values()
            if any(c.row.mode == Mode.PARTITIONED for c in record.claims())
            for text in record.device_ids
        ]
        return [
            Advertised(str(token), healthy)
            for token, healthy in partition_health(spec, self.maker.name, status, held)
        ]

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        """Tokens of the card the partition will be cut on, so that what the kubelet records
        (its checkpoint, pod-resources, `allocatedResourcesStatus`) names the card that holds
        the instance. Allocate picks the site the same way (the prior grant's, else the fullest
        card with a free legal slot); no hint when the Pod or a site cannot be found."""
        kubelet = self._kubelet_view(DEFAULT_DEADLINE_S)

        def look(held: Held) -> tuple[Sequence[Pod], Occupied, Reservations, Served]:
            raw = held.listed()
            pods = [PodAllocations.from_pod(pod) for pod in raw]
            holdings = node_holdings(pods, held.reservations, self.node.release_terminated)
            occupied = occupied_placements(holdings, self.maker.name)
            return raw, occupied, dict(held.reservations), self._served_test(held)

        def read(fresh: bool) -> tuple[Candidate | None, Occupied, Claim | None]:
            raw, occupied, reservations, served = self.node.read(look, fresh)
            try:
                found = identify(raw, self.resource, size, kubelet, served, _any)
            except LookupError as error:
                if not fresh:
                    raise Unidentified(str(error)) from None
                return None, occupied, None
            prior = prior_partition(
                found.holder, reservations, found.allocations.records, self.maker.name
            )
            return found, occupied, prior

        found, occupied, prior = self.node.identified(read)
        if found is None:
            return []
        try:
            profile = requested_profile(self.maker, _limit_keys(found.container))
            site = choose_site(self.node.spec(), self.maker.name, profile, occupied, prior)
        except Refusal:
            return []  # Allocate refuses with the reason
        on_card = [t for t in available if t not in must and token_card(t) == site.card.id]
        chosen = [*must, *on_card][:size]
        return chosen if len(chosen) == size else []

    # --- Allocate ---------------------------------------------------------------------------

    def allocate(self, device_ids: Sequence[str], attempt: Attempt) -> ContainerResponse:
        found, grant, prior, live = self._locked(
            device_ids, attempt, lambda held: self._decide_partition(held, device_ids, attempt)
        )
        holder = found.holder
        site = grant.site
        try:
            made = self.partitioner.create(
                site.card.id,
                vendor_profile_name(self.maker.name, site.profile.name),
                site.placement,
                (holder.pod_uid, holder.container),
                site.group.memory,
                live,
            )
        except PartitionError as error:
            self.node.rollback(holder, prior)
            raise Refusal(Code.INTERNAL, str(error)) from error

        def unmake() -> None:
            if not made.new:
                return  # a retry's instance belongs to the grant already recorded
            try:
                self.partitioner.destroy(site.card.id, site.placement)
            except PartitionError:  # its marker stays: the reclaimer takes it once the Pod goes
                log.exception("cannot unmake the partition of a failed grant")

        try:
            if self.responder is None:
                raise ValueError(f"no container response for {self.maker.name}")
            response = self.responder.partition(
                GrantedCard(site.group, site.card), made, self.nodes
            )
        except ValueError as error:  # the partition cannot be handed over: fail closed
            try:
                unmake()
            finally:
                self.node.rollback(holder, prior)
            raise Refusal(Code.FAILED_PRECONDITION, str(error)) from error
        record = with_partition_id(grant.record, made.mig_uuid)
        self.node.reserve(holder, record)
        recording = Recording(self.node, found, prior)
        recording.record(record, attempt, undo=unmake)
        return recording.answer(attempt, lambda: response, undo=unmake)

    def _decide_partition(
        self, held: Held, device_ids: Sequence[str], attempt: Attempt
    ) -> tuple[Candidate, PartitionGrant, AllocationRecord | None, frozenset[str]]:
        node = self.node
        raw = held.listed()
        pods = [PodAllocations.from_pod(pod) for pod in raw]
        held.prune({pod.uid for pod in pods})
        spec = node.spec()
        status = node.ledger(pods)
        holdings = node_holdings(pods, held.reservations, node.release_terminated)
        occupied = occupied_placements(holdings, self.maker.name)

        def feasible(candidate: Candidate) -> bool:
            try:
                profile = requested_profile(self.maker, _limit_keys(candidate.container))
                choose_site(spec, self.maker.name, profile, occupied)
            except Refusal:
                return False
            return True

        try:
            found = identify(
                raw,
                self.resource,
                len(device_ids),
                lambda: self._kubelet_view(attempt.left()),
                self._served_test(held),
                feasible,
                offered=device_ids,
            )
        except LookupError as error:
            raise Unidentified(str(error)) from None
        if found.allocations.problem:
            raise Refusal(Code.INTERNAL, found.allocations.problem)
        prior_claim = prior_partition(
            found.holder, held.reservations, found.allocations.records, self.maker.name
        )
        mine = {h: r for h, r in holdings.items() if h != found.holder}
        request = PartitionRequest(
            self.maker.name,
            tuple(device_ids),
            found.holder,
            requested_profile(self.maker, _limit_keys(found.container)),
            container_limit(found.container, self.maker.resource_name + PARTITIONED_UNITS),
        )
        grant = decide_partition(
            spec,
            status,
            charging_reservations(pods, held.reservations, node.release_terminated),
            occupied_placements(mine, self.maker.name),
            prior_claim,
            request,
        )
        if attempt.left() <= 0:
            raise Late("the deadline passed while the grant was decided")
        prior = held.reserve(found.holder, grant.record)
        return found, grant, prior, frozenset(pod.uid for pod in pods)
