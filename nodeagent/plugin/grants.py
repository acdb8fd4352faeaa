"""What every manufacturer's container response is built from (docs/design/node-agent.md,
"Device-plugin resources").

A responder (one module per manufacturer beside this one) turns the cards of one grant into a
`ContainerResponse`, purely: it reads `GrantedCard`s, the container's sliced limits and the host's
device nodes through `DeviceNodes`, and never writes. The allocator owns everything else
(identification, the mutex, the ledger, the annotation); a responder only says what the
container is given.

- `shown`: the exclusive, shared and visibility grants (the cards, nothing else);
- `sliced`: a logical slice, when the manufacturer's isolation is built here (`slices`); a
  manufacturer without it serves no `.sliced` resource and its detector's slices are not
  published (`served.py`), so no Pod can be promised one;
- `with_rdma`: every workload grant, whatever the manufacturer, names the RDMA network cards
  nearest its cards (`NCCL_IB_HCA`, docs/topology.md, "Best-connected card sets");
- `isolation_libraries`: the host files a slice of a group takes from the manufacturer's staged
  directory (`OPERATOR_LIB_DIR/<manufacturer>/`), named by the same helpers `sliced` mounts them
  with; `isolation.py` checks them before the group's slices are published.

Positional keys (`CUDA_DEVICE_MEMORY_LIMIT_<i>`, ...) follow the order `granted_cards` returns:
ascending accelerator index, the enumeration the detector recorded.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, Self

from chain.accelerators import Accelerator
from chain.devices import DevicesGroup, DevicesSpec
from chain.families import SLICED_CORES_PERCENTAGE, SLICED_MEMORY_MIB, SLICED_MEMORY_PERCENTAGE
from chain.ledger import Mode
from chain.ledger_rebuild import AllocationRecord
from chain.quantity import parse_quantity
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount
from nodeagent.topology.choice import NodeLinks

if TYPE_CHECKING:
    from nodeagent.plugin.mig import Made

OPERATOR_STATE_DIR = "/var/lib/gpustack/operator"
"""The agent's state on the host (its DaemonSet mounts it at the same path)."""
OPERATOR_LIB_DIR = f"{OPERATOR_STATE_DIR}/lib"
"""Where the device manager's init container stages the preload libraries on the host."""
OPERATOR_PODS_DIR = f"{OPERATOR_STATE_DIR}/pods"
LD_SO_PRELOAD = "/etc/ld.so.preload"
"""Every preload library is activated through this file, mounted read-only over the image's."""
PRELOAD_LIST = "ld.so.preload"
"""The staged file a grant mounts over `LD_SO_PRELOAD`, beside the libraries it names."""


@dataclass(frozen=True)
class IsolationFile:
    """A host file a sliced grant mounts from its manufacturer's staged directory."""

    path: str
    shared_object: bool = True
    """A library the container's loader preloads, so an ELF shared object this host can load;
    otherwise a file the grant only mounts (`ld.so.preload`, a monitor tool), which must exist
    or the container cannot start."""

    @property
    def name(self) -> str:
        """The file's base name (the name a grant mounts it under in the container)."""
        return self.path.rsplit("/", 1)[-1]


def staged_dir(lib_dir: str, manufacturer: str) -> str:
    """The manufacturer's staged directory on the host (`<lib_dir>/<manufacturer>`)."""
    return f"{lib_dir}/{manufacturer}"


def preload_kit(
    staged: str, libraries: Sequence[str], tools: Sequence[str] = ()
) -> tuple[IsolationFile, ...]:
    """A preload kit as staged in `staged`: its `ld.so.preload`, the libraries it names, then
    the tools mounted beside them (`libraries` and `tools` are paths below `staged`)."""
    return (
        IsolationFile(f"{staged}/{PRELOAD_LIST}", shared_object=False),
        *(IsolationFile(f"{staged}/{name}") for name in libraries),
        *(IsolationFile(f"{staged}/{name}", shared_object=False) for name in tools),
    )


