"""Ascend (NPU) container responses.

- Every grant names its cards in `ASCEND_VISIBLE_DEVICES` by the driver's index, which Ascend's
  container runtime turns into `/dev/davinci<N>`: the DCMI physical id (`physicalIndexes[0]`),
  or on the A5 generation (family `950`, DCMI V2) the device id (`physicalIndexes[1]`).
- Shared, visibility and sliced grants can put a second tenant on a card, so they turn on the
  card's container-share flag first (exclusive grants leave it alone). A driver without the
  entry point refuses the grant; a V2 driver declares no such flag, so the grant goes ahead and
  the card is logged. Any other read failure still tries the write; a failed write reports both
  failures and the `npu-smi` command that sets it on the host. The flag persists in the driver
  until the host reboots or `npu-smi set -t device-share` clears it.
- Sliced grants (one card only: vcann-rt's `npu_info.config` models a single physical NPU) add
  the vcann-rt preload (`libvruntime.so`, built per CANN major and family) and a per-container
  `npu_info.config` with `aicore-quota` and `memory-quota` (MiB), whose `virtual-npu-id` is the
  lowest one no other live container of the same card holds, reused on a retry.
- Every grant of an A5 card (any mode) also names the node's HCCL fabric topology file in
  `HCCL_TOPO_FILE_PATH`, chosen by the product the driver reports (`product.py`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from chain.devices import DevicesGroup
from chain.ledger import Mode
from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, VendorError
from nodeagent.plugin.grants import (
    LD_SO_PRELOAD,
    Cards,
    DeviceNodes,
    GrantedCard,
    IsolationFile,
    SliceRequest,
    VendorResponder,
    memory_limit_mib,
    preload_kit,
    staged_dir,
    unless_declared,
    visible_devices,
    write_host_file,
)
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.response import ContainerResponse, Mount
from nodeagent.vendors.ascend.dcmi import API_V2, open_dcmi
from nodeagent.vendors.ascend.product import ProductResolver, topology_env

log = logging.getLogger(__name__)

MANUFACTURER = "ascend"
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
A5_FAMILY = "950"
DEFAULT_CANN_MAJOR = 8
CONFIG = "/etc/enpu/vcann-rt/npu_info.config"
QUIET = (("ENPU_LOG_LEVEL", "1"), ("ENPU_DSMI_HOOK", "1"))
"""Only if undeclared: vcann-rt's per-call log, and the hook that makes the container's
`npu-smi info` report the slice's HBM quota instead of the whole card."""
SCHEDULING_POLICY = "2"
TENANTED = frozenset({Mode.SHARED, Mode.VISIBILITY, Mode.SLICED})


class ContainerShare(Protocol):
    """The DCMI container-share flag (`DcmiLibrary` implements it)."""

    @property
    def api(self) -> int:
        """The DCMI generation that answered (`API_V2` declares no container-share flag)."""
        ...

    def share_enabled(self, card: int, device: int) -> bool: ...

    def enable_share(self, card: int, device: int) -> None: ...


def visible_index(granted: GrantedCard) -> int:
    """The driver's index of a card: the physical id, or the device id on an A5."""
    a5 = granted.group.family.lower() == A5_FAMILY
    found = granted.physical_index(1 if a5 else 0)
    if found is None:
        kind = "device" if a5 else "physical"
        raise ValueError(f"accelerator {granted.card.id!r} carries no dcmi {kind} index")
    return found


def _missing_api(error: Exception) -> bool:
    return isinstance(error, VendorError) and error.code == FUNCTION_NOT_FOUND


def ensure_shared(share: ContainerShare | None, granted: GrantedCard, v2: bool) -> None:
    """Turn on the card's container-share flag unless it already is (see the module doc)."""
    if v2:
        log.info("card %s: DCMI V2 declares no container-share flag; granted", granted.card.id)
        return
    if share is None:
        raise ValueError("container-share actuator not configured (no DCMI library loaded)")
    card, device = granted.physical_index(1), granted.physical_index(2)
    if card is None or device is None:
        raise ValueError(f"accelerator {granted.card.id!r} carries no dcmi card/device index")
    try:
        if share.share_enabled(card, device):
            return
        read_error: Exception | None = None
    except Exception as error:
        if _missing_api(error):
            raise ValueError(f"card {card} device {device} cannot be shared: {error}") from error
        read_error = error
    try:
        share.enable_share(card, device)
    except Exception as error:
        if _missing_api(error):
            raise ValueError(f"card {card} device {device} cannot be shared: {error}") from error
        both = f"{error} (the flag read failed too: {read_error})" if read_error else str(error)
        raise ValueError(
            f"enable container-share mode of card {card} device {device}: {both}; enable it on "
            f"the host with `npu-smi set -t device-share -i {card} -c {device} -d 1`"
        ) from error
    if read_error is not None:
        log.warning("enabled container-share mode without a trustworthy read: %s", read_error)


def cann_dir(group: DevicesGroup) -> str:
    """`cann-<major>-<family>`: the vcann-rt build for the group's CANN major and family."""
    head = group.runtime_version.split(".", 1)[0]
    major = int(head) if head.isascii() and head.isdigit() else DEFAULT_CANN_MAJOR
    return f"cann-{major}-{group.family.lower()}"


