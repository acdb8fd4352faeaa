"""Allocate, GetPreferredAllocation and the advertised token list of one (manufacturer, mode) plugin
(docs/design/node-agent.md, "Device-plugin resources", "Allocate"), over the node's shared
`NodeState`.

Allocate runs: mutex { list Pods, identify the container, cross-mode check + sliced gate
(`decide_grant`), reserve } then, outside the mutex, persist the annotation and render the
container response. Kubelet sets no deadline and admits Pods one at a time, so a hung call would
stall the whole node: every call carries a `Deadline`, and an `Attempt` decides once whether the
answer is delivered or abandoned; a grant finished after its caller gave up is rolled back.

Judgment calls:
- GetPreferredAllocation does not wait for an unidentified Pod (upstream retries 5 x 3 s): a hint
  is optional and waiting blocks admission; without a Pod it packs without size or preference.
  It ranks already-served containers last, as Allocate does (upstream does not skip them): the
  oldest pending Pod is often one whose grant is written but whose phase has not moved yet.
- A failed identification is `Internal`; kubelet fails the Pod either way.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from chain.allocation import (
    Code,
    DeviceToken,
    GrantRequest,
    PreferenceRequest,
    Refusal,
    card_tokens,
    conflicting_mode,
    decide_grant,
    plugin_resource,
    preferred_allocation,
    preferred_cards,
    sliced_occupancy,
    sliced_room,
    token_card,
    units_per_token,
)
from chain.devices import DevicesSpec
from chain.families import SLICED_MEMORY_MIB, SLICED_MEMORY_PERCENTAGE, SLICED_UNITS
from chain.ledger import DevicesStatus, Mode
from chain.ledger_rebuild import (
    ALLOCATED_ANNOTATION,
    AllocationRecord,
    CardRef,
    Holder,
    PodAllocations,
    charging_reservations,
    node_holdings,
    parse_allocated,
    render_allocated,
)
from chain.manufacturers import Manufacturer
from chain.units import RESOURCE_MAX_UNITS, memory_mib_to_units, memory_percentage_to_units
from nodeagent.detect.sysfs import listed_numbers
from nodeagent.plugin.grants import (
    OPERATOR_LIB_DIR,
    OPERATOR_PODS_DIR,
    DeviceNodes,
    Responder,
    SlicedLimits,
    SliceRequest,
    declared_env,
    granted_cards,
    with_rdma,
)
from nodeagent.plugin.identify import (
    Candidate,
    KubeletDevices,
    KubeletPods,
    container_limit,
    identify,
)
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.node import (
    Held,
    Late,
    NodeState,
    Pod,
    RefusedFor,
    Unidentified,
    pod_annotations,
)
from nodeagent.plugin.responders import responder_for
from nodeagent.plugin.response import ContainerResponse
from nodeagent.topology.choice import UNKNOWN_LINKS, LinksSource, best_connected, current_links

T = TypeVar("T")
log = logging.getLogger(__name__)
Occupancy = dict[CardRef, dict[Holder, int]]
"""Per sliced card, the units each holder takes."""
NodeView = tuple[DevicesSpec, DevicesStatus, Occupancy, tuple[AllocationRecord, ...]]
"""The node as a hint reads it: its spec, its ledger, the sliced cards' occupancy, and this
process's reservations (grants the ledger may not show yet)."""

DEFAULT_DEADLINE_S = 0.8
KUBELET_LIST_TIMEOUT_S = 2.0


class Attempt:
    """Delivered or abandoned, decided once (the worker and the waiting server race)."""

    def __init__(self, seconds: float = DEFAULT_DEADLINE_S) -> None:
        self.end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._state = "running"

    def left(self) -> float:
        return self.end - time.monotonic()

    def _settle(self, to: str) -> bool:
        with self._lock:
            if self._state != "running":
                return False
            self._state = to
            return True

    def commit(self) -> bool:
        return self.left() > 0 and self._settle("delivered")

    def abandon(self) -> bool:
        return self._settle("abandoned")


def _nothing() -> None:
    """No step of the caller's own to undo."""


