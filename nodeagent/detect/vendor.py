"""What the eight non-NVIDIA detectors share.

- `VendorDetector`: the detect/monitor shell. A vendor interface is opened on first need (and
  retried on every pass until it opens, so a driver installed after the agent started is found);
  no library, or one that will not initialise, means no cards. Each manufacturer only says how
  its cards are read (`read_cards`) and what a new group learns from its first card
  (`group_facts`).
- `CardReading` and `build_groups`: cards with the same product name and memory size form one
  group; `index` counts the cards actually read, so it stays dense when one is skipped.
- `Library`: a ctypes library whose failure codes become `VendorError`. A `VendorError` is the
  driver saying no (a card to skip, a query to do without); anything else a detector raises is a
  broken answer, which the caller reports as "could not measure".
- Small host readers: DRM device nodes of a card, version files, bus ids.
"""

from __future__ import annotations

import ctypes
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from chain.devices import (
    Accelerator,
    AcceleratorStatus,
    DevicesGroup,
    DeviceTopology,
    LogicalSliced,
    aggregate_sliced_detail,
)
from chain.keys import group_id
from chain.manufacturers import Manufacturer, default_manufacturers
from nodeagent.detect.base import CardMetrics
from nodeagent.detect.sysfs import Sysfs, pci_address

T = TypeVar("T")

FUNCTION_NOT_FOUND = -99998
"""The code a call gets when the loaded library lacks the symbol (an older driver)."""

_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_VERSION = re.compile(r"\d+(?:\.\d+)*")


class VendorError(Exception):
    """A vendor call answered with a failure code: the driver said no, nothing is broken."""

    def __init__(self, call: str, code: int) -> None:
        super().__init__(f"{call} returned {code}")
        self.call = call
        self.code = code


def optional(read: Callable[[], T], default: T) -> T:
    """A query the driver may refuse: its default instead of a `VendorError`."""
    try:
        return read()
    except VendorError:
        return default


# Libraries


def library_candidates(soname: str, directories: Iterable[str | Path]) -> list[str]:
    """The soname (the loader's own search: LD_LIBRARY_PATH, ld.so.cache) then fixed places."""
    return [soname, *(str(Path(folder) / soname) for folder in directories)]


def load_library(candidates: Iterable[str]) -> ctypes.CDLL | None:
    """The first candidate that loads, or None when none does (no driver on this host)."""
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate)
        except OSError:
            continue
    return None


def env_home(environ: Mapping[str, str], names: Sequence[str], default: str) -> str:
    """The first toolkit home the environment names (`ROCM_HOME`, ...), else the default."""
    return next((environ[name] for name in names if environ.get(name)), default)