@dataclass(frozen=True)
class GrantedCard:
    group: DevicesGroup
    card: Accelerator

    def physical_index(self, position: int = 0) -> int | None:
        """The card's `physicalIndexes[position]` (a device-node number, the driver's index);
        None when the detector could not tell it."""
        found = self.card.physical_indexes
        return found[position] if found is not None and len(found) > position else None


Cards = tuple[GrantedCard, ...]

NCCL_IB_HCA = "NCCL_IB_HCA"
"""NCCL's filter of the InfiniBand/RoCE devices it may use: comma-separated device names, each a
prefix unless the list starts with `=` (exact names)."""


def with_rdma(response: ContainerResponse, links: NodeLinks, cards: Cards) -> ContainerResponse:
    """`response` naming the RDMA devices nearest the granted cards in `NCCL_IB_HCA`, as exact
    names (`=mlx5_0,mlx5_1`: a bare `mlx5_1` would also match `mlx5_10`); unchanged when the node
    knows no RDMA device near them."""
    nics = links.rdma_for(granted.card.id for granted in cards)
    if not nics:
        return response
    return replace(response, envs={**response.envs, NCCL_IB_HCA: "=" + ",".join(nics)})


def granted_cards(record: AllocationRecord, spec: DevicesSpec, manufacturer: str) -> Cards:
    """The manufacturer's cards of a record, in index order; ValueError when a card left the
    node or the record holds none of this manufacturer's."""
    by_id = {
        card.id: GrantedCard(group, card)
        for group, card in spec.cards()
        if group.manufacturer == manufacturer
    }
    cards = []
    for claim in record.claims():
        if claim.manufacturer != manufacturer:
            continue
        found = by_id.get(claim.row.id)
        if found is None:
            raise ValueError(f"card {claim.row.id} is no longer on this node")
        cards.append(found)
    if not cards:
        raise ValueError(f"the grant holds no {manufacturer} card")
    return tuple(sorted(cards, key=lambda granted: granted.card.index))


@dataclass(frozen=True)
class SlicedLimits:
    """The sizes a sliced container asks for (0 = not asked)."""

    cores_percentage: int = 0
    memory_percentage: int = 0
    memory_mib: int = 0

    @classmethod
    def from_container(cls, container: Mapping[str, object], base: str) -> SlicedLimits:
        resources = container.get("resources")
        limits = resources.get("limits") if isinstance(resources, Mapping) else None
        limits = limits if isinstance(limits, Mapping) else {}

        def whole(suffix: str) -> int:
            raw = limits.get(base + suffix)
            if raw is None:
                return 0
            value = parse_quantity(str(raw))
            if value.denominator != 1 or value < 0:
                raise ValueError(f"{base}{suffix}: expected a whole number, got {raw!r}")
            return int(value)

        return cls(
            cores_percentage=whole(SLICED_CORES_PERCENTAGE),
            memory_percentage=whole(SLICED_MEMORY_PERCENTAGE),
            memory_mib=whole(SLICED_MEMORY_MIB),
        )

    def cores(self) -> int:
        """The compute share in percent: 100 (the whole card) when not asked."""
        return self.cores_percentage or 100


