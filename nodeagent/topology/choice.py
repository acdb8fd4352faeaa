"""The best-connected set of cards for a multi-card request (docs/topology.md, "Best-connected
card sets"). Pure: the device plugin's hint asks it with the cards the kubelet offers, already in
the plugin's packing order.

The policy, in order (each rule breaks the ties of the one before):
1. the worst link between any two cards of the set (the cards the kubelet says must be included
   count as members) is as good as it can be: all on one fabric before a PCIe switch, one switch
   before the host bridge, one socket before the sockets' interconnect;
2. the sum of the links over every pair of the set is the smallest (more pairs on the better
   class);
3. the sum over the chosen cards of each card's link to its nearest RDMA network card is the
   smallest (a card that reaches no RDMA card counts one worse than SYSTEM): cards near the node's
   RDMA NICs first;
4. the set that comes first in the packing order: compare the chosen cards' positions, sorted,
   and the smaller at the first difference wins. So a node whose matrix is empty (every pair
   SYSTEM, no NIC) answers the first cards of the packing order, exactly the plain packing hint.

The search is exact: a depth-first branch and bound over the candidates in packing order,
started from a greedy set, pruned by a lower bound on each rule (the worst link any remaining
card brings, the cheapest remaining links and NIC distances), with interchangeable cards tried in
packing order only. A step budget keeps a pathological matrix from stalling the kubelet: past
it, the best set found so far is answered (the simulated 8- and 16-card hosts need at most a few
hundred steps: docs/benchmarks.md, "Preferred allocation").
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from nodeagent.topology.links import CardLinks, Link

NO_RDMA = len(Link)
"""The NIC distance of a card that reaches no RDMA network card: one worse than SYSTEM."""
SEARCH_BUDGET = 2_000
"""Search steps before the best set found so far is answered (a step is one partial set)."""


@dataclass(frozen=True)
class NodeLinks:
    """What the device plugin knows of how one node's devices connect: the card matrix, and which
    of its network cards are RDMA devices (the names `/sys/class/infiniband` lists: the ones NCCL
    can use for GPUDirect RDMA). A NIC of the matrix outside `rdma` is a plain Ethernet port."""

    cards: CardLinks = field(default_factory=lambda: CardLinks(()))
    rdma: frozenset[str] = frozenset()

    def rdma_reach(self, card: str) -> int:
        """The link from `card` to its nearest RDMA network card; `NO_RDMA` when none."""
        reach = self.cards.nics.get(card, {})
        return min((int(reach[nic]) for nic in reach if nic in self.rdma), default=NO_RDMA)

    def nearest_rdma(self, card: str) -> list[str]:
        """The RDMA network cards nearest `card` (every one at the best link), by name."""
        best = self.rdma_reach(card)
        if best == NO_RDMA:
            return []
        reach = self.cards.nics.get(card, {})
        return sorted(nic for nic in reach if nic in self.rdma and reach[nic] == best)

    def rdma_for(self, cards: Iterable[str]) -> list[str]:
        """The RDMA network cards a container granted `cards` should use, by name: each card's
        nearest ones."""
        return sorted({nic for card in cards for nic in self.nearest_rdma(card)})


UNKNOWN_LINKS = NodeLinks()
"""A node whose topology is not read: every choice is the plain packing hint, no NIC is named."""

LinksSource: TypeAlias = NodeLinks | Callable[[], NodeLinks]
"""The links a plugin is given: a fixed reading, or where to read the current one at each hint
(the agent's plugins start before the node's Devices spec may list the cards the links are
read for)."""


def current_links(source: LinksSource) -> NodeLinks:
    """The reading `source` gives now."""
    return source if isinstance(source, NodeLinks) else source()


def set_score(cards: Sequence[str], links: NodeLinks) -> tuple[int, int, int]:
    """Rules 1 to 3 for one set of cards: (worst pair link, sum of pair links, sum of NIC
    distances); a set of one card has no pair, so its worst link counts as -1. Lower is better."""
    worst, total = -1, 0
    for n, a in enumerate(cards):
        for b in cards[n + 1 :]:
            link = int(links.cards.link(a, b))
            worst, total = max(worst, link), total + link
    return worst, total, sum(links.rdma_reach(card) for card in cards)


def best_connected(
    ranked: Sequence[str],
    must: Collection[str],
    size: int,
    links: NodeLinks,
    budget: int = SEARCH_BUDGET,
) -> tuple[str, ...]:
    """The `size` cards to hint: every card of `must`, and the rest from `ranked` (the available
    cards, best first in the packing order) by the module's policy. The answer lists `must` first,
    then the chosen cards in packing order. `ValueError` when `ranked` and `must` hold fewer than
    `size` cards."""
    needed = tuple(dict.fromkeys(must))
    candidates = [card for card in dict.fromkeys(ranked) if card not in set(needed)]
    wanted = size - len(needed)
    if wanted <= 0:
        return needed
    if wanted > len(candidates):
        raise ValueError(
            f"size {size} asks more cards than the {len(needed) + len(candidates)} offered"
        )
    picks = _Search(candidates, needed, wanted, links, budget).run()
    return (*needed, *(candidates[n] for n in picks))


class _Search:
    """One branch and bound; candidates are named by their position in the packing order."""

    def __init__(
        self,
        candidates: Sequence[str],
        needed: Sequence[str],
        wanted: int,
        links: NodeLinks,
        budget: int,
    ) -> None:
        count = len(candidates)
        self.wanted = wanted
        self.budget = budget
        self.link = [
            [int(links.cards.link(a, b)) if a != b else 0 for b in candidates] for a in candidates
        ]
        self.nic = [links.rdma_reach(card) for card in candidates]
        # Links to the cards that must be included: every chosen card pays them.
        to_must = [[int(links.cards.link(a, m)) for m in needed] for a in candidates]
        self.cost = [sum(row) for row in to_must]
        self.reach = [max(row, default=-1) for row in to_must]
        must_worst, must_total, _ = set_score(needed, links)
        self.start = (must_worst, must_total)
        self.best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
        # Twins: cards with the same links to every other card and the same NIC distance (two
        # cards of one switch, eight of one NVSwitch). Swapping one for the other changes no
        # rule, so only the first of them left out matters: each card names its first twin.
        self.twin = list(range(count))
        for a in range(count):
            for b in range(a):
                if self.twin[b] == b and self._alike(a, b):
                    self.twin[a] = b
                    break

    def _alike(self, a: int, b: int) -> bool:
        others = (c for c in range(len(self.nic)) if c not in (a, b))
        return (
            self.nic[a] == self.nic[b]
            and self.cost[a] == self.cost[b]
            and self.reach[a] == self.reach[b]
            and all(self.link[a][c] == self.link[b][c] for c in others)
        )

    def run(self) -> tuple[int, ...]:
        self._offer(self._greedy())
        worst, total = self.start
        self._descend((), worst, total, 0, self.cost, self.reach, 0)
        assert self.best is not None
        return self.best[1]

    def _greedy(self) -> tuple[int, ...]:
        """A good first set: each step adds the card that spoils the set least."""
        chosen: list[int] = []
        worst, cost, reach = self.start[0], list(self.cost), list(self.reach)
        left = list(range(len(self.nic)))
        for _ in range(self.wanted):
            pick = min(left, key=lambda c: (max(worst, reach[c]), cost[c], self.nic[c], c))
            worst = max(worst, reach[pick])
            left.remove(pick)
            chosen.append(pick)
            row = self.link[pick]
            cost = [c + r for c, r in zip(cost, row, strict=True)]
            reach = [max(c, r) for c, r in zip(reach, row, strict=True)]
        return tuple(sorted(chosen))

    def _offer(self, picks: tuple[int, ...]) -> None:
        worst, total = self.start
        for n, a in enumerate(picks):
            worst = max(worst, self.reach[a], *(self.link[a][b] for b in picks[n + 1 :]))
            total += self.cost[a] + sum(self.link[a][b] for b in picks[n + 1 :])
        key = (worst, total, sum(self.nic[a] for a in picks))
        if self.best is None or (key, picks) < self.best:
            self.best = (key, picks)

    def _descend(
        self,
        picks: tuple[int, ...],
        worst: int,
        total: int,
        nic: int,
        cost: Sequence[int],
        reach: Sequence[int],
        start: int,
    ) -> None:
        self.budget -= 1
        left = self.wanted - len(picks)
        if left == 0:
            key = (worst, total, nic)
            assert self.best is not None
            if (key, picks) < self.best:
                self.best = (key, picks)
            return
        if self.budget <= 0:
            return
        assert self.best is not None
        (best_worst, best_total, best_nic), best_picks = self.best
        # A card that alone spoils the worst link beyond the best set's can join no better set.
        pool = [c for c in range(start, len(cost)) if reach[c] <= best_worst]
        if len(pool) < left:
            return
        reaches = sorted(reach[c] for c in pool)
        # Each pick pays its links to the set so far and half its links to the other picks: at
        # least half its `left - 1` cheapest links within the pool (in halves, to stay integral).
        # (A card's link to itself is 0, the first of its sorted row: dropped.)
        halves = sorted(
            2 * cost[c] + sum(sorted(map(self.link[c].__getitem__, pool))[1:left]) for c in pool
        )
        bound = (
            max(worst, reaches[left - 1]),
            2 * total + sum(halves[:left]),
            nic + sum(sorted(self.nic[c] for c in pool)[:left]),
        )
        best_key = (best_worst, 2 * best_total, best_nic)
        # Every completion sorts after `picks` among sets with this prefix: on a tie of the
        # three rules it loses the packing order as soon as the prefix does.
        if bound > best_key or (bound == best_key and picks > best_picks[: len(picks)]):
            return
        passed: set[int] = set()
        for n, card in enumerate(pool):
            if len(pool) - n < left:
                break
            if self.twin[card] in passed:
                continue  # an earlier twin left out: the same set with it comes first
            passed.add(self.twin[card])
            row = self.link[card]
            self._descend(
                (*picks, card),
                max(worst, reach[card]),
                total + cost[card],
                nic + self.nic[card],
                [c + r for c, r in zip(cost, row, strict=True)],
                [max(c, r) for c, r in zip(reach, row, strict=True)],
                card + 1,
            )
