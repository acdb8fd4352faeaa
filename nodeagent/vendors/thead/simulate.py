"""A simulated T-Head host in MIG mode: HGML's partition calls and the driver's capability nodes.

The detector reads the recording (`RecordedNvmlLike`); the partitions are made through the
simulated NVML's instance half (`SimulatedNvml`), built from the same recording so the two agree
on every card, profile id, profile index and placement. HGML copies NVML's calls, so the agent
drives it with the code that drives NVIDIA's (`nodeagent.vendors.thead.driver`).

The driver publishes a capability node per live GPU instance and compute instance
(`/dev/alixpu-caps/alixpu-cap<minor>`) and names its minor in procfs
(`.../ppu<card>/mig/gi<id>[/ci<id>]/access`, `DeviceFileMinor: <minor>`). `CapabilityNodes`
answers both from the simulator's live instances, so a node or file exists exactly while its
instance does. The minors are this simulator's own numbering (they start at 256, as in T-Head's
documented example); nothing may derive one from an instance id, and nothing here does outside
this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.base import SimulatedHost
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import Card, MigProfile, Model, Profile
from nodeagent.simulate.recorded import RecordedNvmlLike
from nodeagent.simulate.recorded_host import (
    Placed,
    Recorded,
    RecordedHost,
    RecordedSimulator,
    control_minors,
    nvmlike_cards,
)
from nodeagent.vendors.thead import grants as thead_plugin
from nodeagent.vendors.thead.detect import THEAD

FIRST_CAPABILITY_MINOR = 256
_ACCESS = re.compile(
    re.escape(thead_plugin.CAPABILITIES) + r"/ppu([0-9]+)/mig/gi([0-9]+)(?:/ci([0-9]+))?/access"
)
_CAPABILITY = re.compile(re.escape(thead_plugin.capability_node(0)[:-1]) + r"([0-9]+)")


def _profiles(entries: Sequence[Mapping[str, Any]]) -> tuple[MigProfile, ...]:
    found = []
    for entry in entries:
        slots = entry.get("placements")
        if not isinstance(slots, list) or not slots:
            continue  # an instance the driver cannot place is never made
        found.append(
            MigProfile(
                profile=int(entry["profile"]),
                id=int(entry["id"]),
                name=str(entry["name"]),
                slices=int(entry["slice_count"]),
                instances=int(entry["instance_count"]),
                memory_mb=int(entry["memory_mb"]),
                starts=tuple(int(start) for start, _ in slots),
                size=int(slots[0][1]),
            )
        )
    return tuple(found)


def partitioning(recording: Mapping[str, Any]) -> SimulatedNvml | None:
    """The recording's cards as an NVML-shaped library whose MIG-mode cards can be partitioned;
    None when no card is in MIG mode."""
    cards = []
    for entry in recording["cards"]:
        total, _used = entry["memory"]
        profiles = _profiles(entry.get("profiles", ()))
        model = Model(
            str(entry["name"]),
            int(total) // (1 << 20),
            mig_profiles=profiles,
            mig_capable=bool(profiles),
        )
        minor = entry.get("minor")
        cards.append(
            Card(
                model,
                str(entry["uuid"]),
                str(entry["bus"]),
                minor if isinstance(minor, int) else -1,
                mig=entry.get("mig_mode") == 1 and bool(profiles),
            )
        )
    if not any(card.mig for card in cards):
        return None
    hgml = SimulatedNvml(Profile("thead-mig", tuple(cards)))
    hgml.NVML_GPU_INSTANCE_PROFILE_COUNT = 0x55  # HGML's profile-id space
    return hgml


class CapabilityNodes(SimulatedNodes):
    """A simulated T-Head host's `/dev` and the driver's procfs, with a capability node per live
    GPU and compute instance of `hgml`."""

    def __init__(self, base: SimulatedNodes, hgml: SimulatedNvml) -> None:
        super().__init__(base.minors, base.files)
        self.hgml = hgml

    def _live(self) -> dict[tuple[int, int, int | None], int]:
        """(card, GPU instance, compute instance or None) -> its capability node's minor."""
        found: dict[tuple[int, int, int | None], int] = {}
        minor = FIRST_CAPABILITY_MINOR
        for card, gpus in sorted(self.hgml._gpus.items()):
            for gpu_id, gpu in sorted(gpus.items()):
                found[(card, gpu_id, None)] = minor
                for compute_id in sorted(gpu.computes):
                    found[(card, gpu_id, compute_id)] = minor + 1 + compute_id
                minor += 16
        return found

    def read(self, path: str) -> str | None:
        match = _ACCESS.fullmatch(path)
        if match is None:
            return super().read(path)
        compute = int(match[3]) if match[3] is not None else None
        minor = self._live().get((int(match[1]), int(match[2]), compute))
        return None if minor is None else f"DeviceFileMinor: {minor}\n"

    def char_minor(self, path: str) -> int | None:
        match = _CAPABILITY.fullmatch(path)
        if match is None:
            return super().char_minor(path)
        minor = int(match[1])
        return minor if minor in self._live().values() else None

    def exists(self, path: str) -> bool:
        return self.char_minor(path) is not None


def thead_nodes(cards: Sequence[Placed]) -> SimulatedNodes:
    minors = control_minors(thead_plugin.CONTROL_NODES)
    for card in cards:
        if card.minor is not None:
            minors[thead_plugin.card_node(card.position)] = card.minor
    return SimulatedNodes(minors)


def _host(recorded: RecordedHost) -> SimulatedHost:
    hgml = partitioning(recorded.recording)
    nodes = recorded.nodes
    if hgml is not None and nodes is not None:
        nodes = CapabilityNodes(nodes, hgml)
    mig = cast(MigNvml, hgml) if hgml is not None else None
    return SimulatedHost(
        recorded.sysfs,
        injected={THEAD: recorded.keywords},
        device_nodes=nodes,
        hgml=mig,
        partitions={THEAD: mig} if mig is not None else {},
    )


SIMULATOR = RecordedSimulator(
    Recorded(THEAD, "interface", RecordedNvmlLike, nvmlike_cards, thead_nodes), _host
)
