"""Topology profiles: which levels a node is placed by (docs/topology.md, "Topology profiles").

The `topology-levels` setting names one profile, its levels top to bottom. A node that carries a
label for every level is in that profile; any other node is in the hostname-only profile, the one
level every node has. That is where Kueue would leave it: Kueue's topology cache takes into a
flavor only the nodes that carry every level of the flavor's Topology (`NodeMatchesFlavor` in
`pkg/util/tas/node.go`), so a node missing a level would count in the flavor's quota and yet
never be given a Pod. Falling back keeps its cards schedulable (for requests that name no level
above the hostname) and keeps the rack flavor's quota equal to what Kueue can place there.

Presence is what counts, as for Kueue: a level label with an empty value is a domain (all such
nodes share it), not a missing level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chain.names import HOSTNAME_LEVELS, topology_profile


def node_levels(levels: Sequence[str], labels: Mapping[str, str]) -> tuple[str, ...]:
    """The levels of the profile a node with `labels` is in, given the configured `levels`."""
    if all(key in labels for key in levels):
        return tuple(levels)
    return HOSTNAME_LEVELS


def node_profile(levels: Sequence[str], labels: Mapping[str, str]) -> str:
    """The `topology.gpustack.ai/profile` value of a node with `labels`."""
    return topology_profile(node_levels(levels, labels))


def node_domain(levels: Sequence[str], labels: Mapping[str, str]) -> str | None:
    """The node's domain at the level just above the hostname, named by every level's value
    above the hostname, top first, joined by `/`; None in the hostname-only profile."""
    if len(levels) < 2 or node_levels(levels, labels) != tuple(levels):
        return None
    return "/".join(labels[key] for key in levels[:-1])
