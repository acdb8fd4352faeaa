"""NVIDIA cards through NVML (nvidia-ml-py).

Per pass: initialise NVML (until it once succeeds), count the cards, read the driver and CUDA
versions, then read every card. A card whose identity cannot be read (handle, UUID, PCI bus id,
name, memory) is skipped; everything else has a safe default when the driver does not support
the query (`NOT_SUPPORTED` is common on consumer and older cards).

Cards with the same product name and memory size form one group. A card's `index` counts the
cards actually read, in NVML order (PCI bus order), so it stays dense when one is skipped.

Facts kept from upstream:
- memory is `total >> 20` MiB; on GDDR cards (bus narrower than 1024 bits) with ECC on, NVML
  reports 15/16 of the memory (ECC takes the rest), so it is scaled back by 16/15 to the size
  printed on the box (a Tesla T4 reports 15360 and is 16384);
- a card with uncorrected volatile DRAM ECC errors is unhealthy;
- a MIG-enabled card offers its MIG profiles (`physicalSliced`); any other card 128 logical
  slices with cores overcommit.

Judgment call: a card the kernel places on no NUMA node (`numa_node` -1, as in most VMs) on a
host with several nodes gets NVML's CPU affinity as its `cpuAffinity` and no `numaAffinity`
(on a single-node host sysfs already answers with that node; `Sysfs.topology`).

Judgment call: NVML initialisation is retried on every pass until it succeeds once; a driver
installed after the agent started is then found without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    DevicesGroup,
    DeviceTopology,
    LogicalSliced,
    PhysicalSliced,
    aggregate_sliced_detail,
)
from chain.keys import group_id
from chain.manufacturers import Manufacturer, default_manufacturers
from nodeagent.detect.base import CardMetrics
from nodeagent.detect.sysfs import Sysfs, cpu_list
from nodeagent.vendors.common.nvml import Nvml, load_nvml
from nodeagent.vendors.common.nvml_mig import mig_profiles, text
from nodeagent.vendors.common.nvmlike import compute_capability, runtime_version

NVIDIA = "nvidia"
LOGICAL_SLICES = 128
"""Logical slices one NVIDIA card hosts (HAMi-core enforces them; cores may overcommit)."""
GDDR_BUS_WIDTH_LIMIT = 1024
"""HBM buses are 1024 bits and wider; anything narrower is GDDR, whose ECC costs memory."""

CPU_WORD_BITS = 64
"""NVML's CPU set is an array of 64-bit words, CPU n at bit n % 64 of word n // 64."""
CPU_SET_WORDS = 128
"""Words asked for: 8192 CPUs, the most a Linux kernel is built for (NR_CPUS)."""

T = TypeVar("T")


