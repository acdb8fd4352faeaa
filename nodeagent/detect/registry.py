"""Which manufacturers the agent detects, and how each detector is built.

`--manufacturer` names the manufacturers an agent serves (`all` = every one in the table). Every
manufacturer of the table has a detector; one without its driver on the node detects no card.
A manufacturer added to the table without a detector is named in the log and otherwise behaves
like one with no card.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from chain.manufacturers import ManufacturerTable
from chain.settings import StartupEnv
from nodeagent.detect.amd import AMD, AmdDetector
from nodeagent.detect.ascend import ASCEND, AscendDetector
from nodeagent.detect.base import Detector
from nodeagent.detect.cambricon import CAMBRICON, CambriconDetector
from nodeagent.detect.hygon import HYGON, HygonDetector
from nodeagent.detect.iluvatar import ILUVATAR, IluvatarDetector
from nodeagent.detect.metax import METAX, MetaxDetector
from nodeagent.detect.mthreads import MTHREADS, MthreadsDetector
from nodeagent.detect.nvidia import NVIDIA, NvidiaDetector
from nodeagent.detect.nvml import Nvml
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.thead import THEAD, TheadDetector

log = logging.getLogger(__name__)

ALL = "all"


@dataclass(frozen=True)
class DetectorSetup:
    """What every detector may need. In simulation `nvml` replaces NVIDIA's library and
    `injected` hands other detectors theirs (manufacturer -> constructor keywords, e.g.
    `{"amd": {"smi": ...}}`)."""

    table: ManufacturerTable
    env: StartupEnv
    sysfs: Sysfs
    nvml: Nvml | None = None
    injected: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def _vendor(
    name: str, kind: Callable[..., Detector], **library: Callable[[DetectorSetup], object]
) -> Callable[[DetectorSetup], Detector]:
    """A detector over the vendor interface of the host (opened on the first pass), or over
    the simulated one the setup carries (`library` picks NVML; `injected` the others)."""

    def build(setup: DetectorSetup) -> Detector:
        return kind(
            sysfs=setup.sysfs,
            maker=setup.table[name],
            group_id_with_memory=setup.env.devices_group_id_with_memory,
            **{keyword: pick(setup) for keyword, pick in library.items()},
            **setup.injected.get(name, {}),
        )

    return build


DETECTORS: Mapping[str, Callable[[DetectorSetup], Detector]] = {
    NVIDIA: _vendor(NVIDIA, NvidiaDetector, nvml=lambda setup: setup.nvml),
    AMD: _vendor(AMD, AmdDetector),
    ASCEND: _vendor(ASCEND, AscendDetector),
    CAMBRICON: _vendor(CAMBRICON, CambriconDetector),
    HYGON: _vendor(HYGON, HygonDetector),
    ILUVATAR: _vendor(ILUVATAR, IluvatarDetector),
    METAX: _vendor(METAX, MetaxDetector),
    MTHREADS: _vendor(MTHREADS, MthreadsDetector),
    THEAD: _vendor(THEAD, TheadDetector),
}


def requested_manufacturers(flag: str, table: ManufacturerTable) -> tuple[str, ...]:
    """The manufacturers a `--manufacturer` value names (comma separated, or `all`)."""
    names = [part.strip().lower() for part in flag.split(",") if part.strip()]
    if not names or ALL in names:
        return tuple(table)
    unknown = [name for name in names if name not in table]
    if unknown:
        raise ValueError(f"--manufacturer: unknown {', '.join(unknown)}; known: {', '.join(table)}")
    return tuple(dict.fromkeys(names))


def detections(names: tuple[str, ...], setup: DetectorSetup) -> list[ManufacturerDetection]:
    """One held detection per requested manufacturer that has a detector."""
    missing = [name for name in names if name not in DETECTORS]
    if missing:
        log.info("no detector for %s; they report no cards", ", ".join(missing))
    return [
        ManufacturerDetection(
            DETECTORS[name](setup),
            setup.sysfs,
            setup.table[name].pci_vendor,
            setup.env.pci_class_prefixes,
        )
        for name in names
        if name in DETECTORS
    ]
