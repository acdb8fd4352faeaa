"""One card of a `Devices` spec: its identity, topology, health and what it can be cut into.

Two ways to cut a card; a card offers one of them (should both appear, partitions win):
- *logical slices* (`logicalSliced`): software-enforced shares of memory and compute, counted in
  units of the card (M = 1,600,000);
- *hardware partitions* (`physicalSliced`, NVIDIA MIG): fixed profiles at fixed placements.

The predicates below are the only place that decides which families a card serves.
See `chain.devices` for the wire conventions (parse/render, omitempty).
"""

from __future__ import annotations

from dataclasses import dataclass

from chain import fields
from chain.partitions import Placement, parse_placements

Obj = dict[str, object]


@dataclass(frozen=True)
class PartitionProfile:
    """`AcceleratorPhysicalSlicedProfile`: one hardware partition shape a card offers.

    `name` is the published spelling (`1g.10gb`); `placements` are the legal slots on an empty
    card, cached at detection so the ledger can count what still fits without asking the driver.
    """

    name: str
    memory_mib: int
    count: int
    """Most instances of this profile one card can hold."""
    compute_slices: int = 0
    memory_slices: int = 0
    placements: tuple[Placement, ...] = ()

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> PartitionProfile:
        return cls(
            name=fields.string(obj, "name", path, required=True),
            memory_mib=fields.integer(obj, "memoryMib", path),
            count=fields.integer(obj, "count", path),
            compute_slices=fields.integer(obj, "computeSlices", path),
            memory_slices=fields.integer(obj, "memorySlices", path),
            placements=parse_placements(obj, "placements", path),
        )

    def render(self) -> Obj:
        out: Obj = {"name": self.name, "memoryMib": self.memory_mib}
        if self.compute_slices:
            out["computeSlices"] = self.compute_slices
        if self.memory_slices:
            out["memorySlices"] = self.memory_slices
        out["count"] = self.count
        if self.placements:
            out["placements"] = [placement.render() for placement in self.placements]
        return out


@dataclass(frozen=True)
class LogicalSliced:
    """How many logical slices (time/VRAM shares enforced in software) a card hosts at most."""

    count: int = 0
    cores_percentage_overcommit: bool = False
    """Each slice may ask for up to 100 % of the cores (the sum may exceed the card)."""

    def __bool__(self) -> bool:
        return bool(self.count or self.cores_percentage_overcommit)

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> LogicalSliced:
        return cls(
            count=fields.integer(obj, "count", path),
            cores_percentage_overcommit=fields.boolean(obj, "coresPercentageOvercommit", path),
        )

    def render(self) -> Obj:
        out: Obj = {"count": self.count}
        if self.cores_percentage_overcommit:
            out["coresPercentageOvercommit"] = True
        return out


@dataclass(frozen=True)
class PhysicalSliced:
    """The hardware partitions (MIG) a card offers; `count` sizes its partition token pool."""

    count: int = 0
    profiles: tuple[PartitionProfile, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.count or self.profiles)

    def profile(self, name: str) -> PartitionProfile | None:
        return next((entry for entry in self.profiles if entry.name == name), None)

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> PhysicalSliced:
        return cls(
            count=fields.integer(obj, "count", path),
            profiles=tuple(
                PartitionProfile.parse(item, where)
                for item, where in fields.items(obj, "profiles", path)
            ),
        )

    def render(self) -> Obj:
        out: Obj = {"count": self.count}
        if self.profiles:
            out["profiles"] = [profile.render() for profile in self.profiles]
        return out


@dataclass(frozen=True)
class AcceleratorStatus:
    unhealthy: bool = False
    logical_sliced: LogicalSliced = LogicalSliced()
    physical_sliced: PhysicalSliced = PhysicalSliced()

    @property
    def partitioned(self) -> bool:
        """`IsPartitioned`: cut into hardware partitions, so it serves only partition requests."""
        return self.physical_sliced.count > 0

    @property
    def logically_sliceable(self) -> bool:
        """`IsLogicallySliceable`: takes logical slices, and is not partitioned."""
        return self.logical_sliced.count > 0 and not self.partitioned

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> AcceleratorStatus:
        return cls(
            unhealthy=fields.boolean(obj, "unhealthy", path),
            logical_sliced=LogicalSliced.parse(
                fields.child(obj, "logicalSliced", path), fields.at(path, "logicalSliced")
            ),
            physical_sliced=PhysicalSliced.parse(
                fields.child(obj, "physicalSliced", path), fields.at(path, "physicalSliced")
            ),
        )

    def render(self) -> Obj:
        out: Obj = {"unhealthy": self.unhealthy}
        if self.logical_sliced:
            out["logicalSliced"] = self.logical_sliced.render()
        if self.physical_sliced:
            out["physicalSliced"] = self.physical_sliced.render()
        return out


