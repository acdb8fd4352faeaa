"""Hygon's ROCm SMI answering from a recording (`nodeagent/simulate/recorded.py`): what a simulated
Hygon host's detector reads, and what its detector tests replay."""

from __future__ import annotations

from typing import Any

from nodeagent.simulate.recorded import Recording


class RecordedRsmi(Recording):
    """ROCm SMI as Hygon's DTK/hyhal ships it (`Rsmi`), devices by position."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)

    def vendor_id(self, index: int) -> int:
        return int(self._answer(index, "vendor_id"))

    def unique_id(self, index: int) -> int:
        return int(self._answer(index, "unique_id"))

    def pci_id(self, index: int) -> int:
        return int(self._answer(index, "pci_id"))

    def name(self, index: int) -> str:
        return str(self._answer(index, "name"))

    def memory_total(self, index: int) -> int:
        return int(self._answer(index, "memory_total"))

    def memory_used(self, index: int) -> int:
        return int(self._answer(index, "memory_used"))

    def uncorrectable_errors(self, index: int) -> int:
        return int(self._answer(index, "uncorrectable_errors"))

    def target_graphics_version(self, index: int) -> int:
        return int(self._answer(index, "target_graphics_version"))