def vcann_kit(group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
    """vcann-rt as staged for the group: the preload list, the build's `libvruntime.so` and
    its `enpu-monitor` (in that order)."""
    build = cann_dir(group)
    return preload_kit(
        staged_dir(lib_dir, MANUFACTURER),
        (f"{build}/lib/libvruntime.so",),
        (f"{build}/tools/enpu-monitor",),
    )


def read_config(path: Path) -> Mapping[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def virtual_npu_id(pods_dir: str, own: Path, physical: int) -> int:
    """This container's virtual id on the card: the one its own file holds (a retry), else the
    lowest that no other container's file names for the same physical id."""
    mine = read_config(own)
    if mine.get("physical-npu-id") == str(physical) and mine.get("virtual-npu-id", "").isdigit():
        return int(mine["virtual-npu-id"])
    taken = set()
    for path in Path(pods_dir).glob("*/*" + CONFIG):
        if path == own:
            continue
        other = read_config(path)
        if other.get("physical-npu-id") == str(physical):
            value = other.get("virtual-npu-id", "")
            if value.isdigit():
                taken.add(int(value))
    return min(set(range(len(taken) + 1)) - taken)


def render_config(physical: int, virtual: int, cores: int, memory_mib: int, card_id: str) -> str:
    lines = (
        f"physical-npu-id={physical}",
        f"virtual-npu-id={virtual}",
        f"aicore-quota={cores}",
        f"memory-quota={memory_mib}",
        f"shm-id={card_id.replace(' ', '-')}",
        f"scheduling-policy={SCHEDULING_POLICY}",
    )
    return "".join(line + "\n" for line in lines)


class Ascend(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def __init__(self, share: Callable[[], ContainerShare | None] | None = None) -> None:
        """`share` opens the DCMI library on first use (None: there is none)."""
        self._open_share = share or _open_dcmi
        self._share: ContainerShare | None = None
        self._opened = False
        self._configs = threading.Lock()
        self._product = ProductResolver()

    def share(self) -> ContainerShare | None:
        if not self._opened:
            self._share = self._open_share()
            self._opened = True
        return self._share

    def _v2(self) -> bool:
        found = self.share()
        return found is not None and found.api == API_V2

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        return visible_devices(VISIBLE_DEVICES_ENV, [str(visible_index(c)) for c in cards])

    def shown(
        self, cards: Cards, mode: Mode, channel: Channel, nodes: DeviceNodes
    ) -> ContainerResponse:
        return self._with_topology(super().shown(cards, mode, channel, nodes), cards)

    def _with_topology(self, response: ContainerResponse, cards: Cards) -> ContainerResponse:
        """The response with the first A5 card's HCCL topology file, when it can be told."""
        a5 = next((c for c in cards if c.group.family.lower() == A5_FAMILY), None)
        if a5 is None:
            return response
        found = topology_env(self._product, self.share(), a5.card.id, a5.card.physical_indexes)
        return replace(response, envs={**response.envs, **found}) if found else response

    def prepare(self, cards: Cards, mode: Mode) -> None:
        if mode in TENANTED:
            for granted in cards:
                ensure_shared(self.share(), granted, self._v2())

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        if len(cards) != 1:
            raise ValueError(
                f"sliced container {request.container!r} allocated {len(cards)} accelerators, "
                "but vcann-rt logical slicing is single-NPU"
            )
        granted = cards[0]
        index = visible_index(granted)
        physical = granted.physical_index(0)
        if physical is None:
            raise ValueError(f"accelerator {granted.card.id!r} carries no dcmi physical index")
        mib = memory_limit_mib(granted.group.memory, request.limits)
        ensure_shared(self.share(), granted, self._v2())
        own = Path(request.work_dir + CONFIG)
        with self._configs:  # two slices of one card must not both take the lowest free id
            virtual = virtual_npu_id(request.pods_dir, own, physical)
            text = render_config(physical, virtual, request.limits.cores(), mib, granted.card.id)
            write_host_file(own, text)
        envs = {VISIBLE_DEVICES_ENV: str(index)}
        unless_declared(envs, QUIET, request.declared)
        preload, runtime, monitor = vcann_kit(granted.group, request.lib_dir)
        mounts = (
            Mount(LD_SO_PRELOAD, preload.path, True),
            Mount("/opt/enpu/vcann-rt/lib/libvruntime.so", runtime.path, True),
            Mount("/opt/enpu/vcann-rt/tools/enpu-monitor", monitor.path, True),
            Mount(CONFIG, str(own), read_only=True),
            Mount("/dev/shm", "/dev/shm"),
        )
        response = ContainerResponse(envs=envs, mounts=mounts, directories=(request.work_dir,))
        return self._with_topology(response, cards)

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        return vcann_kit(group, lib_dir)


def _open_dcmi() -> ContainerShare | None:
    try:
        return open_dcmi()
    except OSError as error:
        log.warning("DCMI could not be loaded for the container-share flag: %s", error)
        return None
