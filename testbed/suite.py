"""`python -m testbed.suite [pytest arguments]`: the whole pytest run of `make test`, in two lanes.

The run is bound by waiting, not by CPU: on the 2-core machine CI uses, a single pytest process
over `tests` kept the machine 35 to 55 % busy on average in every part (measured 2026-12-06,
sampled every 5 s: the unit tier 41 %, the fleet bed's modules 34 %, the emulated testbed's 46 %,
the real nodes' 40 %), its e2e tests mostly waiting on controllers, kubelets and containers. So
this runner runs the session as two pytest processes at once, split by `cluster_group`
(`testbed.pytest_plugin`), each of about the same length:

- **emulated** (`--cluster-groups 0,1`): the e2e modules with control planes of their own (the
  fleet bed), the unit tier, then the emulated testbed's modules;
- **real-nodes** (`--cluster-groups 2,3`): the real-node cluster's modules, the ones that reshape
  its install last.

At most two clusters run at once, one per lane, and each lane keeps the plugin's rules: its
clusters one after the other, each down after its last test. Together the two select every test a
plain `pytest tests` selects, each once. Each line either process writes is shown as it comes,
tagged with its lane (`[emulated] `, `[real-nodes] `); when both have ended each one's summary is
shown again, untagged, and the exit status is the first failing lane's in the order above
(pytest's 5, nothing collected, for example under `-k`, is not a failure). The arguments given
are passed to both, after the runner's own, and so is `PYTEST_ADDOPTS`; each lane keeps its own
pytest cache, so `--lf` works per lane. SIGTERM is passed on as SIGINT, on which pytest tears its
clusters down; a terminal's Ctrl-C reaches both processes directly, and the runner waits for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO

NOTHING_COLLECTED = 5
"""pytest's exit status when every test was deselected: no test failed."""


@dataclass(frozen=True)
class Lane:
    """One pytest process: its tag in the output and its arguments."""

    name: str
    args: tuple[str, ...]


def plan(extra: Sequence[str], python: str = sys.executable) -> list[Lane]:
    """The lanes, which run at once; their order is the order of the exit status."""

    def lane(name: str, groups: str) -> Lane:
        return Lane(
            name,
            (python, "-m", "pytest", "--cluster-groups", groups,
             # Two processes writing one cache would each overwrite the other's record.
             "-o", f"cache_dir=.pytest_cache/{name}", "tests", *extra),
        )  # fmt: skip

    return [lane("emulated", "0,1"), lane("real-nodes", "2,3")]


def verdict(codes: Sequence[int]) -> int:
    """The suite's exit status from its lanes' in plan order: the first failure's."""
    for code in codes:
        if code not in (0, NOTHING_COLLECTED):
            return code
    return 0


def summary(output: Sequence[str]) -> list[str]:
    """What pytest ends with: from its last `short test summary info` header if it wrote one
    (failures, errors, skips), else its last line."""
    for index in range(len(output) - 1, -1, -1):
        if output[index].startswith("=") and "short test summary info" in output[index]:
            return list(output[index:])
    return list(output[-1:])


@dataclass
class _Running:
    lane: Lane
    proc: subprocess.Popen[bytes]
    started: float
    lines: list[str] = field(default_factory=list)
    took: float = 0.0


def _pump(running: _Running, out: IO[bytes], lock: threading.Lock) -> None:
    """Each line as it comes, tagged; kept for the summary."""
    assert running.proc.stdout is not None
    tag = f"[{running.lane.name}] ".encode()
    for raw in running.proc.stdout:
        running.lines.append(raw.decode(errors="replace").rstrip("\n"))
        with lock:
            out.write(tag + raw)
            out.flush()
    running.took = time.monotonic() - running.started  # its output closed: it has ended


def run(lanes: Sequence[Lane], out: IO[bytes]) -> list[tuple[Lane, int, float, list[str]]]:
    """Every lane at once; each one's exit status, time and output, in plan order."""
    lock = threading.Lock()
    running: list[_Running] = []
    pumps: list[threading.Thread] = []
    for lane in lanes:
        proc = subprocess.Popen(lane.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        running.append(_Running(lane, proc, time.monotonic()))
        pumps.append(threading.Thread(target=_pump, args=(running[-1], out, lock), daemon=True))
        pumps[-1].start()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for each in running:
            if each.proc.poll() is None:
                each.proc.send_signal(signal.SIGINT)

    def let_them_stop(signum: int, frame: FrameType | None) -> None:
        """A terminal's Ctrl-C reached the lanes too (one process group): wait for them."""

    handlers = {signal.SIGTERM: interrupt, signal.SIGINT: let_them_stop}
    main_thread = threading.current_thread() is threading.main_thread()  # else no handlers
    before = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()} if (
        main_thread) else {}  # fmt: skip
    try:
        for each, pump in zip(running, pumps, strict=True):
            each.proc.wait()  # a handler that returns does not interrupt the wait (PEP 475)
            pump.join()
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    return [(each.lane, each.proc.returncode, each.took, each.lines) for each in running]


def main(argv: Sequence[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    # Lines as they come: pytest writes to a pipe here, which Python would buffer.
    os.environ["PYTHONUNBUFFERED"] = "1"
    start = time.monotonic()
    results = run(plan(extra), sys.stdout.buffer)
    for lane, _, _, lines in results:
        print(f"\n===== {lane.name}: {' '.join(lane.args[1:])} =====")
        print("\n".join(summary(lines)))
    print("\n===== the suite, by lane =====")
    for lane, code, took, _ in results:
        state = {0: "passed", NOTHING_COLLECTED: "nothing collected"}.get(code, f"FAILED ({code})")
        print(f"{lane.name:12} {state:20} {took:6.0f} s")
    code = verdict([code for _, code, _, _ in results])
    took = time.monotonic() - start
    print(f"{'both':12} {'passed' if code == 0 else f'FAILED ({code})':20} {took:6.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
