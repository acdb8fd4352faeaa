"""Cambricon sMLU: slices of an MLU as cnDev profiles and instances, behind an interface a
simulated host implements (`SimulatedSmlu`) and the host's `libcndev.so` backs (`CndevSmlu`).

A card is addressed by its PCI bus id. A profile carries the compute quota (`mluQuota`, the
cores percentage) and the memory size (bytes); an instance is made from a profile under a name
and exposes one device node (`devNodeName`), which the container is given. The card must be in
sMLU mode first. cnDev's calls, structs (version 6) and return codes are upstream's facts:
`cndevGetSMLUMode`/`cndevSetSMLUMode`, `cndevCreateSMluProfileInfo`,
`cndevDestroySMluProfileInfo`, `cndevCreateSMluInstanceByProfileId`,
`cndevDestroySMluInstanceByInstanceName`, `cndevGetAllSMluInstanceInfo`,
`cndevGetSMluProfileIdInfo`. A library or driver without these calls (missing symbol, no
driver, a driver too old) is `SmluUnavailable`; `NOT_FOUND` on a destroy is success.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from nodeagent.detect.sysfs import pci_address
from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, Library, VendorError, text
from nodeagent.vendors.cambricon.cndev import open_cndev

VERSION = 6
ENABLED = 1
NO_DRIVER, LOW_DRIVER_VERSION, INSUFFICIENT_SPACE, NOT_FOUND = 1, 2, 9, 14
LIBRARY_NOT_FOUND = -99999
UNAVAILABLE = frozenset({FUNCTION_NOT_FOUND, LIBRARY_NOT_FOUND, NO_DRIVER, LOW_DRIVER_VERSION})
MAX_PROFILES = 128


class SmluUnavailable(Exception):
    """The cnDev library or driver has no sMLU API (nothing a command on the host can add)."""


@dataclass(frozen=True)
class SmluInstance:
    card: str
    """The card's PCI bus id."""
    name: str
    profile: int
    cores: int
    memory_mib: int
    device_node: str


class SmluDriver(Protocol):
    def cards(self) -> list[str]:
        """The bus ids of the node's cards the library addresses."""
        ...

    def mode_enabled(self, card: str) -> bool:
        """SmluUnavailable when the API is missing; another error when the read failed."""
        ...

    def enable(self, card: str) -> None: ...

    def instances(self) -> list[SmluInstance]:
        """Every instance on every card of the node."""
        ...

    def create_profile(self, card: str, cores: int, memory_mib: int) -> int: ...

    def destroy_profile(self, card: str, profile: int) -> None: ...

    def profiles(self, card: str) -> list[int]: ...

    def create_instance(self, card: str, profile: int, name: str) -> None: ...

    def destroy_instance(self, card: str, name: str) -> None: ...


@dataclass
class SimulatedSmlu:
    """A simulated host's cnDev: profiles and instances kept in memory. `positions` maps each
    bus id to the enumeration position its instances' device nodes are named after."""

    positions: Mapping[str, int] = field(default_factory=dict)
    enabled: set[str] = field(default_factory=set)
    made: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    """bus id -> profile id -> (cores, MiB)."""
    running: dict[str, SmluInstance] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cards(self) -> list[str]:
        return sorted(self.positions)

    def mode_enabled(self, card: str) -> bool:
        return card in self.enabled

    def enable(self, card: str) -> None:
        self.enabled.add(card)

    def instances(self) -> list[SmluInstance]:
        with self.lock:
            return list(self.running.values())

    def create_profile(self, card: str, cores: int, memory_mib: int) -> int:
        with self.lock:
            profiles = self.made.setdefault(card, {})
            number = max(profiles, default=-1) + 1
            profiles[number] = (cores, memory_mib)
            return number

    def destroy_profile(self, card: str, profile: int) -> None:
        with self.lock:
            self.made.get(card, {}).pop(profile, None)

    def profiles(self, card: str) -> list[int]:
        with self.lock:
            return sorted(self.made.get(card, {}))

    def create_instance(self, card: str, profile: int, name: str) -> None:
        with self.lock:
            if card not in self.enabled:
                raise VendorError("cndevCreateSMluInstanceByProfileId", 10)
            cores, mib = self.made[card][profile]
            taken = sum(1 for i in self.running.values() if i.card == card)
            node = f"/dev/cambricon-caps/cap_dev{self.positions.get(card, 0)}_mi{taken + 1}"
            self.running[name] = SmluInstance(card, name, profile, cores, mib, node)

    def destroy_instance(self, card: str, name: str) -> None:
        with self.lock:
            self.running.pop(name, None)


class _SmluMode(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int32), ("smluMode", ctypes.c_uint32)]


class _SmluSet(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("mluQuota", ctypes.c_uint32),
        ("memorySize", ctypes.c_uint64),
    ]


class _SmluInfo(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("profileId", ctypes.c_int32),
        ("instanceId", ctypes.c_int32),
        ("uuid", ctypes.c_uint8 * 37),
        ("domain", ctypes.c_int32),
        ("bus", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("function", ctypes.c_int32),
        ("profileName", ctypes.c_char * 100),
        ("instanceName", ctypes.c_char * 100),
        ("devNodeName", ctypes.c_char * 100),
        ("mluQuota", ctypes.c_uint32 * 2),
        ("memorySize", ctypes.c_uint64 * 2),
        ("reserved", ctypes.c_uint32 * 128),
    ]


class _ProfileIds(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int32),
        ("count", ctypes.c_int32),
        ("profileId", ctypes.c_int32 * MAX_PROFILES),
    ]


