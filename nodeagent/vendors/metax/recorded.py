"""MetaX's MXSML answering from a recording (`nodeagent/simulate/recorded.py`): what a simulated
MetaX host's detector reads, and what its detector tests replay."""

from __future__ import annotations

from typing import Any

from nodeagent.simulate.recorded import Recording, refuse
from nodeagent.vendors.metax.mxsml import MxDeviceInfo, MxMemory


class RecordedMxsml(Recording):
    """MXSML (`Mxsml`), devices by position."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.devices: list[dict[str, Any]] = recording["devices"]
        super().__init__(self.devices)
        self._versions = {key: recording[key] for key in ("driver_version", "maca_version")}

    def _version(self, key: str) -> str:
        if self._versions[key] == "refused":
            raise refuse(key)
        return str(self._versions[key])

    def device_info(self, index: int) -> MxDeviceInfo:
        return MxDeviceInfo(**self._answer(index, "info"))

    def memory(self, index: int) -> MxMemory:
        return MxMemory(**self._answer(index, "memory"))

    def dram_uncorrectable_errors(self, index: int) -> int:
        return int(self._answer(index, "dram_ue"))

    def driver_version(self) -> str:
        return self._version("driver_version")

    def maca_version(self) -> str:
        return self._version("maca_version")