class Library:
    """A loaded vendor library. Every vendor here returns 0 for success from its calls."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._cdll = cdll
        self._functions: dict[str, Any] = {}

    def has(self, symbol: str) -> bool:
        return self._function(symbol) is not None

    def _function(self, symbol: str) -> Any:
        if symbol not in self._functions:
            self._functions[symbol] = getattr(self._cdll, symbol, None)
        return self._functions[symbol]

    def value(self, symbol: str, *args: Any, restype: Any = ctypes.c_int) -> Any:
        """The raw return value of a call (for the few calls that return data, not a code)."""
        function = self._function(symbol)
        if function is None:
            raise VendorError(symbol, FUNCTION_NOT_FOUND)
        function.restype = restype
        return function(*args)

    def call(self, symbol: str, *args: Any) -> None:
        code = int(self.value(symbol, *args))
        if code != 0:
            raise VendorError(symbol, code)

    def first(self, symbols: Sequence[str], *args: Any) -> None:
        """Call the newest variant the library has (`..._v2` before the plain name)."""
        for symbol in symbols:
            if self.has(symbol):
                self.call(symbol, *args)
                return
        raise VendorError(symbols[0], FUNCTION_NOT_FOUND)


def text(raw: bytes | str) -> str:
    """A C string field: everything before the first NUL, decoded leniently."""
    if isinstance(raw, str):
        return raw.split("\0", 1)[0].strip()
    return raw.split(b"\0", 1)[0].decode(errors="replace").strip()


# Readings and groups


@dataclass(frozen=True)
class GroupFacts:
    """What a group learns from its first card (the driver is one per node and manufacturer)."""

    cores: int = 0
    driver_version: str = ""
    runtime_version: str = ""
    compute_capability: str = ""
    family: str = ""


@dataclass(frozen=True)
class CardReading:
    """One card as its driver reports it."""

    id: str
    name: str
    memory_mib: int
    bus_id: str = ""
    """Sysfs spelling (`0000:3b:00.0`); empty when the driver does not say."""
    physical_indexes: tuple[int, ...] | None = None
    status: AcceleratorStatus = field(default_factory=AcceleratorStatus)
    memory_used_mib: int = 0

    def __post_init__(self) -> None:
        # A driver that reports a negative size or count is broken, not merely unhelpful.
        if self.memory_mib < 0 or self.memory_used_mib < 0:
            raise ValueError(f"card {self.id}: negative memory size {self.memory_mib}")
        if not self.id or not self.name:
            raise ValueError(f"card {self.id!r}: a card needs an id and a name")


def logically_sliced(count: int, overcommit: bool, unhealthy: bool = False) -> AcceleratorStatus:
    return AcceleratorStatus(unhealthy, logical_sliced=LogicalSliced(count, overcommit))


def build_groups(
    maker: Manufacturer,
    cards: Iterable[CardReading],
    facts: Callable[[CardReading], GroupFacts],
    sysfs: Sysfs,
    with_memory: bool,
) -> tuple[DevicesGroup, ...]:
    """Cards grouped by product name and memory size, in the order the driver listed them."""
    heads: dict[tuple[str, int], DevicesGroup] = {}
    members: dict[tuple[str, int], list[Accelerator]] = {}
    for index, card in enumerate(cards):
        key = (card.name, card.memory_mib)
        if key not in heads:
            learned = facts(card)
            heads[key] = DevicesGroup(
                id=group_id(maker.name, card.name, card.memory_mib, with_memory),
                manufacturer=maker.name,
                name=card.name,
                memory=card.memory_mib,
                cores=learned.cores,
                driver_version=learned.driver_version,
                runtime_version=learned.runtime_version,
                compute_capability=learned.compute_capability,
                family=learned.family,
            )
            members[key] = []
        topology = sysfs.topology(card.bus_id) if card.bus_id else DeviceTopology()
        members[key].append(
            Accelerator(card.id, index, card.physical_indexes, topology, card.status)
        )
    return tuple(
        replace(
            head,
            accelerators=tuple(members[key]),
            sliced_detail=aggregate_sliced_detail(members[key]),
        )
        for key, head in heads.items()
    )


def card_metrics(maker: Manufacturer, cards: Iterable[CardReading]) -> tuple[CardMetrics, ...]:
    return tuple(
        CardMetrics(
            manufacturer=maker.name,
            id=card.id,
            index=index,
            unhealthy=card.status.unhealthy,
            memory_total_mib=card.memory_mib,
            memory_used_mib=card.memory_used_mib,
        )
        for index, card in enumerate(cards)
    )


class Connection(Generic[T]):
    """A vendor interface: the one given (tests, simulation), or one opened on first need.

    An open that fails (no library, no driver) is tried again on the next pass.
    """

    def __init__(self, given: T | None, opener: Callable[[], T | None]) -> None:
        self._value = given
        self._opener = opener

    def get(self) -> T | None:
        if self._value is None:
            self._value = self._opener()
        return self._value


class VendorDetector(ABC, Generic[T]):
    """The detect/monitor shell every non-NVIDIA detector shares."""

    manufacturer: str

    def __init__(
        self,
        given: T | None,
        opener: Callable[[], T | None],
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
    ) -> None:
        self._connection = Connection(given, opener)
        self._sysfs = sysfs if sysfs is not None else Sysfs()
        self._maker = maker if maker is not None else default_manufacturers()[self.manufacturer]
        self._with_memory = group_id_with_memory

    @abstractmethod
    def read_cards(self, interface: T) -> list[CardReading]:
        """Every card the driver can identify; an unidentifiable card is left out."""

    @abstractmethod
    def group_facts(self, interface: T, card: CardReading) -> GroupFacts:
        """What a new group of `card`'s model records (versions, cores, family)."""

    def detect(self) -> tuple[DevicesGroup, ...]:
        interface = self._connection.get()
        if interface is None:
            return ()
        cards = self.read_cards(interface)
        return build_groups(
            self._maker,
            cards,
            lambda card: self.group_facts(interface, card),
            self._sysfs,
            self._with_memory,
        )

    def monitor(self) -> tuple[CardMetrics, ...]:
        interface = self._connection.get()
        if interface is None:
            return ()
        return card_metrics(self._maker, self.read_cards(interface))


# Host readers


def bus_address(raw: str) -> str:
    """A driver's PCI bus id in sysfs spelling; a value that is no bus id is a broken answer."""
    address = pci_address(raw)
    if not _ADDRESS.fullmatch(address):
        raise ValueError(f"not a PCI bus id: {raw!r}")
    return address


def drm_nodes(sysfs: Sysfs, bus_id: str, driver_dirs: Sequence[str]) -> tuple[int, ...] | None:
    """`(card, renderD)` numbers of the card's DRM nodes (`/dev/dri/card<N>`, `renderD<M>`).

    The driver's own binding directory (`sys/module/<drv>/drivers/pci:<drv>/<bdf>/drm`) is asked
    first, then the device's entry on the bus. None when the card has no DRM node at all.
    """
    folders = [sysfs.root / folder / bus_id / "drm" for folder in driver_dirs]
    folders.append(sysfs.root / "sys/bus/pci/devices" / bus_id / "drm")
    for folder in folders:
        try:
            names = [entry.name for entry in folder.iterdir()]
        except OSError:
            continue
        card = _node_number(names, "card")
        if card is None:
            return None
        render = _node_number(names, "renderD")
        return (card,) if render is None else (card, render)
    return None


def _node_number(names: Iterable[str], prefix: str) -> int | None:
    for name in sorted(names):
        suffix = name.removeprefix(prefix)
        if suffix != name and suffix.isdigit():
            return int(suffix)
    return None


def leading_version(raw: str) -> str:
    """The dotted number a version string starts with (`6.4.1-123` -> `6.4.1`); empty if none."""
    match = _VERSION.search(raw)
    return match.group(0) if match else ""


def read_first(paths: Iterable[Path]) -> str:
    """The content of the first readable file; empty when none is."""
    for path in paths:
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
    return ""


def key_value(content: str, key: str) -> str:
    """The value of the first `key=value` line."""
    for line in content.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def environ_or(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def cards_by_handle(
    count: Callable[[], int],
    handle: Callable[[int], int],
    read: Callable[[int, int], CardReading],
) -> list[tuple[int, CardReading]]:
    """Every card of a handle-based library as (handle, reading), in enumeration order.

    A library that cannot count its cards has none to report; a card whose handle or required
    readings fail is skipped, as the driver refusing one card says nothing about the others.
    """
    try:
        total = count()
    except VendorError:
        return []
    found = []
    for position in range(total):
        try:
            card_handle = handle(position)
            found.append((card_handle, read(card_handle, position)))
        except VendorError:
            continue
    return found
