"""Helpers for the node agent tests: simulated NVIDIA nodes and fake sysfs trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chain.devices import DevicesGroup
from chain.manufacturers import manufacturers
from chain.settings import StartupEnv
from nodeagent.detect.registry import DETECTORS, DetectorSetup
from nodeagent.detect.sysfs import Sysfs
from nodeagent.simulate import Profile, SimulatedNvml, simulated_node
from nodeagent.simulate.host import profile_manufacturer, simulated_host
from nodeagent.simulate.profile import parse_profile, read_profile_file
from nodeagent.vendors.nvidia.detect import NvidiaDetector
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR, load_profile


@contextmanager
def nvidia_node(
    profile: Profile | str, with_memory: bool = False
) -> Iterator[tuple[NvidiaDetector, SimulatedNvml, Sysfs]]:
    """The real NVIDIA detector over a simulated node."""
    loaded = load_profile(profile) if isinstance(profile, str) else profile
    with simulated_node(loaded, PCI_VENDOR) as (nvml, sysfs):
        detector = NvidiaDetector(
            nvml=nvml,
            sysfs=sysfs,
            maker=manufacturers({})["nvidia"],
            group_id_with_memory=with_memory,
        )
        yield detector, nvml, sysfs


def detect(profile: Profile | str, with_memory: bool = False) -> tuple[DevicesGroup, ...]:
    """The groups the manufacturer's real detector reports for a simulated node."""
    maker = "nvidia"
    if isinstance(profile, str):
        maker = profile_manufacturer(read_profile_file(profile)[1])
    if isinstance(profile, str) and maker != "nvidia":
        with simulated_host(profile) as host:
            env = replace(StartupEnv(), devices_group_id_with_memory=with_memory)
            setup = DetectorSetup(manufacturers({}), env, host.sysfs, host.nvml, host.injected)
            return DETECTORS[maker](setup).detect()
    with nvidia_node(profile, with_memory) as (detector, _, _):
        return detector.detect()


def small_profile(**extra: Any) -> Profile:
    """Two T4-like cards, plus whatever `extra` adds (faults, driver, ...)."""
    body: dict[str, Any] = {
        "driver": {"version": "580.126.09", "cudaVersion": 13000},
        "numa": {0: "0-7"},
        "models": {
            "t4": {
                "name": "Tesla T4",
                "memoryMib": 15360,
                "memoryBusWidth": 256,
                "ecc": True,
                "computeCapability": "7.5",
                "cores": 2560,
            }
        },
        "cards": [
            {"model": "t4", "busId": "00000000:00:1B.0", "numaNode": 0},
            {"model": "t4", "busId": "00000000:00:1C.0", "numaNode": 0},
        ],
    }
    body.update(extra)
    return parse_profile("small", body)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="ascii")


def nodeagent_command(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m nodeagent ARGS` from the repository root, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nodeagent", *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        env=dict(os.environ),
        timeout=60,
        check=False,
    )


PROBE_SOURCE = "int gpustack_probe(void) { return 1; }\n"


def shared_object(
    path: Path, source: str = PROBE_SOURCE, needs: Sequence[Path] = (), flags: Sequence[str] = ()
) -> Path:
    """A real shared object at `path` (its soname its file name), built now with the host's
    `cc` from `source` with `flags`, linked against the libraries `needs` (each becomes a
    DT_NEEDED entry naming its soname). Fails the test on a machine without a C compiler."""
    cc = shutil.which("cc")
    if cc is None:  # `make test` installs gcc (testbed/system.py): the check must be tested
        pytest.fail(
            "no C compiler (cc): these tests build real shared objects (apt-get install gcc)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    code = path.parent / f".{path.name}.c"
    code.write_text(source)
    argv = [cc, "-shared", "-fPIC", f"-Wl,-soname,{path.name}", *flags, "-o", str(path), str(code)]
    try:
        subprocess.run([*argv, *map(str, needs)], check=True, capture_output=True, timeout=60)
    finally:
        code.unlink()
    return path
