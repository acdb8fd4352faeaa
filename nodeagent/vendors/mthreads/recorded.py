"""MThreads' MTML answering from a recording (`nodeagent/simulate/recorded.py`): what a simulated
Mthreads host's detector reads, and what its detector tests replay."""

from __future__ import annotations

from typing import Any

from nodeagent.simulate.recorded import Recording, refuse
from nodeagent.vendors.mthreads.mtml import MtMemory


class RecordedMtml(Recording):
    """MTML (`Mtml`): device objects are positions, tracked in `open` while open."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)
        self._driver: str = recording["driver_version"]
        self.open: set[int] = set()

    def _answer(self, device: Any, key: str) -> Any:
        if device not in self.open:
            raise AssertionError("a device object used after it was freed")
        return super()._answer(device, key)

    def open_device(self, index: int) -> Any:
        if self.devices[index].get("open") == "refused":
            raise refuse("open")
        self.open.add(index)
        return index

    def close_device(self, device: Any) -> None:
        self.open.remove(device)

    def virt_role(self, device: Any) -> int:
        return int(self._answer(device, "virt_role"))

    def uuid(self, device: Any) -> str:
        return str(self._answer(device, "uuid"))

    def name(self, device: Any) -> str:
        return str(self._answer(device, "name"))

    def bus_id(self, device: Any) -> str:
        return str(self._answer(device, "bus"))

    def memory(self, device: Any) -> MtMemory:
        return MtMemory(**self._answer(device, "memory"))

    def core_count(self, device: Any) -> int:
        return int(self._answer(device, "cores"))

    def driver_version(self) -> str:
        if self._driver == "refused":
            raise refuse("driver")
        return self._driver