class Recording:
    """A grant reserved under the node mutex, on its way to its Pod's annotation and to kubelet:
    the tail every workload plugin shares (`Allocator`, `PartitionedAllocator`). `record` writes
    the annotation, `answer` renders the response and delivers it; each undoes what came before
    it when it fails (`undo`: the caller's own step, e.g. a partition it made), and a grant
    finished after its caller gave up is rolled back (`Late`)."""

    def __init__(self, node: NodeState, found: Candidate, prior: AllocationRecord | None) -> None:
        self.node = node
        self.found = found
        self.holder = found.holder
        self.prior = prior
        """The holder's reservation before this grant (a rollback restores it)."""
        self.before = pod_annotations(found.pod).get(ALLOCATED_ANNOTATION, "")
        """The Pod's annotation as listed (a rollback writes it back)."""

    def record(
        self, record: AllocationRecord, attempt: Attempt, undo: Callable[[], None] = _nothing
    ) -> None:
        """Write the Pod's annotation with `record`; on failure undo, release the reservation,
        and raise `Late` or an Internal `Refusal`."""
        meta = self.found.allocations
        try:
            if attempt.left() <= 0:
                raise Late("the deadline passed before the grant was recorded")
            self.node.writer.write(meta.namespace, meta.name, self._merged(record))
        except Exception as error:
            try:
                undo()
            finally:
                self.node.rollback(self.holder, self.prior)
            if isinstance(error, Late):
                raise
            raise Refusal(Code.INTERNAL, f"cannot record the grant: {error}") from error

    def answer(
        self,
        attempt: Attempt,
        render: Callable[[], ContainerResponse],
        undo: Callable[[], None] = _nothing,
    ) -> ContainerResponse:
        """The rendered response, delivered if the attempt is still on; otherwise the recorded
        grant is given back (annotation and reservation), then `undo`, and `Late` or a
        `Refusal` raised."""
        try:
            response = render()
            if not attempt.commit():
                raise Late("the deadline passed while the grant was answered")
        except Exception as error:
            try:
                self._give_back()
            finally:
                undo()
            if isinstance(error, (Late, Refusal)):
                raise
            raise Refusal(Code.INTERNAL, str(error)) from error
        return response

    def _merged(self, record: AllocationRecord) -> str:
        """The Pod's annotation: what it holds, this process's reservations for its other
        containers, and this container's new entry (overwriting makes a retry idempotent)."""
        records = dict(self.found.allocations.records)
        records.update(self.node.reserved_in(self.found.allocations.uid))
        records[self.holder.container] = record
        return render_allocated(records)

    def _give_back(self) -> None:
        meta = self.found.allocations
        try:
            self.node.writer.write(meta.namespace, meta.name, self.before)
        except Exception as error:
            # The kubelet will not start this container, so a record left behind would charge
            # its card for nothing: retried until it lands or the Pod is gone (upstream).
            where = f"{meta.namespace}/{meta.name}"
            log.warning("giving back %s %s failed (%s); retrying", where, self.holder, error)
            self._retry_give_back()
        finally:
            self.node.rollback(self.holder, self.prior)

    def _retry_give_back(self, first_delay: float = 0.5, longest: float = 10.0) -> None:
        """Put the container's entry back as it was before the refused grant, from a thread,
        until it lands, the Pod is gone, or a later grant holds the container (whose record then
        stands). Only this container's entry is restored: others may have been granted since."""
        node, holder, prior = self.node, self.holder, self.prior
        namespace, name = self.found.allocations.namespace, self.found.allocations.name
        kept = parse_allocated(self.before).get(holder.container) if self.before else None

        def settled() -> str | None:
            """The annotation to write now, or None when nothing is left to give back."""
            if node.reservation(holder) not in (None, prior):
                return None
            listed = [PodAllocations.from_pod(raw) for raw in node.listed(fresh=True)]
            pod = next((p for p in listed if p.uid == holder.pod_uid), None)
            if pod is None:
                return None
            records = dict(pod.records)
            if records.get(holder.container) == kept:
                return None
            if kept is None:
                records.pop(holder.container, None)
            else:
                records[holder.container] = kept
            return render_allocated(records)

        def retry() -> None:
            delay = first_delay
            while True:
                time.sleep(delay)
                try:
                    value = settled()
                    if value is None:
                        return
                    node.writer.write(namespace, name, value)
                    log.info("gave back %s/%s %s", namespace, name, holder)
                    node.notify()
                    return
                except Exception as error:
                    log.warning("giving back %s/%s %s: %s", namespace, name, holder, error)
                delay = min(longest, delay * 2)

        threading.Thread(target=retry, name=f"give-back-{name}", daemon=True).start()


@dataclasses.dataclass(frozen=True)
class Advertised:
    """One ListAndWatch device."""

    id: str
    healthy: bool
    numa: tuple[int, ...] = ()