def family(major: int, minor: int) -> str:
    """The architecture family of a compute capability."""
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ada-Lovelace" if minor == 9 else "Ampere"
    names = {1: "Tesla", 2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper"}
    names.update({10: "Blackwell", 12: "Blackwell"})
    return names.get(major, "")


def restored_memory(total_mib: int, bus_width: int, ecc_enabled: bool) -> int:
    if ecc_enabled and 0 < bus_width < GDDR_BUS_WIDTH_LIMIT:
        return total_mib * 16 // 15
    return total_mib


@dataclass
class _Group:
    """A group while cards are still being added to it."""

    head: DevicesGroup
    cards: list[Accelerator] = field(default_factory=list)

    def build(self) -> DevicesGroup:
        cards = tuple(self.cards)
        return replace(self.head, accelerators=cards, sliced_detail=aggregate_sliced_detail(cards))


class NvidiaDetector:
    """The NVIDIA detector over an NVML surface (the real `pynvml` unless one is given)."""

    manufacturer = NVIDIA

    def __init__(
        self,
        nvml: Nvml | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
    ) -> None:
        self._nvml = nvml if nvml is not None else load_nvml()
        self._sysfs = sysfs if sysfs is not None else Sysfs()
        self._maker = maker if maker is not None else default_manufacturers()[NVIDIA]
        self._with_memory = group_id_with_memory
        self._initialized = False
        self.problem: str | None = None
        """Why the last pass found no card, when NVML said why (read by the hold-back log)."""

    def _ready(self) -> Nvml | None:
        nvml = self._nvml
        if nvml is None:
            self.problem = "nvidia-ml-py (pynvml) is not installed in the agent's image"
            return None
        if not self._initialized:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as error:
                # No driver (or no library): no NVIDIA cards, not a failure; but say why.
                self.problem = (
                    f"NVML did not start ({error}); is the NVIDIA driver loaded, and is "
                    "libnvidia-ml.so.1 reachable in the container (the NVIDIA container toolkit "
                    "mounts it)?"
                )
                return None
            self._initialized = True
        return nvml

    def _count(self, nvml: Nvml) -> int:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as error:
            self.problem = f"NVML could not count the cards ({error})"
            return 0
        self.problem = None if count else "NVML started and counts no card"
        return count

    def detect(self) -> tuple[DevicesGroup, ...]:
        nvml = self._ready()
        if nvml is None:
            return ()
        count = self._count(nvml)
        if count == 0:
            return ()
        driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion, "")
        cuda = _optional(nvml, nvml.nvmlSystemGetCudaDriverVersion, 0)
        # A card that cannot be identified is left out of this pass; indexes stay dense.
        cards = [card for number in range(count) if (card := _identify(nvml, number))]
        groups: dict[tuple[str, int], _Group] = {}
        for index, card in enumerate(cards):
            group = groups.get((card.name, card.memory))
            if group is None:
                group = _Group(self._group_head(nvml, card, driver, cuda))
                groups[(card.name, card.memory)] = group
            group.cards.append(self._accelerator(nvml, card, index))
        return tuple(group.build() for group in groups.values())

    def _accelerator(self, nvml: Nvml, card: _Identity, index: int) -> Accelerator:
        minor = _optional(nvml, lambda: int(nvml.nvmlDeviceGetMinorNumber(card.handle)), -1)
        return Accelerator(
            id=card.uuid,
            index=index,
            physical_indexes=(minor if minor >= 0 else card.number,),
            topology=_with_cpu_affinity(nvml, card.handle, self._sysfs.topology(card.bus_id)),
            status=self._card_status(nvml, card.handle, card.memory),
        )

    def _group_head(self, nvml: Nvml, card: _Identity, driver: str, cuda: int) -> DevicesGroup:
        handle = card.handle
        major, minor = _optional(
            nvml, lambda: _pair(nvml.nvmlDeviceGetCudaComputeCapability(handle)), (0, 0)
        )
        return DevicesGroup(
            id=group_id(self._maker.name, card.name, card.memory, self._with_memory),
            manufacturer=self._maker.name,
            name=card.name,
            memory=card.memory,
            cores=_optional(nvml, lambda: int(nvml.nvmlDeviceGetNumGpuCores(handle)), 0),
            driver_version=text(driver),
            runtime_version=runtime_version(cuda),
            compute_capability=compute_capability(major, minor),
            family=family(major, minor),
        )

    def _card_status(self, nvml: Nvml, handle: object, memory: int) -> AcceleratorStatus:
        unhealthy = _uncorrected_errors(nvml, handle) > 0
        mig: list[int] = _optional(nvml, lambda: list(nvml.nvmlDeviceGetMigMode(handle)), [])
        if mig and mig[0] == nvml.NVML_DEVICE_MIG_ENABLE:
            profiles = mig_profiles(nvml, handle, memory, self._maker)
            most = max((profile.count for profile in profiles), default=0)
            return AcceleratorStatus(unhealthy, physical_sliced=PhysicalSliced(most, profiles))
        return AcceleratorStatus(unhealthy, logical_sliced=LogicalSliced(LOGICAL_SLICES, True))

    def monitor(self) -> tuple[CardMetrics, ...]:
        nvml = self._ready()
        if nvml is None:
            return ()
        metrics: list[CardMetrics] = []
        for number in range(self._count(nvml)):
            card = self._metrics(nvml, number, len(metrics))
            if card is not None:
                metrics.append(card)
        return tuple(metrics)

    def _metrics(self, nvml: Nvml, number: int, index: int) -> CardMetrics | None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(number)
            uuid = text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError:
            return None
        memory = _optional(nvml, lambda: nvml.nvmlDeviceGetMemoryInfo(handle), None)
        sensor = nvml.NVML_TEMPERATURE_GPU
        milliwatts = _optional(nvml, lambda: int(nvml.nvmlDeviceGetPowerUsage(handle)), 0)
        return CardMetrics(
            manufacturer=self._maker.name,
            id=uuid,
            index=index,
            unhealthy=_uncorrected_errors(nvml, handle) > 0,
            memory_total_mib=int(memory.total) >> 20 if memory else 0,
            memory_used_mib=int(memory.used) >> 20 if memory else 0,
            utilization_percent=_optional(
                nvml, lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu), 0
            ),
            temperature_celsius=_optional(
                nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, sensor)), 0
            ),
            power_watts=milliwatts // 1000,
        )


