"""Recorded vendor answers (`vendor/<manufacturer>/*.json`) and fake sysfs trees for them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nodeagent.detect.sysfs import Sysfs
from nodeagent.simulate.recorded import RecordedNvmlLike
from tests.unit.nodeagent.helpers import write

VENDOR_DIR = Path(__file__).parent / "vendor"


def recorded(manufacturer: str, name: str) -> Any:
    return json.loads((VENDOR_DIR / manufacturer / f"{name}.json").read_text(encoding="utf-8"))


def fake_sysfs(
    root: Path,
    vendor: str,
    addresses: Iterable[str],
    drm: Mapping[str, tuple[int, int]] | None = None,
    drm_dir: str = "sys/bus/pci/devices",
    numa: str = "0",
) -> Sysfs:
    """Cards of `vendor` at `addresses` on NUMA node `numa` (CPUs 0-31), with DRM nodes."""
    for address in addresses:
        folder = root / "sys/bus/pci/devices" / address
        write(folder / "vendor", f"0x{vendor}")
        write(folder / "class", "0x120000")
        write(folder / "numa_node", numa)
    for address, (card, render) in (drm or {}).items():
        for node in (f"card{card}", f"renderD{render}"):
            (root / drm_dir / address / "drm" / node).mkdir(parents=True, exist_ok=True)
    write(root / f"sys/devices/system/node/node{numa}/cpulist", "0-31")
    return Sysfs(root)


def nvmlike(manufacturer: str, name: str) -> RecordedNvmlLike:
    """IXML or HGML answering from one of the recordings."""
    return RecordedNvmlLike(recorded(manufacturer, name))
