"""Cambricon's CNDev answering from a recording (`nodeagent/simulate/recorded.py`): what a simulated
Cambricon host's detector reads, and what its detector tests replay."""

from __future__ import annotations

from typing import Any

from nodeagent.simulate.recorded import Recording
from nodeagent.vendors.cambricon.cndev import MluMemory


class RecordedCndev(Recording):
    """CNDev (`Cndev`): each card answers under the handle its recording names."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.cards: list[dict[str, Any]] = recording["cards"]
        super().__init__(self.cards)
        self._positions = {card["handle"]: position for position, card in enumerate(self.cards)}

    def _answer(self, handle: int, key: str) -> Any:
        return super()._answer(self._positions[handle], key)

    def handle(self, index: int) -> int:
        handle: int = self.cards[index]["handle"]
        return handle

    def uuid(self, handle: int) -> str:
        return str(self._answer(handle, "uuid"))

    def bus_id(self, handle: int) -> str:
        return str(self._answer(handle, "bus"))

    def card_name(self, handle: int) -> str:
        return str(self._answer(handle, "name"))

    def memory(self, handle: int) -> MluMemory:
        return MluMemory(**self._answer(handle, "memory"))

    def health(self, handle: int) -> int:
        return int(self._answer(handle, "health"))

    def driver_version(self, handle: int) -> str:
        return str(self._answer(handle, "driver_version"))