@dataclass(frozen=True)
class _Identity:
    """What a card must tell us to be listed at all."""

    number: int
    handle: object
    uuid: str
    bus_id: str
    name: str
    memory: int
    """MiB, ECC-restored."""


def _identify(nvml: Nvml, number: int) -> _Identity | None:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(number)
        uuid = text(nvml.nvmlDeviceGetUUID(handle))
        bus_id = text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        name = text(nvml.nvmlDeviceGetName(handle))
        total = _memory_total(nvml, handle)
    except nvml.NVMLError:
        return None
    width = _optional(nvml, lambda: int(nvml.nvmlDeviceGetMemoryBusWidth(handle)), 0)
    memory = restored_memory(total >> 20, width, _ecc_enabled(nvml, handle))
    return _Identity(number, handle, uuid, bus_id, name, memory)


def _with_cpu_affinity(nvml: Nvml, handle: object, topology: DeviceTopology) -> DeviceTopology:
    """A card sysfs places on no node of a multi-node host still has the CPUs NVML names.

    NVML's answer is what `nvidia-smi topo -m` prints as "CPU Affinity". The NUMA node stays
    empty: the firmware named none, and the device plugin then gives the kubelet no NUMA hint
    (no preference), which is true; a made-up node would pin Pods to the wrong socket.
    """
    if topology.numa_affinity or topology.cpu_affinity:
        return topology
    words: Sequence[int] = _optional(
        nvml, lambda: nvml.nvmlDeviceGetCpuAffinity(handle, CPU_SET_WORDS), ()
    )
    cpus = [
        word_at * CPU_WORD_BITS + bit
        for word_at, word in enumerate(words)
        for bit in range(CPU_WORD_BITS)
        if int(word) >> bit & 1
    ]
    return replace(topology, cpu_affinity=cpu_list(cpus)) if cpus else topology


def _pair(values: tuple[int, int] | list[int]) -> tuple[int, int]:
    return int(values[0]), int(values[1])


def _optional(nvml: Nvml, read: Callable[[], T], default: T) -> T:
    """A query the driver may not support: its default instead of an NVML error."""
    try:
        return read()
    except nvml.NVMLError:
        return default


def _memory_total(nvml: Nvml, handle: object) -> int:
    try:
        return int(nvml.nvmlDeviceGetMemoryInfo(handle, nvml.nvmlMemory_v2).total)
    except nvml.NVMLError:
        return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)


def _ecc_enabled(nvml: Nvml, handle: object) -> bool:
    modes: list[int] = _optional(nvml, lambda: list(nvml.nvmlDeviceGetEccMode(handle)), [])
    return bool(modes) and modes[0] == nvml.NVML_FEATURE_ENABLED


def _uncorrected_errors(nvml: Nvml, handle: object) -> int:
    return _optional(
        nvml,
        lambda: int(
            nvml.nvmlDeviceGetMemoryErrorCounter(
                handle,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
                nvml.NVML_MEMORY_LOCATION_DRAM,
            )
        ),
        0,
    )
