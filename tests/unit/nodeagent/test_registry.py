"""Every manufacturer has a detector; without its driver, each detects nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from chain.manufacturers import ManufacturerTable
from chain.settings import StartupEnv
from nodeagent.detect.registry import (
    DETECTORS,
    DetectorSetup,
    detections,
    requested_manufacturers,
)
from nodeagent.detect.sysfs import Sysfs

ROOT = Path(__file__).resolve().parents[3]


def test_every_manufacturer_has_a_detector(table: ManufacturerTable) -> None:
    assert set(DETECTORS) == set(table)
    setup = DetectorSetup(table, StartupEnv(), Sysfs("/nonexistent"))
    for name in table:
        detector = DETECTORS[name](setup)
        assert detector.manufacturer == name


def test_without_cards_on_the_bus_nothing_is_asked(
    tmp_path: Path, table: ManufacturerTable
) -> None:
    setup = DetectorSetup(table, StartupEnv(), Sysfs(tmp_path))
    for entry in detections(requested_manufacturers("all", table), setup):
        detected = entry.detect()
        assert detected.measured and detected.groups == ()


def test_detect_command_without_the_drivers() -> None:
    # No vendor library on this machine: an empty list and exit status 0, even when every
    # driver is asked past the PCI pre-check.
    others = "amd,ascend,cambricon,hygon,iluvatar,metax,mthreads,thead"
    command = [sys.executable, "-m", "nodeagent", "detect", "--manufacturer", others]
    done = subprocess.run(
        [*command, "--no-pci-check", "-o", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
