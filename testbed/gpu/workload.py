"""The CUDA program the GPU proof runs inside a sliced grant's environment (`prove.py`).

It stands alone (the standard library and PyTorch only): it runs with HAMi-core preloaded,
where nothing of the project needs to be importable. It reports, as one JSON line after
`RESULT_TAG`, what the process sees and whether each allocation succeeded:

- the card's total and free memory as CUDA reports them (`torch.cuda.mem_get_info`), and as
  `nvidia-smi` started from this process reports them (HAMi-core hooks NVML too);
- whether a `libvgpu.so` is mapped into this process (`/proc/self/maps`: the grant's preload
  reached it) and the testbed stand-in's mark, when that is what was preloaded;
- an allocation of `--under-mib` MiB, which must succeed under the limit;
- an allocation of `--over-mib` MiB, which must fail with out-of-memory under the limit and
  succeed without it (the control run).

Every step is caught on its own, so a failure is reported and the next step still runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from typing import Any

RESULT_TAG = "WORKLOAD-RESULT "
MIB = 1 << 20
SMI_TIMEOUT_S = 30
STANDIN_MARK = "GPUSTACK_ISOLATION_STANDIN"
"""Set by the testbed's stand-in library when it is loaded (testbed/isolation/standin.c)."""


def short(error: BaseException) -> str:
    """The error's type and first line (CUDA's messages run long)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:400]


def allocate(torch: Any, mib: int) -> dict[str, object]:
    """Allocate `mib` MiB on the card, write it (so the pages are really backed), free it."""
    started = time.monotonic()
    try:
        block = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        torch.cuda.synchronize()
    except Exception as error:  # the out-of-memory error is the expected outcome over the limit
        oom = type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower()
        return {"mib": mib, "ok": False, "out_of_memory": oom, "error": short(error)}
    seconds = round(time.monotonic() - started, 3)
    del block
    torch.cuda.empty_cache()
    return {"mib": mib, "ok": True, "out_of_memory": False, "seconds": seconds}


def smi_memory() -> dict[str, object]:
    """`nvidia-smi`'s view of the card's memory, from inside this process's environment."""
    argv = [
        "nvidia-smi",
        "--query-gpu=memory.total,memory.used",
        "--format=csv,noheader,nounits",
    ]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"error": short(error)}
    first = done.stdout.strip().splitlines()[:1]
    if done.returncode != 0 or not first:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[:300]}"}
    total, _, used = first[0].partition(",")
    return {"total_mib": total.strip(), "used_mib": used.strip()}


def preloaded() -> list[str]:
    """The `libvgpu.so` files mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in lines if line.endswith("libvgpu.so")})


def run(under_mib: int, over_mib: int) -> dict[str, object]:
    report: dict[str, object] = {"preloaded": preloaded()}
    if os.environ.get(STANDIN_MARK):
        report["standin"] = os.environ[STANDIN_MARK]
    try:
        torch: Any = importlib.import_module("torch")
        torch.cuda.init()
        report["device"] = str(torch.cuda.get_device_name(0))
        report["torch"] = str(torch.__version__)
    except Exception as error:
        report["error"] = f"CUDA did not start: {short(error)}"
        return report
    try:
        free, total = torch.cuda.mem_get_info(0)
        report["cuda_total_mib"] = int(total) // MIB
        report["cuda_free_mib"] = int(free) // MIB
    except Exception as error:
        report["cuda_memory_error"] = short(error)
    report["smi"] = smi_memory()
    report["under"] = allocate(torch, under_mib)
    report["over"] = allocate(torch, over_mib)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--under-mib", type=int, required=True)
    parser.add_argument("--over-mib", type=int, required=True)
    args = parser.parse_args(argv)
    report = run(args.under_mib, args.over_mib)
    print(RESULT_TAG + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
