"""T-Head (PPU) container responses.

No visible-devices variable in any mode: T-Head has no container-runtime hook, so every grant
is its device nodes, all required: the two shared control nodes `/dev/alixpu` and
`/dev/alixpu_ctl`, then `/dev/alixpu_ppu<index>` per card. A card node is proven to address
the card by its minor number, which must equal the minor the detector recorded
(`physicalIndexes[0]`); a card without one, or a node with another, fails closed rather than
hand the container someone else's card.

Sliced grants add the pair `hggc_quota.so` (enforcement) + `hgml_dlsym_hook.so` (it makes the
container's `ppu-smi` report the quota), preloaded through `/etc/ld.so.preload`, with
`HGGC_DEVICE_SM_LIMIT` (emitted even at 100: the library refuses a card whose figure is missing)
and `HGGC_DEVICE_MEMORY_LIMIT_<i>` in bare MiB by position, and a per-container ledger region
(`HGGC_LEDGER_PATH`) that the mounted `ppu-monitor` reads. The pair carries no runtime-version
subdirectory (the PPU SDK lives in the workload image). A workload preloading its own `dlsym`
interposer through `LD_PRELOAD` keeps the quota but `ppu-smi` then shows the whole card: a
caveat the library cannot detect, not an error.

A partition (HGML's MIG, made at Allocate by `mig.Partitioner` over HGML) is handed over as the
five nodes T-Head's container-isolation documentation names: the two control nodes, the parent
card's node (proven as above), and the capability nodes of the partition's GPU instance and of
its compute instance, `/dev/alixpu-caps/alixpu-cap<minor>`. Those minors are read from the
driver's procfs (`/proc/driver/alixpu/capabilities/ppu<index>/mig/gi<id>[/ci<id>]/access`, field
`DeviceFileMinor:`) at every grant, never cached: the driver renumbers them as partitions come
and go, so a cached one would address a stranger's partition. Each capability node must carry
the minor procfs names. Nothing travels in the environment: these nodes are all the container
can reach.
"""

from __future__ import annotations

from dataclasses import replace

from chain.devices import DevicesGroup
from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    GrantedCard,
    IsolationFile,
    SliceRequest,
    VendorResponder,
    ledgered_preload,
    memory_limits,
    preload_kit,
    staged_dir,
    unless_declared,
)
from nodeagent.plugin.mig import Made
from nodeagent.plugin.response import ContainerResponse, DeviceNode

MANUFACTURER = "thead"
CONTROL_NODES = ("/dev/alixpu", "/dev/alixpu_ctl")
LIBRARY_DIR = "/usr/local/vppu"
LEDGER_DIR = "/var/run/vppu"
QUIET = (("LIBHGGC_LOG_LEVEL", "1"),)
CAPABILITIES = "/proc/driver/alixpu/capabilities"
MINOR_FIELD = "DeviceFileMinor:"


def hggc_kit(lib_dir: str) -> tuple[IsolationFile, ...]:
    """The hggc pair as staged (no runtime-version subdirectory), with its preload list and the
    monitor mounted beside it."""
    return preload_kit(
        staged_dir(lib_dir, MANUFACTURER), ("hgml_dlsym_hook.so", "hggc_quota.so"), ("ppu-monitor",)
    )


def card_node(index: int) -> str:
    return f"/dev/alixpu_ppu{index}"


def capability_node(minor: int) -> str:
    return f"/dev/alixpu-caps/alixpu-cap{minor}"


def access_file(index: int, gpu_instance: int, compute_instance: int | None = None) -> str:
    """The procfs file naming a GPU instance's (or its compute instance's) capability node."""
    instance = f"{CAPABILITIES}/ppu{index}/mig/gi{gpu_instance}"
    if compute_instance is not None:
        instance += f"/ci{compute_instance}"
    return f"{instance}/access"


def _capability_minor(text: str | None, path: str) -> int:
    for line in (text or "").splitlines():
        rest = line.strip().removeprefix(MINOR_FIELD)
        if rest != line.strip():
            if not rest.strip().isdigit():
                raise ValueError(f"capability file {path!r}: {MINOR_FIELD} {rest.strip()!r}")
            return int(rest)
    if text is None:
        raise ValueError(f"capability file {path!r} cannot be read")
    raise ValueError(f"capability file {path!r} carries no {MINOR_FIELD} field")


def _numbered(nodes: DeviceNodes, path: str, want: int, what: str) -> DeviceNode:
    have = nodes.char_minor(path)
    if have is None:
        raise ValueError(f"{what}: the host has no character device {path!r}")
    if have != want:
        raise ValueError(
            f"{what}: device node {path!r} carries minor {have}, want {want}: fail closed"
        )
    return DeviceNode(path, path)


def device_nodes(cards: Cards, nodes: DeviceNodes) -> tuple[DeviceNode, ...]:
    """The control nodes once, then each card's node, every one proven present."""
    found = []
    for path in CONTROL_NODES:
        if nodes.char_minor(path) is None:
            raise ValueError(f"device node {path!r}: the host has no character device there")
        found.append(DeviceNode(path, path))
    for granted in cards:
        want = granted.physical_index(0)
        if want is None:
            raise ValueError(
                f"card {granted.card.id}: no recorded minor number to prove its device node "
                "addresses it: fail closed"
            )
        found.append(
            _numbered(nodes, card_node(granted.card.index), want, f"card {granted.card.id}")
        )
    return tuple(found)


def partition_nodes(card: GrantedCard, made: Made, nodes: DeviceNodes) -> tuple[DeviceNode, ...]:
    """The control nodes and the card's node, then the GPU and compute instance capability
    nodes of the partition, each proven by the minor procfs gives it now."""
    found = list(device_nodes((card,), nodes))
    index = card.card.index
    for path in (
        access_file(index, made.gpu_instance),
        access_file(index, made.gpu_instance, made.compute_instance),
    ):
        minor = _capability_minor(nodes.read(path), path)
        what = f"partition {made.mig_uuid} of card {card.card.id}"
        found.append(_numbered(nodes, capability_node(minor), minor, what))
    return tuple(found)


class Thead(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        return ContainerResponse(devices=device_nodes(cards, nodes))

    def partition(self, card: GrantedCard, made: Made, nodes: DeviceNodes) -> ContainerResponse:
        return ContainerResponse(devices=partition_nodes(card, made, nodes))

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        devices = device_nodes(cards, nodes)
        envs = {
            "HGGC_DEVICE_SM_LIMIT": str(request.limits.cores()),
            "HGGC_LEDGER_PATH": f"{LEDGER_DIR}/ledger",
            **memory_limits(cards, request.limits, "HGGC_DEVICE_MEMORY_LIMIT_"),
        }
        unless_declared(envs, QUIET, request.declared)
        kit = ledgered_preload(request, hggc_kit(request.lib_dir), LIBRARY_DIR, LEDGER_DIR)
        return replace(kit, envs=envs, devices=devices)

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        return hggc_kit(lib_dir)
