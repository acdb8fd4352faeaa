"""Hygon (DCU) container responses.

Exclusive, shared and visibility grants inject the nodes themselves: `/dev/kfd` and `/dev/mkfd`
once (permissions `rwm`), each card's DRM nodes, and the host's `/opt/hyhal` read-only (the
driver's user-space half). No variable is set. Every node is best-effort, as upstream: one the
host lacks is logged and left out.

Sliced grants add a per-container `vdev<i>.conf` per card, mounted read-only at
`/etc/vdev/docker/` where the host DTK/hyhal runtime reads it: the card's bus id, a CU bitmask
(two 64-bit words) of `ceil(cores% * CUs / 100)` CUs, the lowest ones no other slice of the card
holds (a hard spatial partition: the sum stays within one card), the VRAM cap in MiB, the
position (`device_id`, `vdev_id`), and a `pipe_id` no other slice of the card uses. A file that
already names the same card at that position is reused (a retry), so a slot's figures outlive
the allocation as upstream says. The host's `/opt/dtk` is mounted at `/opt/hygondriver`.

A partition (DMI's "MIG", made at Allocate by `mig.Partitioner` over `dmi_mig.DmiMig`) is handed
over as upstream does: the control nodes and the card's DRM nodes as above, the host's
`/opt/dtk` at `/opt/hygondriver` and `/opt/hyhal`, the compute instance's registry file mounted
read-only at its own path (`/etc/dmi_mig_config/ci/dev<i>gi<g>ci<c>.conf`: Hygon's runtime finds
the instance there, by absolute path), and `DMI_MIG_VISIBLE_DEVICE=MIG-<uuid>` (the prefix is
required: a bare UUID silently selects the first instance). The file is found by the UUID it
names, read at every grant; none names it, and the grant fails closed. One partition per
container: the runtime shows only one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    GrantedCard,
    SliceRequest,
    VendorResponder,
    memory_limit_mib,
    write_host_file,
)
from nodeagent.plugin.mig import Made
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount
from nodeagent.vendors.common.drm import optional_drm_nodes
from nodeagent.vendors.common.kfd_topology import card_topology
from nodeagent.vendors.hygon.driver import REGISTRY, UUID_PREFIX, registry_uuid

MANUFACTURER = "hygon"
CONTROL_NODES = ("/dev/kfd", "/dev/mkfd")
HYHAL = "/opt/hyhal"
DTK = "/opt/dtk"
VDEV_DIR = "/etc/vdev/docker"
MASK_BITS = 128
PIPES = 20
VDEV_IDS = 200
VISIBLE_PARTITION_ENV = "DMI_MIG_VISIBLE_DEVICE"


def registry_file_of(nodes: DeviceNodes, mig_uuid: str) -> str | None:
    """The compute instance registry file naming the partition, if the host has one."""
    folder = f"{REGISTRY}/ci"
    want = mig_uuid.removeprefix(UUID_PREFIX)
    for name in nodes.listing(folder):
        if name.endswith(".conf"):
            text = nodes.read(f"{folder}/{name}")
            if text is not None and registry_uuid(text) == want:
                return f"{folder}/{name}"
    return None


def read_vdev(text: str) -> dict[str, list[str]]:
    """`key: value` lines; a key may repeat (`cu_mask` does: low word, then high word)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def cus_of(vdev: dict[str, list[str]], where: Path) -> set[int]:
    words = vdev.get("cu_mask", [])
    if len(words) != 2:
        raise ValueError(f"{where}: expected two cu_mask words, found {len(words)}")
    try:
        mask = int(words[0], 16) | (int(words[1], 16) << 64)
    except ValueError:
        raise ValueError(f"{where}: cu_mask is not hexadecimal") from None
    return {bit for bit in range(MASK_BITS) if mask >> bit & 1}


def render_vdev(bus: str, cus: set[int], mib: int, position: int, pipe: int) -> str:
    mask = sum(1 << cu for cu in cus)
    lines = (
        f"PciBusId: {bus}",
        f"cu_mask: 0x{mask & (2**64 - 1):016x}",
        f"cu_mask: 0x{mask >> 64:016x}",
        f"cu_count: {len(cus)}",
        f"mem: {mib} MiB",
        f"device_id: {position}",
        f"vdev_id: {position}",
        f"pipe_id: {pipe}",
        "enable: 1",
    )
    return "".join(line + "\n" for line in lines)


