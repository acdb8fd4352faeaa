"""Simulated hardware profiles: which cards a node has, as NVML would report them.

A profile is a YAML or JSON file:

```yaml
description: four Tesla T4 (AWS g4dn.12xlarge)
driver: {version: "580.126.09", cudaVersion: 13000}   # `loaded: false`: no driver at all;
                                                      # `legacyProfileInfo: true`: pre-V MIG call
numa: {"0": "0-23,48-71", "1": "24-47,72-95"}           # NUMA node -> CPU list
models:
  t4:
    name: Tesla T4
    memoryMib: 15360          # what NVML reports (after ECC took its share)
    memoryBusWidth: 256
    ecc: true
    computeCapability: "7.5"
    cores: 2560
    pciDevice: "0x1eb8"       # PCI device and subsystem device IDs (what nfd-worker reads)
    pciSubsystemDevice: "0x12a2"
    mig:                      # only on MIG-capable models
      profiles:
        - {profile: 0, id: 19, name: MIG 1g.10gb, slices: 1, instances: 7,
           memoryMb: 9984, starts: [0, 1, 2, 3, 4, 5, 6], size: 1}
cards:
  - {model: t4, busId: "00000000:00:1B.0", numaNode: 0}    # optional: uuid, minor, mig: true,
                                                          # switch: the PCIe switch it is under
directLinks: [[0, 1, 2, 3]]   # card numbers on one card-to-card fabric (NVLink/NVSwitch)
network:                      # network cards on the PCI bus (sysfs class/net, class/infiniband)
  - {name: mlx5_0, interface: ibp26s0, busId: "0000:1c:00.0", numaNode: 0, switch: s0,
     linkLayer: InfiniBand, speedMbps: 400000, rdma: true}   # RoCE: linkLayer Ethernet, ip
faults:
  - {kind: unhealthy, card: 2, from: 3}                   # see FAULT_KINDS
```

A *pass* is one `nvmlDeviceGetCount` call (the detector and the monitor each make one per
pass); faults apply to the passes `from`..`until` (1-based, inclusive; `until` open by default).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from chain import fields

PROFILES_DIR = Path(__file__).parent / "profiles"

FAULT_KINDS = {
    "panic": "nvmlDeviceGetCount raises a non-NVML error: the pass fails (could not measure)",
    "count-error": "nvmlDeviceGetCount raises NVMLError_Unknown: the pass finds no card",
    "unhealthy": "the card reports uncorrected volatile DRAM ECC errors",
    "lost": "the card's handle raises NVMLError_GpuIsLost: the card is skipped",
}


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile: `profile` is the NVML profile index, `id` what the driver
    calls it in placement queries."""

    profile: int
    id: int
    name: str
    slices: int
    instances: int
    memory_mb: int
    starts: tuple[int, ...]
    size: int


@dataclass(frozen=True)
class Model:
    name: str
    memory_mib: int
    memory_bus_width: int = 0
    ecc: bool = False
    compute_capability: tuple[int, int] = (0, 0)
    cores: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_capable: bool = False
    pci_device: str = "0x0000"
    """The PCI device ID (`0x1eb8` for a T4), as sysfs and so nfd-worker read it."""
    pci_subsystem_device: str = "0x0000"
    """The board's PCI subsystem device ID (the subsystem vendor is NVIDIA's too)."""


@dataclass(frozen=True)
class Card:
    model: Model
    uuid: str
    bus_id: str
    minor: int
    numa_node: int = -1
    mig: bool = False
    switch: str = ""
    """The PCIe switch the card is under (a name the profile makes up); empty: on a root port."""


NIC_LINK_LAYERS = ("Ethernet", "InfiniBand")


@dataclass(frozen=True)
class NetworkPort:
    """A network card of the simulated host, laid out in its sysfs (`nodeagent.simulate.sysfs`)."""

    name: str
    """The RDMA device name when `rdma`, the interface name otherwise."""
    interface: str
    bus_id: str
    numa_node: int = -1
    switch: str = ""
    link_layer: str = "Ethernet"
    speed_mbps: int = 0
    rdma: bool = False
    ip: str = ""
    """An RDMA Ethernet port's IPv4 address: its RoCE GIDs are made from it."""


@dataclass(frozen=True)
class Fault:
    kind: str
    first: int = 1
    last: int | None = None
    card: int | None = None

    def active(self, number: int) -> bool:
        return number >= self.first and (self.last is None or number <= self.last)


@dataclass(frozen=True)
class Profile:
    name: str
    cards: tuple[Card, ...]
    driver_loaded: bool = True
    driver_version: str = ""
    cuda_version: int = 0
    numa: Mapping[int, str] | None = None
    faults: tuple[Fault, ...] = ()
    description: str = ""
    legacy_profile_info: bool = False
    """An old driver: no versioned GPU instance profile call, so profiles come without names."""
    direct_links: tuple[frozenset[int], ...] = ()
    """Sets of card numbers joined all-to-all by a card-to-card fabric (NVLink through NVSwitch)."""
    network: tuple[NetworkPort, ...] = ()


