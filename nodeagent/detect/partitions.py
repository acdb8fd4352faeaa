"""What every manufacturer's partition detection shares: a card's partition capability from
its profiles, and the agreement rule within a group (the group aggregate merges profiles by
name, so a name two cards publish differently is withheld from both)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from chain.devices import AcceleratorStatus, PartitionProfile, PhysicalSliced
from nodeagent.detect.vendor import CardReading


def physical_sliced(profiles: Sequence[PartitionProfile]) -> PhysicalSliced:
    """A card's partition capability; none at all when no profile survived."""
    if not profiles:
        return PhysicalSliced()
    return PhysicalSliced(max(profile.count for profile in profiles), tuple(profiles))


def agree_within_groups(cards: Sequence[CardReading]) -> list[CardReading]:
    """Cards of one group (name and memory) with the profiles they disagree on withheld."""
    first: dict[tuple[str, int, str], PartitionProfile] = {}
    divergent: set[tuple[str, int, str]] = set()
    for card in cards:
        for profile in card.status.physical_sliced.profiles:
            key = (card.name, card.memory_mib, profile.name)
            if first.setdefault(key, profile) != profile:
                divergent.add(key)
    if not divergent:
        return list(cards)
    agreed = []
    for card in cards:
        kept = [
            profile
            for profile in card.status.physical_sliced.profiles
            if (card.name, card.memory_mib, profile.name) not in divergent
        ]
        status: AcceleratorStatus = card.status
        if card.status.physical_sliced:
            status = replace(card.status, physical_sliced=physical_sliced(kept))
        agreed.append(replace(card, status=status))
    return agreed


def unique_by_name(entries: Iterable[PartitionProfile]) -> tuple[PartitionProfile, ...]:
    """One card's profiles keyed by published name; a name read twice the same way is kept
    once, a name read two ways is withheld (its geometry is not one thing)."""
    found: dict[str, PartitionProfile] = {}
    withheld: set[str] = set()
    for entry in entries:
        if entry.name in withheld or found.get(entry.name, entry) != entry:
            withheld.add(entry.name)
            found.pop(entry.name, None)
            continue
        found[entry.name] = entry
    return tuple(found.values())