@dataclass(frozen=True)
class Roce:
    """RoCE address of a card (Ascend only)."""

    ip: str = ""
    subnet_mask: str = ""
    gateway: str = ""

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> Roce:
        return cls(
            fields.string(obj, "ip", path),
            fields.string(obj, "subnetMask", path),
            fields.string(obj, "gateway", path),
        )

    def render(self) -> Obj:
        pairs = (("ip", self.ip), ("subnetMask", self.subnet_mask), ("gateway", self.gateway))
        return {key: value for key, value in pairs if value}


@dataclass(frozen=True)
class DeviceTopology:
    pci_bus_id: str = ""
    """`0000:04:00.0`."""
    pci_root_id: str = ""
    pci_class: str = ""
    numa_affinity: str = ""
    """NUMA nodes as a range list (`0`, `0-1`); empty when the platform has no NUMA."""
    cpu_affinity: str = ""
    """CPUs of those nodes as a range list (`0-13`)."""
    roce: Roce | None = None

    _FIELDS = (
        ("pciBusId", "pci_bus_id"),
        ("pciRootId", "pci_root_id"),
        ("pciClass", "pci_class"),
        ("numaAffinity", "numa_affinity"),
        ("cpuAffinity", "cpu_affinity"),
    )

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> DeviceTopology:
        values = {name: fields.string(obj, key, path) for key, name in cls._FIELDS}
        roce = None
        if obj.get("roce") is not None:
            roce = Roce.parse(fields.child(obj, "roce", path), fields.at(path, "roce"))
        return cls(**values, roce=roce)

    def render(self) -> Obj:
        out: Obj = {key: getattr(self, name) for key, name in self._FIELDS if getattr(self, name)}
        if self.roce is not None:
            out["roce"] = self.roce.render()
        return out


@dataclass(frozen=True)
class Accelerator:
    """One card."""

    id: str
    """Universally unique (NVIDIA: the GPU UUID `GPU-...`)."""
    index: int
    """Enumeration order from 0, per manufacturer."""
    physical_indexes: tuple[int, ...] | None = None
    """Vendor device-node numbers (NVIDIA: the minor number of `/dev/nvidia<N>`)."""
    topology: DeviceTopology = DeviceTopology()
    status: AcceleratorStatus = AcceleratorStatus()

    @property
    def is_partitioned(self) -> bool:
        """`IsPartitioned`: the card is cut into hardware partitions (MIG on)."""
        return self.status.partitioned

    @property
    def is_logically_sliceable(self) -> bool:
        """`IsLogicallySliceable`: the card takes logical slices (and is not partitioned)."""
        return self.status.logically_sliceable

    @property
    def is_whole_accelerator_capable(self) -> bool:
        """`IsWholeAcceleratorCapable`: the card can be given whole (exclusive or shared)."""
        return not self.is_partitioned

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> Accelerator:
        return cls(
            id=fields.string(obj, "id", path, required=True),
            index=fields.integer(obj, "index", path, required=True),
            physical_indexes=fields.integers(obj, "physicalIndexes", path),
            topology=DeviceTopology.parse(
                fields.child(obj, "topology", path), fields.at(path, "topology")
            ),
            status=AcceleratorStatus.parse(
                fields.child(obj, "status", path), fields.at(path, "status")
            ),
        )

    def render(self) -> Obj:
        out: Obj = {"id": self.id, "index": self.index}
        if self.physical_indexes is not None:
            out["physicalIndexes"] = list(self.physical_indexes)
        out["topology"] = self.topology.render()
        out["status"] = self.status.render()
        return out
