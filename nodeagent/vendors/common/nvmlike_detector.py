"""What the detectors over NVML-like libraries (Iluvatar's IXML, T-Head's HGML) share: opening the
library from its install folder, walking the cards by handle (a card whose required readings fail
is skipped), and remembering each card's handle for the group readings that follow."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from chain.manufacturers import Manufacturer
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    CardReading,
    VendorDetector,
    cards_by_handle,
    env_home,
    environ_or,
    library_candidates,
)
from nodeagent.vendors.common.nvmlike import NvmlLike, open_nvmlike


class NvmlLikeDetector(VendorDetector[NvmlLike]):
    library: str
    """The shared object, e.g. `libixml.so`."""
    home_variables: tuple[str, ...]
    default_home: str
    symbols: Mapping[str, tuple[str, ...]]

    def __init__(
        self,
        interface: NvmlLike | None = None,
        sysfs: Sysfs | None = None,
        maker: Manufacturer | None = None,
        group_id_with_memory: bool = False,
        opener: Callable[[], NvmlLike | None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = environ_or(environ)
        super().__init__(
            interface,
            opener or (lambda: open_nvmlike(self.candidates(env), self.symbols)),
            sysfs,
            maker,
            group_id_with_memory,
        )
        self._handles: dict[str, int] = {}

    @classmethod
    def candidates(cls, environ: Mapping[str, str]) -> list[str]:
        home = Path(env_home(environ, cls.home_variables, cls.default_home))
        return library_candidates(cls.library, [home / "lib64", home / "lib"])

    def read_cards(self, interface: NvmlLike) -> list[CardReading]:
        found = cards_by_handle(
            interface.device_count,
            interface.handle,
            lambda handle, position: self.read_card(interface, handle, position),
        )
        self._handles = {card.id: handle for handle, card in found}
        return self.finish([card for _, card in found])

    def read_card(self, interface: NvmlLike, handle: int, position: int) -> CardReading:
        raise NotImplementedError

    def finish(self, cards: Sequence[CardReading]) -> list[CardReading]:
        """A last look across all cards (T-Head aligns MIG geometry within a group)."""
        return list(cards)

    def handle(self, card: CardReading) -> int:
        return self._handles[card.id]