def memory_limit_mib(card_mib: int, limits: SlicedLimits) -> int:
    """The VRAM cap of one card: a percentage wins over MiB; never above the card."""
    if limits.memory_percentage > 0:
        return min(card_mib * limits.memory_percentage // 100, card_mib)
    if limits.memory_mib > 0:
        return min(limits.memory_mib, card_mib)
    raise ValueError(
        "a sliced container must limit .sliced.memory-percentage or .sliced.memory-mib"
    )


def declared_env(container: Mapping[str, object]) -> frozenset[str]:
    """Names a container sets in `env:` (`envFrom` is not visible to the plugin)."""
    entries = container.get("env")
    if not isinstance(entries, list):
        return frozenset()
    return frozenset(
        str(entry["name"]) for entry in entries if isinstance(entry, Mapping) and "name" in entry
    )


def unless_declared(
    envs: dict[str, str], defaults: Collection[tuple[str, str]], declared: Collection[str]
) -> None:
    """Add each default the container does not set itself (never overwrite the workload)."""
    for name, value in defaults:
        if name not in declared:
            envs[name] = value


def memory_limits(cards: Cards, limits: SlicedLimits, prefix: str) -> dict[str, str]:
    """`<prefix><i>` = each card's VRAM cap in bare MiB, by its position in the grant."""
    return {
        f"{prefix}{position}": str(memory_limit_mib(granted.group.memory, limits))
        for position, granted in enumerate(cards)
    }


def ledgered_preload(
    request: SliceRequest, kit: Sequence[IsolationFile], library_dir: str, ledger: str
) -> ContainerResponse:
    """The mounts and directories of a preload library that keeps its accounting in a
    per-container ledger region (AMD, T-Head): the staged `kit` read-only (its `ld.so.preload`
    over `/etc/ld.so.preload`, the library and its tools under `library_dir`), and `ledger`
    (the region's directory in the container, `/var/run/<name>`) from `run/<name>` under the
    container's work directory."""
    region = request.work_dir + ledger.removeprefix("/var")
    mounts = (
        *(
            Mount(
                LD_SO_PRELOAD if staged.name == PRELOAD_LIST else f"{library_dir}/{staged.name}",
                staged.path,
                read_only=True,
            )
            for staged in kit
        ),
        Mount(ledger, region),
    )
    return ContainerResponse(mounts=mounts, directories=(request.work_dir, region))


class HostRecord:
    """A frozen dataclass kept on the host as one JSON object, under the keys `KEYS` names for
    its fields (a grant's marker): `render` writes it, `read` gives it back, or None when the
    file is missing or is not such a record."""

    KEYS: ClassVar[Mapping[str, str]] = {}

    def render(self) -> str:
        return json.dumps({key: getattr(self, name) for name, key in self.KEYS.items()})

    @classmethod
    def read(cls, path: Path) -> Self | None:
        try:
            raw = json.loads(path.read_text())
            kinds = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
            values = {
                name: int(raw[key]) if kinds[name] == "int" else str(raw[key])
                for name, key in cls.KEYS.items()
            }
            return cls(**values)
        except (OSError, ValueError, KeyError, TypeError):
            return None


def write_host_file(path: Path, text: str) -> None:
    """Write a file a slice's runtime reads on the host (mode 0644), whole or not at all: a
    reader never sees half of it, and an agent dying mid-write leaves the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.chmod(temporary, 0o644)
    temporary.replace(path)


def pod_work_dir(pod_uid: str, container: str, pods_dir: str = OPERATOR_PODS_DIR) -> str:
    """The per-container working directory on the host; collected once the Pod is gone."""
    return f"{pods_dir}/{pod_uid}/c-{container}"


class DeviceNodes:
    """The host's device nodes and the few host files a responder reads (a card's topology
    under `/sys`), read under `root` (the agent mounts the host's `/dev` and `/sys` at the same
    paths); `SimulatedNodes` stands in for them in tests and simulated nodes."""

    def __init__(self, root: str = "/") -> None:
        self.root = root

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(os.path.join(self.root, path.lstrip("/")))
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def char_minor(self, path: str) -> int | None:
        """The minor number of the character device at `path`; None when there is none."""
        found = self._stat(path)
        if found is None or not stat.S_ISCHR(found.st_mode):
            return None
        return os.minor(found.st_rdev)

    def read(self, path: str) -> str | None:
        """A host file's text; None when it cannot be read."""
        try:
            return Path(self.root, path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def listing(self, path: str) -> list[str]:
        """The names in a host directory, sorted; empty when it cannot be read."""
        try:
            return sorted(entry.name for entry in Path(self.root, path.lstrip("/")).iterdir())
        except OSError:
            return []

    def optional(self, *paths: str) -> tuple[DeviceNode, ...]:
        """Those of `paths` the host exposes, in the order given."""
        return tuple(DeviceNode(path, path) for path in paths if self.exists(path))


class SimulatedNodes(DeviceNodes):
    """A host whose device nodes are the keys of `minors` (character devices, with those
    minor numbers) and whose readable files are `files` (path to text)."""

    def __init__(self, minors: Mapping[str, int], files: Mapping[str, str] | None = None) -> None:
        super().__init__("/")
        self.minors = dict(minors)
        self.files = dict(files or {})

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def listing(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(
            {f[len(prefix) :].split("/", 1)[0] for f in self.files if f.startswith(prefix)}
        )

    def exists(self, path: str) -> bool:
        return path in self.minors

    def char_minor(self, path: str) -> int | None:
        return self.minors.get(path)


@dataclass(frozen=True)
class SliceRequest:
    """Everything about the container a sliced response reads besides its cards."""

    limits: SlicedLimits
    pod_uid: str
    container: str
    channel: Channel
    declared: frozenset[str] = frozenset()
    pods_dir: str = OPERATOR_PODS_DIR
    lib_dir: str = OPERATOR_LIB_DIR

    @property
    def work_dir(self) -> str:
        return pod_work_dir(self.pod_uid, self.container, self.pods_dir)


class Responder(Protocol):
    manufacturer: str
    slices: bool
    """Whether logical slices are served, with the runtime isolation the seed documents."""
    channels: bool
    """Whether the injection channel switch (`GPUSTACK_<MFR>_DEVICE_INJECTION_STRATEGY`)
    applies; a manufacturer whose grant travels as device nodes or a vendor variable without a
    CDI name keeps its one way."""

    def shown(
        self, cards: Cards, mode: Mode, channel: Channel, nodes: DeviceNodes
    ) -> ContainerResponse:
        """Exclusive, shared and visibility grants (`mode`): show the cards, nothing else."""
        ...

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        """A logical slice: the shown cards plus the manufacturer's isolation."""
        ...

    def partition(self, card: GrantedCard, made: Made, nodes: DeviceNodes) -> ContainerResponse:
        """A hardware partition made on `card` for the container (and the visibility grant of
        a partition-backed owner's sidecar): the partition, never its parent card alone."""
        ...

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        """The host files a sliced grant of `group` preloads or mounts from `lib_dir` (the
        very paths `sliced` names); empty when the manufacturer's slices need none."""
        ...


class VendorResponder:
    """What the responders share: a grant holds at least one card, `show` says what the
    container is given, and no slices unless the subclass serves them (`slices`, `sliced`)."""

    manufacturer = ""
    slices = False
    channels = False

    def shown(
        self, cards: Cards, mode: Mode, channel: Channel, nodes: DeviceNodes
    ) -> ContainerResponse:
        if not cards:
            raise ValueError(f"the grant holds no {self.manufacturer} card")
        self.prepare(cards, mode)
        return self.show(cards, nodes)

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        raise NotImplementedError

    def prepare(self, cards: Cards, mode: Mode) -> None:
        """Anything the host must do before a grant of `mode` starts (nothing by default)."""

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        raise ValueError(f"{self.manufacturer} logical slices are not served by this agent")

    def partition(self, card: GrantedCard, made: Made, nodes: DeviceNodes) -> ContainerResponse:
        raise ValueError(f"{self.manufacturer} partitions are not made by this agent")

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        """None by default: slices the driver makes (MetaX's sgpu subdevices, Cambricon's sMLU
        instances), a host module's QoS variables (MThreads) or a quota file the host runtime
        reads (Hygon) preload nothing. A responder that preloads a library names it."""
        return ()


class VisibleById(VendorResponder):
    """A grant the vendor's container runtime injects from one variable naming the cards'
    ids (`variable`)."""

    variable = ""

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        return visible_devices(self.variable, [granted.card.id for granted in cards])


def visible_devices(variable: str, values: Sequence[str]) -> ContainerResponse:
    """A grant carried by one vendor variable, which the vendor's container runtime turns into
    device nodes (`ASCEND_VISIBLE_DEVICES=0,1`)."""
    return ContainerResponse(envs={variable: ",".join(values)})
