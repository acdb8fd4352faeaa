"""MetaX container responses.

Exclusive, shared and visibility grants inject the nodes themselves: the control nodes
`/dev/mxcd`, `/dev/mxnd` and `/dev/mxgd` once, then each card's DRM nodes; no variable. Every
node is best-effort, as upstream: one the host lacks is logged and left out.

Sliced grants (one card each) make an `sgpu` subdevice on the card (`sgpu.py`): the card is
put in `sgpu` mode with fixed-share scheduling if it has none yet, a subdevice with the VRAM cap
is created at the lowest free index (of 16, counting the driver's and the markers'), and the
container gets `METAX_SGPUS=sgpu=<bdf>#<index>;compute=<cores%>;vram=<MiB>;alias=gpustack-<pod>`
with the control node `/dev/mxcd` and the card's render node (an sgpu subdevice is reached
through those two and nothing else). A slice asking the whole card (100 % of compute and all
its memory) takes the native path: no subdevice, no variable, but the card is marked taken.
Each grant is marked on the host (`<pods>/<pod>/c-<container>/metax-sgpu.json`); a retry with
the same figures reuses its subdevice, one with others fails closed, as does a marker whose
subdevice is gone. Subdevices are driver state that outlives the container: the reclaimer
(`MetaxReclaimer`) destroys those whose Pod is gone, and the ledger charges a MetaX slice until
then (`chain.ledger_rebuild.STATEFUL_SLICED_MANUFACTURERS`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    HostRecord,
    SliceRequest,
    VendorResponder,
    memory_limit_mib,
    write_host_file,
)
from nodeagent.plugin.response import ContainerResponse
from nodeagent.vendors.common.drm import optional_drm_nodes
from nodeagent.vendors.metax.sgpu import MAX_SUBDEVICES, SgpuDriver, SysfsSgpu

log = logging.getLogger(__name__)

MANUFACTURER = "metax"
CONTROL_NODES = ("/dev/mxcd", "/dev/mxnd", "/dev/mxgd")
MARKER = "metax-sgpu.json"
ALIAS_PREFIX = "gpustack-"
WHOLE = -1
"""A marker's index when the slice took the whole card (no subdevice)."""


@dataclass(frozen=True)
class Marker(HostRecord):
    pod_uid: str
    container: str
    card: str
    index: int
    cores: int
    memory_mib: int

    KEYS: ClassVar[Mapping[str, str]] = {
        "pod_uid": "podUID",
        "container": "container",
        "card": "cardBDF",
        "index": "index",
        "cores": "coresPct",
        "memory_mib": "memMiB",
    }