def shipped_profiles() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.yaml"))


def read_profile_file(name_or_path: str) -> tuple[Path, fields.Obj]:
    """The profile document of a shipped profile name (`t4x4`) or a file path."""
    path = Path(name_or_path)
    if not path.is_file():
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(shipped_profiles())
        raise ValueError(f"no profile {name_or_path!r}: not a file, nor one of {known}")
    raw = path.read_text(encoding="utf-8")
    data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    try:
        return path, fields.as_object(data, "$")
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def parse_profile(name: str, data: object) -> Profile:
    body = fields.as_object(data, "$")
    driver = fields.child(body, "driver", "")
    models = {
        key: _model(fields.as_object(value, f"models.{key}"), f"models.{key}")
        for key, value in fields.child(body, "models", "").items()
    }
    cards = tuple(
        _card(item, where, models, name, number)
        for number, (item, where) in enumerate(fields.items(body, "cards", ""))
    )
    numa = _numa(body.get("numa"))
    loaded = driver.get("loaded", True)
    if not isinstance(loaded, bool):
        raise ValueError("driver.loaded: expected true or false")
    return Profile(
        name=name,
        cards=cards,
        driver_loaded=loaded,
        driver_version=fields.string(driver, "version", "driver"),
        cuda_version=fields.integer(driver, "cudaVersion", "driver"),
        numa=numa,
        faults=tuple(
            _fault(item, where, len(cards)) for item, where in fields.items(body, "faults", "")
        ),
        description=fields.string(body, "description", ""),
        legacy_profile_info=fields.boolean(driver, "legacyProfileInfo", "driver"),
        direct_links=_direct_links(body, len(cards)),
        network=_check_switches(
            cards,
            tuple(_network_port(item, where) for item, where in fields.items(body, "network", "")),
        ),
    )


def host_bridge_of(bus_id: str) -> tuple[str, int]:
    """The domain and the first bus of the host bridge a simulated device hangs under: each
    group of 16 buses is one root complex (`nodeagent.simulate.sysfs`)."""
    domain, bus = bus_id.lower().split(":")[-3:-1]
    return domain[-4:].rjust(4, "0"), int(bus, 16) & 0xF0


def _check_switches(
    cards: tuple[Card, ...], network: tuple[NetworkPort, ...]
) -> tuple[NetworkPort, ...]:
    """The network ports, once every switch's members are known to share one host bridge (a
    switch hangs under one root port)."""
    bridges: dict[str, tuple[str, int]] = {}
    members = [(card.switch, card.bus_id, f"cards[{n}]") for n, card in enumerate(cards)]
    members += [(nic.switch, nic.bus_id, f"network[{n}]") for n, nic in enumerate(network)]
    for switch, bus_id, where in members:
        if not switch:
            continue
        bridge = host_bridge_of(bus_id)
        first = bridges.setdefault(switch, bridge)
        if first != bridge:
            raise ValueError(
                f"{where}.switch: switch {switch!r} is under the host bridge of buses "
                f"{first[1]:02x}-{first[1] + 15:02x}; bus id {bus_id} is not"
            )
    return network


def _direct_links(body: fields.Obj, cards: int) -> tuple[frozenset[int], ...]:
    value = body.get("directLinks")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError("directLinks: expected a list of lists of card numbers")
    domains = []
    for number, members in enumerate(value):
        where = f"directLinks[{number}]"
        if not isinstance(members, list) or not all(
            isinstance(card, int) and not isinstance(card, bool) for card in members
        ):
            raise ValueError(f"{where}: expected a list of card numbers")
        outside = [card for card in members if not 0 <= card < cards]
        if outside:
            raise ValueError(f"{where}: no card {outside[0]} (cards are 0..{cards - 1})")
        domains.append(frozenset(members))
    return tuple(domains)


def _network_port(obj: fields.Obj, path: str) -> NetworkPort:
    layer = fields.string(obj, "linkLayer", path) or "Ethernet"
    if layer not in NIC_LINK_LAYERS:
        raise ValueError(f"{path}.linkLayer: expected one of {', '.join(NIC_LINK_LAYERS)}")
    rdma = fields.boolean(obj, "rdma", path)
    if layer == "InfiniBand" and not rdma:
        raise ValueError(f"{path}.rdma: an InfiniBand port is always an RDMA device")
    ip = fields.string(obj, "ip", path)
    octets = ip.split(".")
    if ip and not (len(octets) == 4 and all(o.isdigit() and int(o) < 256 for o in octets)):
        raise ValueError(f"{path}.ip: expected an IPv4 address, got {ip!r}")
    name = fields.string(obj, "name", path, required=True)
    return NetworkPort(
        name=name,
        interface=fields.string(obj, "interface", path) or name,
        bus_id=fields.string(obj, "busId", path, required=True),
        numa_node=fields.integer(obj, "numaNode", path, minimum=-1) if "numaNode" in obj else -1,
        switch=fields.string(obj, "switch", path),
        link_layer=layer,
        speed_mbps=fields.integer(obj, "speedMbps", path),
        rdma=rdma,
        ip=ip,
    )


