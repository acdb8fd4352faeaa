"""The part of AMD SMI's Python binding (`amdsmi`, shipped with ROCm) the AMD detector uses.

The binding is used rather than ctypes on `libamd_smi.so` because AMD SMI's structs change
layout between ROCm releases, and the binding that ships with a release matches its library.
Its answers are plain dicts (`amdsmi_get_gpu_asic_info` -> `{"market_name": ..., "asic_serial":
"0x...", "num_compute_units": 304, "target_graphics_version": "gfx942", ...}`), which is what the
tests record and replay. Importing the binding loads the library, so a host without ROCm fails
the import: no AMD cards.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast


class AmdSmi(Protocol):
    """Functions and names of the `amdsmi` module the detector calls."""

    @property
    def AmdSmiException(self) -> type[Exception]: ...

    @property
    def AmdSmiInitFlags(self) -> Any: ...

    @property
    def AmdSmiGpuBlock(self) -> Any: ...

    def amdsmi_init(self, flag: Any = ..., /) -> None: ...

    def amdsmi_get_processor_handles(self) -> list[Any]: ...

    def amdsmi_get_gpu_asic_info(self, handle: Any, /) -> dict[str, Any]: ...

    def amdsmi_get_gpu_device_bdf(self, handle: Any, /) -> str: ...

    def amdsmi_get_gpu_vram_usage(self, handle: Any, /) -> dict[str, Any]: ...

    def amdsmi_get_gpu_ecc_count(self, handle: Any, block: Any, /) -> dict[str, Any]: ...

    def amdsmi_get_gpu_driver_info(self, handle: Any, /) -> dict[str, Any]: ...

    def amdsmi_get_rocm_version(self) -> Any: ...


def load_amdsmi() -> AmdSmi | None:
    """The `amdsmi` module, or None when it (or the library under it) is not installed."""
    try:
        module: Any = importlib.import_module("amdsmi")
    except (ImportError, OSError):
        return None
    return cast(AmdSmi, module)


def open_amdsmi() -> AmdSmi | None:
    """The initialised binding for AMD GPUs, or None without one (no driver, no card)."""
    smi = load_amdsmi()
    if smi is None:
        return None
    try:
        smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except smi.AmdSmiException:
        return None
    return smi
