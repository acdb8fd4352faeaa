"""`python -m benchmarks.profiled OUT MODULE ARGS...`: `python -m MODULE ARGS...` under cProfile.

The benchmark starts the verdict driver through its command line only (its internals change), so
profiling wraps that command line: SIGUSR1 writes the wall-clock profile gathered so far to OUT
(and stops gathering), SIGTERM ends the program as usual.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
from types import FrameType


def main() -> None:
    out, module, *args = sys.argv[1:]
    profile = cProfile.Profile()

    def dump(_signal: int, _frame: FrameType | None) -> None:
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR1, dump)
    sys.argv = [module, *args]
    profile.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
