"""Ascend's DCMI answering from a recording (`nodeagent/simulate/recorded.py`): what a simulated
Ascend host's detector reads, and what its detector tests replay."""

from __future__ import annotations

from typing import Any

from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, VendorError
from nodeagent.simulate.recorded import refuse
from nodeagent.vendors.ascend.dcmi import API_V2, ChipInfo, EccInfo, HbmInfo, MemoryInfo


class RecordedDcmi:
    """DCMI (`Dcmi`), and the container-share flag the Ascend responder turns on
    (`ContainerShare`), kept in memory: every device starts with it off. A V2 recording (`api`
    2) declares no such flag, as `DcmiLibrary` does not."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.api: int = recording["api"]
        self._driver: str = recording["driver_version"]
        self.cards: dict[int, Any] = {
            entry["card"]: entry["devices"] for entry in recording["cards"]
        }
        """DCMI card id -> its devices' answers, or `"refused"` (no device count)."""
        self.listing_refused = False
        self.shared: set[tuple[int, int]] = set()
        """The (card, device) pairs whose container-share flag is on."""

    def _device(self, card: int, device: int, key: str) -> Any:
        answer = self.cards[card][device][key]
        if answer == "refused":
            raise refuse(key)
        return answer

    def card_list(self) -> list[int]:
        if self.listing_refused:
            raise refuse("card list")
        return list(self.cards)

    def device_count(self, card: int) -> int:
        devices = self.cards[card]
        if devices == "refused":
            raise refuse("device count")
        return len(devices)

    def device_type(self, card: int, device: int) -> int:
        kind: int = self._device(card, device, "type")
        return kind

    def die_id(self, card: int, device: int) -> tuple[int, ...]:
        return tuple(self._device(card, device, "die"))

    def bus_id(self, card: int, device: int) -> str:
        return str(self._device(card, device, "bus"))

    def chip_info(self, card: int, device: int) -> ChipInfo:
        return ChipInfo(**self._device(card, device, "chip"))

    def hbm_info(self, card: int, device: int) -> HbmInfo:
        return HbmInfo(**self._device(card, device, "hbm"))

    def memory_info(self, card: int, device: int) -> MemoryInfo:
        return MemoryInfo(**self._device(card, device, "memory"))

    def ecc_info(self, card: int, device: int, memory_type: int) -> EccInfo:
        counters = self._device(card, device, "ecc")
        if str(memory_type) not in counters:
            raise refuse("ecc")
        return EccInfo(**counters[str(memory_type)])

    def physical_id(self, card: int, device: int) -> int:
        physical: int = self._device(card, device, "physical_id")
        return physical

    def driver_version(self) -> str:
        if self._driver == "refused":
            raise refuse("driver version")
        return self._driver

    def mainboard_id(self, card: int, device: int) -> int:
        """A V2 recording's `mainboard_id` (0 when not recorded: a training board, whose
        product the super pod names); V1 has no reader, as `DcmiLibrary`."""
        if self.api != API_V2:
            raise VendorError("dcmi get mainboard id", FUNCTION_NOT_FOUND)
        found: int = self.cards[card][device].get("mainboard_id", 0)
        return found

    def super_pod_type(self, card: int, device: int) -> int:
        found: int = self._device(card, device, "super_pod_type")
        return found

    def _share_target(self, card: int, device: int, call: str) -> tuple[int, int]:
        if self.api == API_V2:
            raise VendorError(call, FUNCTION_NOT_FOUND)
        devices = self.cards.get(card)
        if not isinstance(devices, list) or not 0 <= device < len(devices):
            raise refuse(call)
        return card, device

    def share_enabled(self, card: int, device: int) -> bool:
        return self._share_target(card, device, "dcmi get device share enable") in self.shared

    def enable_share(self, card: int, device: int) -> None:
        self.shared.add(self._share_target(card, device, "dcmi set device share enable"))
