"""MetaX `sgpu` subdevices, made and destroyed through the card's sysfs directory
(`/sys/bus/pci/devices/<bdf>/`), behind an interface a simulated host implements.

- a card takes subdevices once it is in `sgpu` mode: `sgpu` written to `model`, then `1`
  (fixed-share scheduling) to `sgpu/sched_class`; done only while it has none;
- `sgpu/create` takes the VRAM cap in decimal MiB; the driver numbers the new subdevice itself
  (the lowest free index, which the allocator chose too);
- each subdevice is `sgpu/sgpu<N>/`, named by its `alias` (this project writes
  `gpustack-<pod uid>` there, so the reclaimer knows whose it is);
- `sgpu/destroy` takes the index.

Judgment call: the alias is written into the new subdevice's `alias` file right after the
create (upstream reads it from there; how it is set is not in the seeds).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

PCI_DEVICES = "sys/bus/pci/devices"
MAX_SUBDEVICES = 16
FIXED_SHARE = "1"


class SgpuDriver(Protocol):
    def subdevices(self, bdf: str) -> dict[int, str]:
        """The card's subdevices: index -> alias."""
        ...

    def enable(self, bdf: str) -> None:
        """Put the card in `sgpu` mode with fixed-share scheduling."""
        ...

    def create(self, bdf: str, index: int, memory_mib: int, alias: str) -> None: ...

    def destroy(self, bdf: str, index: int) -> None: ...


class SysfsSgpu:
    """The host's driver, under `root` (the agent mounts the host's `/sys` at `/sys`)."""

    def __init__(self, root: str = "/") -> None:
        self.root = Path(root)

    def _card(self, bdf: str) -> Path:
        return self.root / PCI_DEVICES / bdf

    def subdevices(self, bdf: str) -> dict[int, str]:
        folder = self._card(bdf) / "sgpu"
        found = {}
        for entry in folder.glob("sgpu[0-9]*") if folder.is_dir() else ():
            index = entry.name.removeprefix("sgpu")
            if index.isdigit():
                alias = entry / "alias"
                found[int(index)] = alias.read_text().strip() if alias.is_file() else ""
        return found

    def enable(self, bdf: str) -> None:
        (self._card(bdf) / "model").write_text("sgpu\n")
        (self._card(bdf) / "sgpu" / "sched_class").write_text(FIXED_SHARE + "\n")

    def create(self, bdf: str, index: int, memory_mib: int, alias: str) -> None:
        (self._card(bdf) / "sgpu" / "create").write_text(f"{memory_mib}\n")
        (self._card(bdf) / "sgpu" / f"sgpu{index}" / "alias").write_text(alias + "\n")

    def destroy(self, bdf: str, index: int) -> None:
        (self._card(bdf) / "sgpu" / "destroy").write_text(f"{index}\n")


@dataclass
class SimulatedSgpu:
    """A simulated host's driver: subdevices kept in memory, as the driver numbers them."""

    cards: dict[str, dict[int, tuple[str, int]]] = field(default_factory=dict)
    """bdf -> index -> (alias, VRAM MiB)."""
    enabled: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def subdevices(self, bdf: str) -> dict[int, str]:
        with self.lock:
            return {index: alias for index, (alias, _) in self.cards.get(bdf, {}).items()}

    def enable(self, bdf: str) -> None:
        with self.lock:
            self.enabled.add(bdf)

    def create(self, bdf: str, index: int, memory_mib: int, alias: str) -> None:
        with self.lock:
            if bdf not in self.enabled:
                raise OSError(f"{bdf} is not in sgpu mode")
            taken = self.cards.setdefault(bdf, {})
            lowest = min(set(range(MAX_SUBDEVICES)) - set(taken))
            if lowest != index:
                raise OSError(f"{bdf}: the driver made sgpu{lowest}, not sgpu{index}")
            taken[index] = (alias, memory_mib)

    def destroy(self, bdf: str, index: int) -> None:
        with self.lock:
            self.cards.get(bdf, {}).pop(index, None)


class DrySgpu:
    """A driver that reads the host's subdevices and makes none: what it would create is kept
    in memory (a preflight rehearses a slice without changing the card)."""

    def __init__(self, host: SgpuDriver) -> None:
        self.host = host
        self.made: dict[str, dict[int, str]] = {}

    def subdevices(self, bdf: str) -> dict[int, str]:
        return {**self.host.subdevices(bdf), **self.made.get(bdf, {})}

    def enable(self, bdf: str) -> None:
        """Nothing: the card's mode is left as it is."""

    def create(self, bdf: str, index: int, memory_mib: int, alias: str) -> None:
        self.made.setdefault(bdf, {})[index] = alias

    def destroy(self, bdf: str, index: int) -> None:
        self.made.get(bdf, {}).pop(index, None)
