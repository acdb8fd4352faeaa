"""ROCm SMI (`librocm_smi64.so`) through ctypes, as Hygon's DTK/hyhal ships it.

Devices are addressed by their RSMI index. Every call returns an `rsmi_status_t` (0 = success);
a failure raises `VendorError`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Protocol

from nodeagent.detect.vendor import Library, VendorError, load_library, text

INIT_FLAG_ALL_GPUS = 1
"""Enumerate every GPU, not only AMD's (a Hygon DCU has its own PCI vendor id)."""
MEM_TYPE_VRAM = 0
GPU_BLOCK_UMC = 1
NAME_LENGTH = 256


class Rsmi(Protocol):
    """What the Hygon detector asks ROCm SMI. Failures raise `VendorError`."""

    def device_count(self) -> int: ...

    def vendor_id(self, index: int) -> int: ...

    def unique_id(self, index: int) -> int: ...

    def pci_id(self, index: int) -> int:
        """The BDFID: domain in bits 63..32, (partition 31..28,) bus 15..8, device 7..3,
        function 2..0."""
        ...

    def name(self, index: int) -> str: ...

    def memory_total(self, index: int) -> int:
        """VRAM in bytes."""
        ...

    def memory_used(self, index: int) -> int: ...

    def uncorrectable_errors(self, index: int) -> int:
        """Uncorrectable ECC errors of the memory controller (UMC) block."""
        ...

    def target_graphics_version(self, index: int) -> int: ...


class _ErrorCount(ctypes.Structure):
    _fields_ = (("correctable_err", ctypes.c_uint64), ("uncorrectable_err", ctypes.c_uint64))


def bus_id_of(bdfid: int) -> str:
    domain = (bdfid >> 32) & 0xFFFFFFFF
    bus = (bdfid >> 8) & 0xFF
    device = (bdfid >> 3) & 0x1F
    function = bdfid & 0x7
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


class RsmiLibrary:
    """`Rsmi` over a loaded `librocm_smi64.so`."""

    def __init__(self, library: Library) -> None:
        self._lib = library

    def _u64(self, symbol: str, index: int) -> int:
        value = ctypes.c_uint64(0)
        self._lib.call(symbol, ctypes.c_uint32(index), ctypes.byref(value))
        return value.value

    def device_count(self) -> int:
        count = ctypes.c_uint32(0)
        self._lib.call("rsmi_num_monitor_devices", ctypes.byref(count))
        return count.value

    def vendor_id(self, index: int) -> int:
        vendor = ctypes.c_uint16(0)
        self._lib.call("rsmi_dev_vendor_id_get", ctypes.c_uint32(index), ctypes.byref(vendor))
        return vendor.value

    def unique_id(self, index: int) -> int:
        return self._u64("rsmi_dev_unique_id_get", index)

    def pci_id(self, index: int) -> int:
        return self._u64("rsmi_dev_pci_id_get", index)

    def name(self, index: int) -> str:
        buffer = ctypes.create_string_buffer(NAME_LENGTH)
        self._lib.call(
            "rsmi_dev_name_get", ctypes.c_uint32(index), buffer, ctypes.c_size_t(NAME_LENGTH)
        )
        return text(buffer.value)

    def _memory(self, symbol: str, index: int) -> int:
        value = ctypes.c_uint64(0)
        self._lib.call(
            symbol, ctypes.c_uint32(index), ctypes.c_int(MEM_TYPE_VRAM), ctypes.byref(value)
        )
        return value.value

    def memory_total(self, index: int) -> int:
        return self._memory("rsmi_dev_memory_total_get", index)

    def memory_used(self, index: int) -> int:
        return self._memory("rsmi_dev_memory_usage_get", index)

    def uncorrectable_errors(self, index: int) -> int:
        counts = _ErrorCount()
        self._lib.call(
            "rsmi_dev_ecc_count_get",
            ctypes.c_uint32(index),
            ctypes.c_int(GPU_BLOCK_UMC),
            ctypes.byref(counts),
        )
        return int(counts.uncorrectable_err)

    def target_graphics_version(self, index: int) -> int:
        return self._u64("rsmi_dev_target_graphics_version_get", index)


def open_rsmi(candidates: Iterable[str]) -> RsmiLibrary | None:
    """The initialised library, or None (not installed, or no driver to initialise against)."""
    cdll = load_library(candidates)
    if cdll is None:
        return None
    library = Library(cdll)
    try:
        library.call("rsmi_init", ctypes.c_uint64(INIT_FLAG_ALL_GPUS))
    except VendorError:
        return None
    return RsmiLibrary(library)