class Hygon(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def __init__(self) -> None:
        self._slots = threading.Lock()

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        control = tuple(
            DeviceNode(path, path, "rwm") for path in CONTROL_NODES if nodes.exists(path)
        )
        mounts = (Mount(HYHAL, HYHAL, read_only=True),) if nodes.exists(HYHAL) else ()
        return ContainerResponse(
            mounts=mounts, devices=(*control, *optional_drm_nodes(cards, nodes))
        )

    def partition(self, card: GrantedCard, made: Made, nodes: DeviceNodes) -> ContainerResponse:
        found = registry_file_of(nodes, made.mig_uuid)
        if found is None:
            raise ValueError(
                f"partition {made.mig_uuid} of card {card.card.id}: no registry file under "
                f"{REGISTRY}/ci names it: fail closed"
            )
        shown = self.show((card,), nodes)
        mounts = [*shown.mounts, Mount(found, found, read_only=True)]
        if nodes.exists(DTK):
            mounts.insert(0, Mount("/opt/hygondriver", DTK, read_only=True))
        return ContainerResponse(
            envs={VISIBLE_PARTITION_ENV: made.mig_uuid},
            mounts=tuple(mounts),
            devices=shown.devices,
        )

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        shown = self.show(cards, nodes)
        folder = Path(request.work_dir + VDEV_DIR)
        with self._slots:  # two slices of one card must not both take the lowest free CUs
            for position, granted in enumerate(cards):
                self._write_slot(folder, position, granted, request, nodes)
        mounts = [*shown.mounts, Mount(VDEV_DIR, str(folder), read_only=True)]
        if nodes.exists(DTK):
            mounts.insert(0, Mount("/opt/hygondriver", DTK, read_only=True))
        return ContainerResponse(
            mounts=tuple(mounts), devices=shown.devices, directories=(request.work_dir,)
        )

    def _write_slot(
        self,
        folder: Path,
        position: int,
        granted: GrantedCard,
        request: SliceRequest,
        nodes: DeviceNodes,
    ) -> None:
        if position >= VDEV_IDS:
            raise ValueError(
                f"card {granted.card.id}: device ordinal {position} is not a usable vdev_id"
            )
        bus = granted.card.topology.pci_bus_id
        own = folder / f"vdev{position}.conf"
        if own.is_file():
            kept = read_vdev(own.read_text())
            if kept.get("PciBusId") == [bus] and kept.get("vdev_id") == [str(position)]:
                return
        # The detector reads no CU count (ROCm SMI has none); the driver's KFD topology does.
        total = granted.group.cores or card_topology(nodes, granted).compute_units
        if total > MASK_BITS:
            raise ValueError(f"card compute unit count {total} exceeds the 128-bit cu_mask width")
        need = min(-(-request.limits.cores() * total // 100), total)
        if need <= 0:
            raise ValueError(
                f"card {granted.card.id}: sliced request resolves to zero compute units "
                f"(cores-percent={request.limits.cores()}, card cores={total})"
            )
        taken: set[int] = set()
        pipes: set[int] = set()
        for path in Path(request.pods_dir).rglob("vdev*.conf"):
            if path == own:
                continue
            other = read_vdev(path.read_text())
            if other.get("PciBusId") == [bus]:
                taken |= cus_of(other, path)
                pipes |= {int(p) for p in other.get("pipe_id", []) if p.isdigit()}
        free = [cu for cu in range(total) if cu not in taken]
        if len(free) < need:
            raise ValueError(
                f"insufficient free compute units: need {need}, {len(free)} of {total} free"
            )
        spare = [pipe for pipe in range(PIPES) if pipe not in pipes]
        if not spare:
            raise ValueError(f"pipe_id pool exhausted for card {granted.card.id}")
        mib = memory_limit_mib(granted.group.memory, request.limits)
        write_host_file(own, render_vdev(bus, set(free[:need]), mib, position, spare[0]))
        os.chmod(folder, 0o777)
