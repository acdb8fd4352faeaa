"""Vendor libraries answering from a recording: what a simulated host's detectors read, and
what the detector tests replay. Here the base every recorded library shares and the NVML-shaped
one (IXML/HGML); each other manufacturer's in its package (`nodeagent/vendors/<mfr>/recorded.py`:
DCMI, CNDev, ROCm SMI, MXSML and MTML).

A recording is the document `tests/unit/nodeagent/vendor/<manufacturer>/*.json` holds and a
shipped profile's `recording:` carries: the driver's versions and a list of cards, each with the
answers its queries give. An answer `"refused"` (or a missing one) fails the query with a vendor
error code, as a driver that cannot answer does."""

from __future__ import annotations

from typing import Any

from chain.partitions import Placement
from nodeagent.detect.vendor import VendorError
from nodeagent.vendors.common.nvmlike import InstanceProfile

HANDLE_BASE = 0x5000
REFUSED = -8005
"""The code a refused query fails with (any non-zero code reads the same)."""


def refuse(call: str) -> VendorError:
    return VendorError(call, REFUSED)


class Recording:
    """A library's devices, each answering from its entry of the recording by position;
    `count_refused` fails the device count."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        self.count_refused = False

    def _answer(self, position: int, key: str) -> Any:
        answer = self.entries[position].get(key, "refused")
        if answer == "refused":
            raise refuse(key)
        return answer

    def device_count(self) -> int:
        if self.count_refused:
            raise refuse("count")
        return len(self.entries)


class RecordedNvmlLike(Recording):
    """IXML or HGML (`NvmlLike`): handles are `HANDLE_BASE + position`."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.cards: list[dict[str, Any]] = recording["cards"]
        super().__init__(self.cards)
        self._driver: str = recording["driver_version"]
        self._runtime: int = recording["runtime_version"]

    def _answer(self, handle: int, key: str) -> Any:
        return super()._answer(handle - HANDLE_BASE, key)

    def driver_version(self) -> str:
        return self._driver

    def runtime_version(self) -> int:
        return self._runtime

    def handle(self, index: int) -> int:
        if self.cards[index].get("handle") == "refused":
            raise refuse("handle")
        return HANDLE_BASE + index

    def uuid(self, handle: int) -> str:
        return str(self._answer(handle, "uuid"))

    def name(self, handle: int) -> str:
        return str(self._answer(handle, "name"))

    def bus_id(self, handle: int) -> str:
        return str(self._answer(handle, "bus"))

    def memory(self, handle: int) -> tuple[int, int]:
        total, used = self._answer(handle, "memory")
        return int(total), int(used)

    def minor_number(self, handle: int) -> int:
        return int(self._answer(handle, "minor"))

    def compute_capability(self, handle: int) -> tuple[int, int]:
        major, minor = self._answer(handle, "capability")
        return int(major), int(minor)

    def core_count(self, handle: int) -> int:
        return int(self._answer(handle, "cores"))

    def uncorrected_dram_errors(self, handle: int) -> int:
        return int(self._answer(handle, "ecc"))

    def health(self, handle: int) -> int:
        return int(self._answer(handle, "health"))

    def mig_mode(self, handle: int) -> int:
        return int(self._answer(handle, "mig_mode"))

    def _profile(self, handle: int, key: str, value: int) -> dict[str, Any]:
        for entry in self._answer(handle, "profiles"):
            if entry[key] == value:
                found: dict[str, Any] = entry
                return found
        raise refuse("profile")

    def instance_profile(self, handle: int, profile: int) -> InstanceProfile:
        entry = self._profile(handle, "profile", profile)
        fields = ("id", "slice_count", "instance_count", "memory_mb", "name")
        return InstanceProfile(**{name: entry[name] for name in fields})

    def placements(self, handle: int, profile_id: int) -> tuple[Placement, ...]:
        slots = self._profile(handle, "id", profile_id)["placements"]
        if slots == "refused":
            raise refuse("placements")
        return tuple(Placement(start, length) for start, length in slots)
