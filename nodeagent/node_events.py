"""What a node's cards tell the cluster, as Events on its Node (`kubectl describe node`).

An operator whose node never joins a pool, or whose pool shrank overnight, looks at the Node
first; the agent's log is one `kubectl logs` further and gone with the Pod. So the agent records
what changed between two reports of the node's `Devices` (pure: `detection_events`):

- `CardsDetected` (Normal): cards of a group that the last report did not have (every card on
  the first report of a node);
- `CardsLost` (Warning): cards the last report had and this one does not; the pools and their
  queues shrink with them;
- `CardUnhealthy` (Warning) / `CardHealthy` (Normal): a card's health flipped (uncorrected
  memory errors); the device plugin stops or starts offering it;
- `AcceleratorsNotDetected` (Warning): the one manufacturer the agent serves was not found, with
  the cause the detector gives (the hold-back; repeats are folded into one Event's count);
- `SlicingUnavailable` (Warning) / `SlicingAvailable` (Normal): a group's logical slices stopped
  or started being published because the isolation library a slice preloads is not, or is
  again, usable on the node (`slicingUnavailable` on the group, `plugin/isolation.py`); told
  when that changes (or the problem does), not every round.

The baseline is the `Devices` spec the API server holds, so a restarted agent that finds the
same cards records nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chain.devices import Accelerator, DevicesGroup
from kubeapi.events import NORMAL, WARNING

EVENTS_CONTROLLER = "gpustack.ai/node-agent"
"""The `reportingController` of every Event the agent records (its Node's, its Pods')."""
CARDS_DETECTED = "CardsDetected"
CARDS_LOST = "CardsLost"
CARD_UNHEALTHY = "CardUnhealthy"
CARD_HEALTHY = "CardHealthy"
NOT_DETECTED = "AcceleratorsNotDetected"
SLICING_UNAVAILABLE = "SlicingUnavailable"
SLICING_AVAILABLE = "SlicingAvailable"
STAGING_HINT = (
    "the {manufacturer} device manager DaemonSet must stage the isolation library on the host "
    "(an init container copying it from its image into the staged directory the path names; "
    'docs/nodeagent.md, "Slicing needs its isolation library"); slices come back at the next '
    "report once it loads"
)
ACTION = "Detected"


@dataclass(frozen=True)
class NodeEvent:
    type: str
    reason: str
    note: str


def _cards(
    groups: Sequence[DevicesGroup],
) -> dict[str, tuple[DevicesGroup, dict[str, Accelerator]]]:
    return {g.accelerator_key: (g, {card.id: card for card in g.accelerators}) for g in groups}


def _indexes(cards: Sequence[Accelerator]) -> str:
    return ", ".join(str(card.index) for card in sorted(cards, key=lambda card: card.index))


def _plural(count: int, what: str) -> str:
    return f"{count} {what} card" + ("" if count == 1 else "s")


def detection_events(
    before: Sequence[DevicesGroup] | None, after: Sequence[DevicesGroup]
) -> list[NodeEvent]:
    """The Events between the node's last reported groups (None: never reported) and now."""
    old, new = _cards(before or ()), _cards(after)
    events = []
    for akey, (group, cards) in new.items():
        _, had = old.get(akey, (group, {}))
        found = [card for ident, card in cards.items() if ident not in had]
        if found:
            note = f"{_plural(len(found), group.name)} detected ({akey}; index {_indexes(found)})"
            events.append(NodeEvent(NORMAL, CARDS_DETECTED, note))
        for ident, card in cards.items():
            seen = had.get(ident)
            if seen is None or seen.status.unhealthy == card.status.unhealthy:
                continue
            where = f"{group.name} index {card.index} ({ident})"
            if card.status.unhealthy:
                note = (
                    f"{where} is unhealthy (uncorrected memory errors): the device plugin "
                    "offers it no more; Pods already on it keep running"
                )
                events.append(NodeEvent(WARNING, CARD_UNHEALTHY, note))
            else:
                note = f"{where} is healthy again: the device plugin offers it again"
                events.append(NodeEvent(NORMAL, CARD_HEALTHY, note))
    for akey, (group, had) in old.items():
        _, cards = new.get(akey, (group, {}))
        lost = [card for ident, card in had.items() if ident not in cards]
        if lost:
            note = (
                f"{len(lost)} of {_plural(len(had), group.name)} no longer detected ({akey}; "
                f"index {_indexes(lost)}): their pools shrink"
            )
            events.append(NodeEvent(WARNING, CARDS_LOST, note))
    return events


def held_back_event(message: str) -> NodeEvent:
    """The hold-back's message (`manufacturer X is expected but not detected: <cause>`)."""
    return NodeEvent(WARNING, NOT_DETECTED, message)


def slicing_events(
    before: Sequence[DevicesGroup] | None, after: Sequence[DevicesGroup]
) -> list[NodeEvent]:
    """A group's slicing that changed since the last reported groups (None: never reported):
    unavailable (first seen so, or for another reason) or available again."""
    had = {group.accelerator_key: group.slicing_unavailable for group in before or ()}
    events = []
    for group in after:
        now, then = group.slicing_unavailable, had.get(group.accelerator_key, "")
        where = f"{group.name} ({group.accelerator_key})"
        if now and now != then:
            note = (
                f"{where}: logical slices are not offered on this node, its "
                f"{_plural(len(group.accelerators), group.manufacturer)} are published without "
                f"them: {now}. Fix: " + STAGING_HINT.format(manufacturer=group.manufacturer)
            )
            events.append(NodeEvent(WARNING, SLICING_UNAVAILABLE, note))
        elif then and not now and group.offers_logical_slices:
            note = f"{where}: its slicing isolation library loads again: logical slices are offered"
            events.append(NodeEvent(NORMAL, SLICING_AVAILABLE, note))
    return events