def numa_nodes(ranges: str) -> tuple[int, ...]:
    """`0-1,3` -> (0, 1, 3); junk is ignored (topology is only a hint)."""
    return listed_numbers(ranges)


def _make_dirs(path: str) -> None:
    os.makedirs(path, mode=0o777, exist_ok=True)
    os.chmod(path, 0o777)  # makedirs honours the umask; HAMi-core needs any user to write


class Allocator:
    """The decisions of one (manufacturer, mode) plugin."""

    MODES: tuple[Mode, ...] = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED)
    """The modes this class decides (subclasses serve the others)."""

    def __init__(
        self,
        node: NodeState,
        maker: Manufacturer,
        mode: Mode,
        kubelet: KubeletPods | None = None,
        channel: Channel | None = None,
        make_dirs: Callable[[str], None] = _make_dirs,
        pods_dir: str = OPERATOR_PODS_DIR,
        nodes: DeviceNodes | None = None,
        responder: Responder | None = None,
        lib_dir: str = OPERATOR_LIB_DIR,
        links: LinksSource = UNKNOWN_LINKS,
    ) -> None:
        """`lib_dir`: where a sliced grant's isolation libraries are staged on the host (the
        directory the agent's isolation check reads, so the two agree). `links`: how the node's
        cards and RDMA network cards connect; a multi-card hint names the best-connected set
        and a grant names its cards' nearest RDMA devices (`NCCL_IB_HCA`). Unknown: plain
        packing, no NIC named. A callable is read at each hint and grant."""
        if mode not in self.MODES:
            raise ValueError(f"{mode} plugins are not served yet")
        self.node = node
        self.maker = maker
        self.mode = mode
        self.resource = plugin_resource(maker, mode)
        self.kubelet = kubelet
        self.channel = channel or Channel(maker.name, maker.runtime_name)
        self.make_dirs = make_dirs
        self.pods_dir = pods_dir
        self.lib_dir = lib_dir
        self.nodes = nodes or DeviceNodes()
        self.responder = responder or responder_for(maker.name)
        self.links = links

    # --- ListAndWatch -----------------------------------------------------------------------

    def advertised(self) -> list[Advertised]:
        """Every token of the mode; a card held in another mode stays listed but Unhealthy."""
        spec = self.node.spec()
        pods, reserved = self.node.live()
        charging = charging_reservations(pods, reserved, self.node.release_terminated)
        reservations = list(charging.values())
        status = self.node.ledger(pods)
        found: list[Advertised] = []
        for group, card in spec.cards():
            if group.manufacturer != self.maker.name:
                continue
            ref = CardRef(group.manufacturer, card.id)
            healthy = (
                not card.status.unhealthy
                and conflicting_mode(ref, self.mode, status, reservations) == Mode.NONE
            )
            numa = numa_nodes(card.topology.numa_affinity)
            found.extend(
                Advertised(str(token), healthy, numa)
                for token in card_tokens(group.id, card, self.mode)
            )
        return found

    # --- shared by Allocate and the hint ----------------------------------------------------

    def _units(self, candidate: Candidate, card_mib: int = 0) -> int:
        """Units a slice is charged: its `.sliced.units`, but never less than its memory asks.

        A Pod that names no Kueue queue never meets the Pod webhook, so nothing folded its
        memory into units: charged by its `.sliced.units` alone (none, or a hand-written one),
        two such slices of 80 % each would fit one card's ledger while HAMi-core lets each use
        80 % of the memory, squeezing every other tenant of the card. The allocator is the
        backstop (upstream's answer for such Pods), so it folds the memory itself: a percentage
        as the webhook does, MiB over the card's memory (`card_mib`; the smallest card of the
        manufacturer when not known yet). A webhook-folded Pod is charged exactly as before."""
        if self.mode != Mode.SLICED:
            return 0
        base = self.maker.resource_name
        declared = container_limit(candidate.container, base + SLICED_UNITS)
        percent = container_limit(candidate.container, base + SLICED_MEMORY_PERCENTAGE)
        mib = container_limit(candidate.container, base + SLICED_MEMORY_MIB)
        if mib and card_mib <= 0:
            card_mib = min((g.memory for g in self.node.spec().groups if g.memory > 0), default=0)
        folded = memory_percentage_to_units(percent) if percent else 0
        if mib:
            folded = max(folded, memory_mib_to_units(mib, card_mib))
        return max(declared, folded)

    def _occupancy(
        self, pods: Sequence[PodAllocations], reserved: Mapping[Holder, AllocationRecord]
    ) -> Occupancy:
        return sliced_occupancy(node_holdings(pods, reserved, self.node.release_terminated))

    def _kubelet_view(self, seconds: float) -> KubeletDevices | None:
        if self.kubelet is None:
            return None
        return self.kubelet.devices(self.resource, max(min(KUBELET_LIST_TIMEOUT_S, seconds), 0.01))

    def _served_test(self, held: Held) -> Callable[[Candidate], bool]:
        """Already granted (reserved here, or recorded in its annotation): ranked last."""
        reserved = set(held.reservations)

        def served(candidate: Candidate) -> bool:
            holder = candidate.holder
            return holder in reserved or holder.container in candidate.allocations.records

        return served

    # --- GetPreferredAllocation -------------------------------------------------------------

    def preferred(self, available: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        kubelet = self._kubelet_view(DEFAULT_DEADLINE_S)

        def look(held: Held) -> tuple[Sequence[Pod], NodeView, Callable[[Candidate], bool]]:
            raw = held.listed()
            pods = [PodAllocations.from_pod(pod) for pod in raw]
            spec, status = self.node.spec(), self.node.ledger(pods)
            occupancy = self._occupancy(pods, held.reservations)
            charging = charging_reservations(pods, held.reservations, self.node.release_terminated)
            reserved = tuple(charging.values())
            return raw, (spec, status, occupancy, reserved), self._served_test(held)

        def read(fresh: bool) -> tuple[NodeView, Candidate | None]:
            """The node as the hint reads it, and the container asking (None: unknown)."""
            raw, view, served = self.node.read(look, fresh)
            try:
                found = identify(raw, self.resource, size, kubelet, served, lambda _: True)
            except LookupError as error:
                if not fresh:
                    raise Unidentified(str(error)) from None
                found = None  # no Pod to size for: pack without size or preference
            return view, found

        # The Pod may be bound a moment before the watch brings it (kubelet asks for the hint
        # as soon as it admits): without it, a slice would be packed without its size onto a
        # card that cannot hold it, and Allocate would refuse. Read afresh then, as Allocate does.
        (spec, status, occupancy, reserved), found = self.node.identified(read)
        units, wanted, room = 0, frozenset[str](), dict[CardRef, int]()
        if found is not None:
            units = min(self._units(found), RESOURCE_MAX_UNITS)
            wanted = preferred_cards(pod_annotations(found.pod), spec, self.maker.name)
            if self.node.sliced_gate:
                room = {
                    CardRef(group.manufacturer, card.id): sliced_room(
                        occupancy, CardRef(group.manufacturer, card.id), found.holder
                    )
                    for group, card in spec.cards()
                }
        request = PreferenceRequest(
            self.maker.name, self.mode, tuple(available), tuple(must), size, units, wanted
        )
        hint = preferred_allocation(spec, status, request, room, self._best_connected, reserved)
        return list(hint)

    def _best_connected(self, ranked: Sequence[str], must: Sequence[str], size: int) -> list[str]:
        return list(best_connected(ranked, must, size, current_links(self.links)))

    # --- Allocate ---------------------------------------------------------------------------

    def allocate(self, device_ids: Sequence[str], attempt: Attempt) -> ContainerResponse:
        """The container's response; `Refusal` or `Late` otherwise (nothing kept then)."""
        if self.mode == Mode.SLICED and len(device_ids) > 1:
            # The Pod webhook's rule, again for Pods that never met it (no queue label): one
            # HAMi-core environment fences one card's share, so a slice is one token.
            raise Refusal(
                Code.INVALID_ARGUMENT,
                f"one slice per container: asked {len(device_ids)} {self.resource} devices; a "
                f"logical slice is always a single card (set {self.resource}: 1), and "
                "multi-card logical slicing is not supported",
            )
        found, record, prior = self._locked(
            device_ids,
            attempt,
            lambda held: self._decide(held, device_ids, attempt),
            notify=False,
        )
        grant = Recording(self.node, found, prior)
        grant.record(record, attempt)
        response = grant.answer(attempt, lambda: self._render(found, record))
        # ListAndWatch hears of the grant only now (under a server, once the answer has left:
        # `NodeState.answering`): woken earlier, every stream would rebuild its list while
        # this call still writes and answers.
        self.node.notify()
        return response

    def _locked(
        self,
        device_ids: Sequence[str],
        attempt: Attempt,
        decide: Callable[[Held], T],
        notify: bool = True,
    ) -> T:
        """Refuse malformed IDs before anything is looked up or locked; then `decide` (identify,
        check, reserve) under the node mutex, waited for no longer than the attempt allows, over
        the cached Pods and if need be a fresh list; with `notify`, ListAndWatch hears of the
        reservation at once (else the caller notifies when its work is done)."""
        try:
            for text in device_ids:
                DeviceToken.parse(text)
        except ValueError as error:
            raise Refusal(Code.INVALID_ARGUMENT, str(error)) from None
        if not device_ids:
            raise Refusal(Code.INVALID_ARGUMENT, "no device IDs")
        decided = self.node.decide(decide, max(attempt.left(), 0.0))
        if notify:
            self.node.notify()
        return decided

    def _decide(
        self, held: Held, device_ids: Sequence[str], attempt: Attempt
    ) -> tuple[Candidate, AllocationRecord, AllocationRecord | None]:
        node = self.node
        raw = held.listed()
        pods = [PodAllocations.from_pod(pod) for pod in raw]
        held.prune({pod.uid for pod in pods})
        spec, status = node.spec(), node.ledger(pods)
        occupancy = self._occupancy(pods, held.reservations)
        offered = _cards_of(device_ids)
        card_mib = _card_memory(spec, self.maker.name, offered)
        served = self._served_test(held)

        def feasible(candidate: Candidate) -> bool:
            units = min(self._units(candidate, card_mib), RESOURCE_MAX_UNITS)
            return all(
                sliced_room(occupancy, CardRef(self.maker.name, card), candidate.holder) >= units
                for card in offered
            )

        try:
            found = identify(
                raw,
                self.resource,
                len(device_ids),
                lambda: self._kubelet_view(attempt.left()),
                served,
                feasible,
                offered=device_ids,
            )
        except LookupError as error:
            raise Unidentified(str(error)) from None
        try:
            if found.allocations.problem:
                raise Refusal(Code.INTERNAL, found.allocations.problem)
            sliced = self.mode == Mode.SLICED
            per_token = (
                units_per_token(min(self._units(found, card_mib), RESOURCE_MAX_UNITS))
                if sliced
                else 1
            )
            request = GrantRequest(
                self.maker.name, self.mode, tuple(device_ids), found.holder, per_token
            )
            gate = occupancy if node.sliced_gate else None
            charging = charging_reservations(pods, held.reservations, node.release_terminated)
            record = decide_grant(spec, status, charging, request, gate)
        except Refusal as refusal:
            raise RefusedFor(refusal, found.pod) from None
        if attempt.left() <= 0:
            raise Late("the deadline passed while the grant was decided")
        return found, record, held.reserve(found.holder, record)

    def _render(self, found: Candidate, record: AllocationRecord) -> ContainerResponse:
        responder = self.responder
        if responder is None:
            raise Refusal(Code.INTERNAL, f"no container response for {self.maker.name}")
        channel = dataclasses.replace(self.channel, pod_runtime_class=runtime_class(found.pod))
        cards = granted_cards(record, self.node.spec(), self.maker.name)
        if self.mode != Mode.SLICED:
            return with_rdma(
                responder.shown(cards, self.mode, channel, self.nodes),
                current_links(self.links),
                cards,
            )
        request = SliceRequest(
            SlicedLimits.from_container(found.container, self.maker.resource_name),
            found.holder.pod_uid,
            found.holder.container,
            channel,
            declared_env(found.container),
            self.pods_dir,
            self.lib_dir,
        )
        response = responder.sliced(cards, request, self.nodes)
        for directory in response.directories:
            self.make_dirs(directory)
        return with_rdma(response, current_links(self.links), cards)


def _cards_of(device_ids: Sequence[str]) -> set[str]:
    return {token_card(text) for text in device_ids} - {""}


def runtime_class(pod: Pod) -> str:
    spec = pod.get("spec")
    value = spec.get("runtimeClassName") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) else ""


def _card_memory(spec: DevicesSpec, manufacturer: str, cards: Collection[str]) -> int:
    """MiB of the offered cards (the smallest, if they differ); 0 when none is known."""
    sizes = [
        group.memory
        for group, card in spec.cards()
        if group.manufacturer == manufacturer and card.id in cards and group.memory > 0
    ]
    return min(sizes, default=0)
