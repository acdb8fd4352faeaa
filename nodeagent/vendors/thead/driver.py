"""T-Head's HGML seen through pynvml, so `mig.Partitioner` makes PPU partitions with the very
code that makes NVIDIA's.

HGML copies NVML's C API (calls, structs, return codes) under `hgml*` names. pynvml looks every
call up by name on one module-level library object (`nvmlLib`), so a private copy of the pynvml
module whose library answers `nvmlX` with HGML's `hgmlX` *is* an HGML binding: the struct
layouts, versioned-struct stamps, error classes and buffer sizing pynvml gets right for NVML
hold for HGML too. Where HGML exports only the unversioned call (`hgmlComputeInstanceGetInfo`
for pynvml's `..._v2`), the unversioned one answers; `nvmlInitWithFlags(0)` falls back to
`hgmlInit_v2`/`hgmlInit`. A call HGML lacks raises pynvml's FUNCTION_NOT_FOUND error, as for
an old NVML.

The copy is private (its own name in `sys.modules`): the NVIDIA agent's own pynvml, if any,
keeps its library.
"""

from __future__ import annotations

import ctypes
import importlib.util
import itertools
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, cast

from chain.partitions import normalize_profile_name
from nodeagent.detect.vendor import load_library
from nodeagent.plugin.mig import MigNvml
from nodeagent.vendors.common.nvml_mig import text
from nodeagent.vendors.thead.detect import TheadDetector
from nodeagent.vendors.thead.partitions import PROFILE_COUNT as HGML_PROFILE_COUNT

_VERSIONED = re.compile(r"(.+)_v[0-9]+$")
_copies = itertools.count()


class RenamedLibrary:
    """A loaded library whose `prefix`-named functions answer pynvml's `nvml`-named lookups."""

    def __init__(self, cdll: ctypes.CDLL, prefix: str) -> None:
        self._cdll = cdll
        self._prefix = prefix

    def _own(self, tail: str) -> Any:
        names = [tail]
        if versioned := _VERSIONED.fullmatch(tail):
            names.append(versioned[1])
        for name in names:
            try:
                return getattr(self._cdll, self._prefix + name)
            except AttributeError:
                continue
        return None

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        tail = name.removeprefix("nvml")
        found = self._own(tail)
        if found is None and tail == "InitWithFlags":
            init = self._own("Init_v2")
            if init is not None:
                return _ignoring_flags(init)
        if found is None:
            raise AttributeError(name)
        return found


def _ignoring_flags(init: Callable[[], int]) -> Callable[[int], int]:
    def init_with_flags(_flags: int) -> int:
        return init()

    return init_with_flags


def pynvml_over(cdll: ctypes.CDLL, prefix: str) -> ModuleType:
    """A private copy of pynvml bound to `cdll`'s `prefix`-named functions. pynvml looks itself
    up in `sys.modules` while it loads, so the copy is registered there under its own name."""
    found = importlib.util.find_spec("pynvml")
    if found is None or found.origin is None:
        raise ImportError("pynvml is not installed")
    name = f"{__name__}.pynvml_{prefix}_{next(_copies)}"
    spec = importlib.util.spec_from_file_location(name, found.origin)
    if spec is None or spec.loader is None:
        raise ImportError(f"pynvml cannot be loaded from {found.origin}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    module.nvmlLib = RenamedLibrary(cdll, prefix)  # type: ignore[attr-defined]  # then no load
    return module


def open_hgml_mig(
    environ: Mapping[str, str], candidates: Iterable[str] | None = None
) -> MigNvml | None:
    """HGML as a `MigNvml`, initialised; None when the library is not on this host or no driver
    answers its init (the agent then serves no partitioned resource for T-Head). The library is
    looked for where the T-Head detector looks (`PPU_HOME`)."""
    found = load_library(
        candidates if candidates is not None else TheadDetector.candidates(environ)
    )
    if found is None:
        return None
    try:
        hgml = pynvml_over(found, "hgml")
    except ImportError:
        return None
    try:
        hgml.nvmlInit()
    except hgml.NVMLError:
        return None
    return cast(MigNvml, hgml)


class TheadNaming:
    """HGML probes its whole profile-id space (`HGML_GPU_INSTANCE_PROFILE_COUNT`, wider than
    NVML's); media and graphics variants (a `+` in the name) are not offered; the name is the
    driver's own, normalized exactly as the detector normalized it before publishing."""

    by_bus = False

    def count(self, nvml: MigNvml) -> int:
        return HGML_PROFILE_COUNT

    def name(self, index: int, info: Any, card_mib: int) -> str | None:
        raw = text(info.name)
        return None if "+" in raw else normalize_profile_name(raw) or None
