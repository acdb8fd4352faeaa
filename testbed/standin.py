"""Stand-in slice isolation libraries for the agents the testbed runs as host processes.

An agent serving device plugins advertises a group's slices only where every file its
responder names for a slice is staged and, for a library, loads (nodeagent/plugin/
isolation.py). On the real nodes the shipped init container stages the stand-in image's library
(testbed/images.py). An agent the testbed runs on the host beside a kubelet emulator gets the
same files in a folder of its own (`--lib-dir`): each library a real shared object compiled with
`cc` from testbed/isolation/standin.c under the name the grant preloads (it loads and marks that
it was loaded, and enforces nothing: there is no card), each other file (the preload list, a
monitor tool) present. Which files: what the responders name for the groups the simulated
profile's detection finds, so the two cannot disagree.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from chain.manufacturers import manufacturers
from chain.settings import StartupEnv
from nodeagent.detect.registry import ALL, DetectorSetup, detections, requested_manufacturers
from nodeagent.plugin.responders import responder_for
from nodeagent.simulate.host import simulated_host
from testbed import build

SOURCE = Path(__file__).with_name("isolation") / "standin.c"


def compiled(soname: str) -> Path:
    """The stand-in compiled as `soname` (cached by source and name)."""
    digest = hashlib.sha256(SOURCE.read_bytes() + soname.encode()).hexdigest()[:16]
    path = build.cache_root() / "standin" / digest / soname
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(soname + ".partial")
    argv = ["cc", "-shared", "-fPIC", "-O2", f"-Wl,-soname,{soname}", "-o", str(partial)]
    subprocess.run([*argv, str(SOURCE)], check=True, capture_output=True, timeout=120)
    partial.rename(path)
    return path


def stage(lib_dir: Path, profile: str) -> list[Path]:
    """Every file a sliced grant of the profile's groups mounts, under `lib_dir`; returns them."""
    table = manufacturers(os.environ)
    env = StartupEnv.from_env(os.environ)
    names = requested_manufacturers(ALL, table)
    with simulated_host(profile) as host:
        setup = DetectorSetup(table, env, host.sysfs, host.nvml, host.injected)
        groups = [
            group for entry in detections(names, setup) for group in entry.detect(True).groups
        ]
    staged: list[Path] = []
    for group in groups:
        responder = responder_for(group.manufacturer)
        if responder is None or not responder.slices:
            continue
        for needed in responder.isolation_libraries(group, str(lib_dir)):
            path = Path(needed.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if needed.shared_object:
                shutil.copyfile(compiled(needed.name), path)
            elif not path.exists():
                path.write_text("# staged by the gpustack-chain testbed\n")
            staged.append(path)
    return staged