def _numa(value: object) -> dict[int, str]:
    """NUMA node -> CPU list; YAML may spell the node as a number or a string."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("numa: expected an object of NUMA node -> CPU list")
    numa = {}
    for node, cpus in value.items():
        if not str(node).isdigit() or not isinstance(cpus, str):
            raise ValueError(f"numa.{node}: expected a node number and a CPU list string")
        numa[int(node)] = cpus
    return numa


def _model(obj: fields.Obj, path: str) -> Model:
    capability = fields.string(obj, "computeCapability", path)
    major, _, minor = capability.partition(".")
    if capability and not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"{path}.computeCapability: expected <major>.<minor>, got {capability!r}")
    mig = fields.child(obj, "mig", path)
    return Model(
        name=fields.string(obj, "name", path, required=True),
        memory_mib=fields.integer(obj, "memoryMib", path, required=True),
        memory_bus_width=fields.integer(obj, "memoryBusWidth", path),
        ecc=fields.boolean(obj, "ecc", path),
        compute_capability=(int(major), int(minor)) if capability else (0, 0),
        cores=fields.integer(obj, "cores", path),
        mig_profiles=tuple(
            _mig(item, where) for item, where in fields.items(mig, "profiles", path)
        ),
        mig_capable="mig" in obj,
        pci_device=_pci_id(obj, "pciDevice", path),
        pci_subsystem_device=_pci_id(obj, "pciSubsystemDevice", path),
    )


def _pci_id(obj: fields.Obj, key: str, path: str) -> str:
    """A 16-bit PCI ID as sysfs spells it (`0x1eb8`); absent, `0x0000`."""
    value = fields.string(obj, key, path) or "0x0000"
    digits = value.removeprefix("0x")
    if len(digits) != 4 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"{path}.{key}: expected four lower-case hex digits, got {value!r}")
    return "0x" + digits


def _mig(obj: fields.Obj, path: str) -> MigProfile:
    starts = fields.integers(obj, "starts", path) or ()
    return MigProfile(
        profile=fields.integer(obj, "profile", path, required=True),
        id=fields.integer(obj, "id", path, required=True),
        name=fields.string(obj, "name", path),
        slices=fields.integer(obj, "slices", path, required=True),
        instances=fields.integer(obj, "instances", path, required=True),
        memory_mb=fields.integer(obj, "memoryMb", path, required=True),
        starts=starts,
        size=fields.integer(obj, "size", path),
    )


def _card(
    obj: fields.Obj, path: str, models: Mapping[str, Model], profile: str, number: int
) -> Card:
    key = fields.string(obj, "model", path, required=True)
    if key not in models:
        raise ValueError(f"{path}.model: unknown model {key!r}; known: {', '.join(models)}")
    model = models[key]
    mig = fields.boolean(obj, "mig", path)
    if mig and not model.mig_capable:
        raise ValueError(f"{path}.mig: model {key!r} has no MIG profiles")
    # Stable across runs, so a simulated node keeps its card ids (and its ledger) on restart.
    default_uuid = f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'sim.gpustack.ai/{profile}/{number}')}"
    return Card(
        model=model,
        uuid=fields.string(obj, "uuid", path) or default_uuid,
        bus_id=fields.string(obj, "busId", path) or f"00000000:{number + 1:02X}:00.0",
        minor=fields.integer(obj, "minor", path) if "minor" in obj else number,
        numa_node=fields.integer(obj, "numaNode", path, minimum=-1) if "numaNode" in obj else -1,
        mig=mig,
        switch=fields.string(obj, "switch", path),
    )


def _fault(obj: fields.Obj, path: str, cards: int) -> Fault:
    kind = fields.string(obj, "kind", path, required=True)
    if kind not in FAULT_KINDS:
        raise ValueError(f"{path}.kind: unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
    card = fields.integer(obj, "card", path) if "card" in obj else None
    if kind in ("unhealthy", "lost") and (card is None or card >= cards):
        raise ValueError(f"{path}.card: {kind} needs the index of a card (0..{cards - 1})")
    return Fault(
        kind=kind,
        first=fields.integer(obj, "from", path, minimum=1) if "from" in obj else 1,
        last=fields.integer(obj, "until", path, minimum=1) if "until" in obj else None,
        card=card,
    )