class Metax(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def __init__(self, sgpu: SgpuDriver | None = None) -> None:
        self.sgpu: SgpuDriver = sgpu or SysfsSgpu()
        self._cards = threading.Lock()

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        control = nodes.optional(*CONTROL_NODES)
        if len(control) < len(CONTROL_NODES):
            missing = sorted(set(CONTROL_NODES) - {node.host_path for node in control})
            log.info("the host exposes no %s; not injected", ", ".join(missing))
        return ContainerResponse(devices=(*control, *optional_drm_nodes(cards, nodes)))

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        if len(cards) != 1:
            raise ValueError(
                f"sliced container {request.container!r} allocated {len(cards)} cards, but "
                "MetaX sgpu slicing is single-card"
            )
        granted = cards[0]
        bdf = granted.card.topology.pci_bus_id
        cores = request.limits.cores()
        mib = memory_limit_mib(granted.group.memory, request.limits)
        whole = cores >= 100 and mib >= granted.group.memory
        with self._cards:  # two slices of one card must not both take the lowest free index
            index = self._reserve(request, bdf, cores, mib, whole)
        render = granted.physical_index(1)
        devices = nodes.optional(CONTROL_NODES[0])
        devices += nodes.optional(f"/dev/dri/renderD{render}") if render is not None else ()
        envs = {}
        if index != WHOLE:
            alias = ALIAS_PREFIX + request.pod_uid
            envs["METAX_SGPUS"] = f"sgpu={bdf}#{index};compute={cores};vram={mib};alias={alias}"
        return ContainerResponse(envs=envs, devices=devices, directories=(request.work_dir,))

    def _reserve(self, request: SliceRequest, bdf: str, cores: int, mib: int, whole: bool) -> int:
        own = Path(request.work_dir, MARKER)
        existing = self.sgpu.subdevices(bdf)
        mine = Marker.read(own)
        if mine is not None and mine.card == bdf:
            if (mine.cores, mine.memory_mib, mine.index == WHOLE) != (cores, mib, whole):
                raise ValueError(
                    f"marker {str(own)!r} mismatches request (card={bdf} cores={cores} "
                    f"mem={mib}): fail closed"
                )
            if mine.index != WHOLE and mine.index not in existing:
                raise ValueError(
                    f"marker {str(own)!r} references missing sgpu subdevice {bdf}#{mine.index}: "
                    "fail closed"
                )
            return mine.index
        others = [m for m in markers(request.pods_dir, besides=own) if m.card == bdf]
        if whole:
            if others or existing:
                raise ValueError(f"card {bdf} is already occupied, cannot take it whole")
            write_host_file(own, self._marker(request, bdf, WHOLE, cores, mib))
            return WHOLE
        if any(m.index == WHOLE for m in others):
            raise ValueError(f"card {bdf} is held whole, cannot slice it")
        used = set(existing) | {m.index for m in others}
        free = [index for index in range(MAX_SUBDEVICES) if index not in used]
        if not free:
            raise ValueError(f"card sgpu pool exhausted ({MAX_SUBDEVICES} subdevices)")
        if not existing:
            self.sgpu.enable(bdf)
        self.sgpu.create(bdf, free[0], mib, ALIAS_PREFIX + request.pod_uid)
        try:
            write_host_file(own, self._marker(request, bdf, free[0], cores, mib))
        except OSError:
            self.sgpu.destroy(bdf, free[0])  # undo: no marker, no subdevice
            raise
        return free[0]

    @staticmethod
    def _marker(request: SliceRequest, bdf: str, index: int, cores: int, mib: int) -> str:
        return Marker(request.pod_uid, request.container, bdf, index, cores, mib).render()


def markers(pods_dir: str, besides: Path | None = None) -> list[Marker]:
    """Every MetaX slice marked under the pods directory."""
    found = []
    for path in Path(pods_dir).glob(f"*/*/{MARKER}"):
        marker = Marker.read(path) if path != besides else None
        if marker is not None:
            found.append(marker)
    return found


@dataclass
class MetaxReclaimer:
    """Destroys the subdevices whose Pod is gone (their alias names it), once a subdevice has
    stayed orphaned for `grace_s`: the live set comes from a listing that may not show a Pod
    granted a moment ago."""

    sgpu: SgpuDriver
    cards: Callable[[], Iterable[str]]
    """The bus ids of the node's MetaX cards."""
    grace_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    orphans: dict[tuple[str, int], float] = field(default_factory=dict)

    def reconcile(self, live: frozenset[str]) -> list[tuple[str, int]]:
        now = self.clock()
        seen: set[tuple[str, int]] = set()
        destroyed = []
        for bdf in self.cards():
            for index, alias in self.sgpu.subdevices(bdf).items():
                pod = alias.removeprefix(ALIAS_PREFIX)
                if not alias.startswith(ALIAS_PREFIX) or pod in live:
                    continue
                key = (bdf, index)
                seen.add(key)
                if now - self.orphans.setdefault(key, now) < self.grace_s:
                    continue
                try:
                    self.sgpu.destroy(bdf, index)
                except OSError as error:
                    log.warning("cannot destroy sgpu%d of %s: %s", index, bdf, error)
                    continue
                log.info("destroyed sgpu%d of %s: its Pod %s is gone", index, bdf, pod)
                destroyed.append(key)
                seen.discard(key)
        self.orphans = {key: since for key, since in self.orphans.items() if key in seen}
        return destroyed
