"""The one interface a manufacturer's package implements (docs/adding-a-manufacturer.md).

The detector loop, the device plugin and the simulator ask a `Vendor` for what differs by
manufacturer, so none of them names one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodeagent.detect.base import Detector, DetectorSetup
from nodeagent.plugin.grants import Responder
from nodeagent.plugin.mig import MigNvml, ProfileNaming
from nodeagent.simulate.base import HostSimulator, SimulatedHost
from nodeagent.staging import Staging

Reconcile = Callable[[frozenset[str]], object]
"""A reclaimer's pass, fed the node's live Pod UIDs."""

SliceReclaimer = Callable[[Responder, str, Callable[[], list[str]]], Reconcile | None]
"""Builds the reclaimer of the slices a responder makes on the cards (the responder, the Pods'
work dir, the PCI addresses of this manufacturer's cards); None when that responder makes none."""

DirectLinks = Callable[[DetectorSetup], Sequence[tuple[str, str]]]
"""The card pairs (PCI addresses) a manufacturer's library says share a card-to-card fabric."""

HostPath = tuple[str, str, bool, str]
"""One host directory an agent mounts: (volume, host path, read only, hostPath type)."""

DryResponder = Callable[[str, SimulatedHost | None], Responder]
"""The responder a preflight drives on a host (its root; the simulated host when simulated):
it reads the drivers' state and changes none of it."""


@dataclass(frozen=True)
class HostReader:
    """A manufacturer's own CLI that lists the host's cards (`command`), and how many cards its
    output lists (`count`): preflight cross-checks the detector with it."""

    command: tuple[str, ...]
    count: Callable[[str], int]


@dataclass(frozen=True)
class AgentPod:
    """What one manufacturer's agent container needs of its node beyond what every agent gets
    (`nodeagent.manifests`). `privileged`, with the host's /dev, by default: a management
    library opens each card's control devices, which no runtime hook hands to an unprivileged
    container; otherwise only `capabilities` are added to none. `writable`: which of the common
    host paths it writes; `mounts`: host paths of its own; `env`: its container's variables;
    `note`: the generated manifest's header lines that say why."""

    privileged: bool = True
    capabilities: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    mounts: tuple[HostPath, ...] = ()
    env: tuple[Mapping[str, str], ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Vendor:
    """One manufacturer as the node agent sees it.

    `name` is its key in `chain.manufacturers`; `detector` builds its detector from the
    setup; `responder` answers its Allocate calls; `partition_naming` is set when its hardware
    partitions are made through an NVML-shaped library (`nodeagent.plugin.mig`); and
    `slice_reclaimer` when its logical slices are objects on the card that outlive a Pod;
    `simulator` opens a simulated host from one of its profiles (`--simulate`).

    `partition_library` opens the host's library its partitions are made through (None when
    the host has none: no partitioned server for it). `markers_in_base_dir`: its partitions'
    ownership markers live in the markers directory itself rather than in `<dir>-<name>`
    (the first manufacturer's markers were there before any other's; a node upgraded in
    place keeps finding them). `staging` says how its agent's init container stages the
    isolation library its sliced grants preload (None: nothing is staged); `agent` what its
    DaemonSet's container needs of the node. For a preflight: `host_reader`, its established
    CLI that lists the cards (None: none is), and `dry_responder` when its responder would
    change a driver's state (the default responder is rehearsed as it is).

    `direct_links` lists the pairs of its cards (by PCI address) joined by a card-to-card fabric,
    when its library can tell (docs/topology.md, "Network cards")."""

    name: str
    detector: Callable[[DetectorSetup], Detector]
    responder: Responder
    partition_naming: ProfileNaming | None = None
    slice_reclaimer: SliceReclaimer | None = None
    simulator: HostSimulator | None = None
    direct_links: DirectLinks | None = None
    partition_library: Callable[[], MigNvml | None] | None = None
    markers_in_base_dir: bool = False
    staging: Staging | None = None
    agent: AgentPod = AgentPod()
    host_reader: HostReader | None = None
    dry_responder: DryResponder | None = None

    def markers_dir(self, base: str) -> str:
        """Where this manufacturer's partition markers live, under the agent's `base`."""
        return base if self.markers_in_base_dir else f"{base}-{self.name}"