def _checked(call: str, error: VendorError) -> Exception:
    if error.code in UNAVAILABLE:
        return SmluUnavailable(f"{call}: this cnDev library or driver has no sMLU API")
    return error


class CndevSmlu:
    """sMLU through the host's `libcndev.so` (already initialised by the detector's opener)."""

    def __init__(self, library: Library, bus_ids: Mapping[str, int]) -> None:
        """`bus_ids`: each card's PCI bus id -> its cnDev handle."""
        self._lib = library
        self._handles = dict(bus_ids)

    def cards(self) -> list[str]:
        return sorted(self._handles)

    def _handle(self, card: str) -> ctypes.c_int:
        if card not in self._handles:
            raise VendorError(f"get cndev handle for {card}", NOT_FOUND)
        return ctypes.c_int(self._handles[card])

    def mode_enabled(self, card: str) -> bool:
        mode = _SmluMode(VERSION, 0)
        try:
            self._lib.call("cndevGetSMLUMode", ctypes.byref(mode), self._handle(card))
        except VendorError as error:
            raise _checked("get smlu mode", error) from error
        return bool(mode.smluMode == ENABLED)

    def enable(self, card: str) -> None:
        mode = _SmluMode(VERSION, ENABLED)
        try:
            self._lib.call("cndevSetSMLUMode", ctypes.byref(mode), self._handle(card))
        except VendorError as error:
            raise _checked("set smlu mode", error) from error

    def instances(self) -> list[SmluInstance]:
        found = []
        for card in sorted(self._handles):
            count = ctypes.c_int32(0)
            try:
                self._lib.call(
                    "cndevGetAllSMluInstanceInfo", ctypes.byref(count), None, self._handle(card)
                )
            except VendorError as error:
                if error.code != INSUFFICIENT_SPACE:
                    raise
            if count.value <= 0:
                continue
            infos = (_SmluInfo * count.value)()
            for info in infos:
                info.version = VERSION
            self._lib.call(
                "cndevGetAllSMluInstanceInfo", ctypes.byref(count), infos, self._handle(card)
            )
            for info in infos[: max(0, min(count.value, len(infos)))]:
                found.append(
                    SmluInstance(
                        card,
                        text(bytes(info.instanceName)),
                        info.profileId,
                        int(info.mluQuota[0]),
                        int(info.memorySize[0]) >> 20,
                        text(bytes(info.devNodeName)),
                    )
                )
        return found

    def create_profile(self, card: str, cores: int, memory_mib: int) -> int:
        wanted = _SmluSet(VERSION, cores, memory_mib << 20)
        profile = ctypes.c_int32(0)
        self._lib.call(
            "cndevCreateSMluProfileInfo",
            ctypes.byref(wanted),
            ctypes.byref(profile),
            self._handle(card),
        )
        return profile.value

    def destroy_profile(self, card: str, profile: int) -> None:
        self._lib.call("cndevDestroySMluProfileInfo", ctypes.c_int32(profile), self._handle(card))

    def profiles(self, card: str) -> list[int]:
        ids = _ProfileIds(VERSION, 0)
        self._lib.call("cndevGetSMluProfileIdInfo", ctypes.byref(ids), self._handle(card))
        return [int(ids.profileId[n]) for n in range(max(0, min(ids.count, MAX_PROFILES)))]

    def create_instance(self, card: str, profile: int, name: str) -> None:
        made = ctypes.c_int32(0)
        self._lib.call(
            "cndevCreateSMluInstanceByProfileId",
            ctypes.byref(made),
            ctypes.c_uint32(profile),
            self._handle(card),
            name.encode(),
        )

    def destroy_instance(self, card: str, name: str) -> None:
        try:
            self._lib.call(
                "cndevDestroySMluInstanceByInstanceName", self._handle(card), name.encode()
            )
        except VendorError as error:
            if error.code != NOT_FOUND:
                raise


def open_cndev_smlu() -> SmluDriver:
    """The host's cnDev, with every card's handle by bus id; SmluUnavailable without one."""
    cndev = open_cndev()
    if cndev is None:
        raise SmluUnavailable("cndev init failed: no libcndev.so, or it would not initialise")
    handles = {}
    for index in range(cndev.device_count()):
        handle = cndev.handle(index)
        handles[pci_address(cndev.bus_id(handle))] = handle
    return CndevSmlu(cndev.library, handles)


class DrySmlu:
    """A driver that reads the host's sMLU state and changes none of it: the mode it would turn
    on, and the profiles and instances it would make, are kept in memory (a preflight rehearses
    a slice this way)."""

    def __init__(self, host: Callable[[], SmluDriver]) -> None:
        self.host = host
        self.scratch = SimulatedSmlu()

    def cards(self) -> list[str]:
        return self.host().cards()

    def mode_enabled(self, card: str) -> bool:
        return card in self.scratch.enabled or self.host().mode_enabled(card)

    def enable(self, card: str) -> None:
        self.scratch.enable(card)

    def instances(self) -> list[SmluInstance]:
        return [*self.host().instances(), *self.scratch.instances()]

    def create_profile(self, card: str, cores: int, memory_mib: int) -> int:
        return self.scratch.create_profile(card, cores, memory_mib)

    def destroy_profile(self, card: str, profile: int) -> None:
        self.scratch.destroy_profile(card, profile)

    def profiles(self, card: str) -> list[int]:
        return self.scratch.profiles(card)

    def create_instance(self, card: str, profile: int, name: str) -> None:
        self.scratch.enable(card)  # the host's mode was read above; the scratch needs its own
        self.scratch.create_instance(card, profile, name)

    def destroy_instance(self, card: str, name: str) -> None:
        self.scratch.destroy_instance(card, name)
