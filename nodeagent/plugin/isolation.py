"""Whether a group's logical slices can be isolated on this node (the `slicingUnavailable` check).

A sliced grant preloads its manufacturer's isolation library from the host's staged directory
(`OPERATOR_LIB_DIR/<manufacturer>/`). When that file is missing, or is not a library this host
can load, the container's dynamic loader prints "cannot be preloaded: ignored" and the
container runs with the whole card while the ledger counts a slice. So a group is published
with its logical slices only when every file its responder names for a slice
(`Responder.isolation_libraries`, derived from the helpers its `sliced` response mounts with) is
usable here:

- a shared object must be present, an ELF shared object of this host's class and machine, and
  load: `dlopen` in a subprocess (its constructors run there, and a library that crashes or
  hangs takes only the subprocess with it), which also resolves its `DT_NEEDED` entries the
  way the agent's container can (NVIDIA's agent gets `libcuda.so.1` through the toolkit's
  `compute` capability for that reason);
- any other file the grant mounts (`ld.so.preload`, a monitor tool) must be present: a
  missing mount source keeps the container from starting. Its content is not read:
  `ld.so.preload` names paths inside the workload's container, and the staging that copies the
  libraries writes it beside them.

A manufacturer whose slices preload nothing (driver-made slices, a quota file) names no file,
so its groups are always available. Each file's verdict is kept per (path, size, mtime, inode):
the subprocess runs again only when the file changes (a library whose dependencies this
container lacks stays refused until the file changes or the agent restarts: the container's
libraries do not change under it). A verdict about the attempt rather than the file
(`Unsettled`: the loading process ran out of time, was killed with SIGKILL, or could not start)
is kept only `RETRY_UNSETTLED_S`, then the file is loaded again: kept like the others, a check
that fell on a node busy starting its Pods withheld the group's slices for as long as the agent
ran. Every report asks again, so a library staged later turns slicing on without restarting the
agent and a removed one turns it off.

The header checks are pure (`elf_problem`); the shell stats, reads and loads.
"""

from __future__ import annotations

import os
import signal
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from chain.devices import DevicesGroup
from nodeagent.plugin.grants import OPERATOR_LIB_DIR, IsolationFile, Responder
from nodeagent.plugin.responders import RESPONDERS

LOAD_TIMEOUT_S = 5.0
"""How long the loading subprocess may take (an interpreter start and one dlopen)."""
RETRY_UNSETTLED_S = 60.0
"""How long an `Unsettled` verdict is kept before the unchanged file is loaded again: a library
that hangs costs one `LOAD_TIMEOUT_S` a minute, not one every monitor round."""
ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
"""`e_type` of a shared object (a position-independent executable says the same: dlopen tells
them apart)."""
HEADER_BYTES = 20
"""Enough of an ELF header to reach `e_machine` (offset 18, two bytes)."""
MACHINES: Mapping[str, int] = {
    "x86_64": 62,
    "amd64": 62,
    "aarch64": 183,
    "arm64": 183,
    "i386": 3,
    "i686": 3,
    "ppc64le": 21,
    "ppc64": 21,
    "s390x": 22,
    "riscv64": 243,
    "loongarch64": 258,
}
"""`os.uname().machine` to the ELF `e_machine` this host loads."""
MACHINE_NAMES: Mapping[int, str] = {
    62: "x86_64",
    183: "aarch64",
    3: "i386",
    40: "arm",
    21: "ppc64",
    22: "s390x",
    243: "riscv64",
    258: "loongarch64",
}
LOADER = (
    "import ctypes, sys\n"
    "try:\n"
    "    ctypes.CDLL(sys.argv[1])\n"
    "except OSError as error:\n"
    "    sys.exit(str(error))\n"
)
"""Run by the loading subprocess: exit 0 when the library loads, else the loader's message."""


@dataclass(frozen=True)
class Slicing:
    """Whether a group's logical slices can be handed out on this node."""

    served: bool = True
    """False when this agent serves no slices of the manufacturer at all (by design: its
    slices are simply not published, and nothing is said)."""
    problem: str = ""
    """Why the group's slices cannot be handed out now (its isolation library, each unusable
    file with what is wrong); empty when they can."""

    @property
    def offered(self) -> bool:
        return self.served and not self.problem


OFFERED = Slicing()
NOT_SERVED = Slicing(served=False)


def elf_problem(header: bytes, machine: str, bits: int) -> str:
    """What keeps the file whose first bytes are `header` from being a shared object this host
    (`os.uname().machine`, `bits`-bit) loads; empty when nothing does. A host machine missing
    from `MACHINES` is not compared (the subprocess's dlopen still is)."""
    if len(header) < HEADER_BYTES or not header.startswith(ELF_MAGIC):
        return "not an ELF shared object"
    order = {1: "<", 2: ">"}.get(header[5])
    if order is None or header[4] not in (1, 2):
        return "not an ELF shared object (unknown class or byte order)"
    kind, built = struct.unpack(order + "HH", header[16:20])
    if kind != ET_DYN:
        return f"not an ELF shared object (ELF type {kind})"
    want = MACHINES.get(machine)
    if want is not None and built != want:
        name = MACHINE_NAMES.get(built, f"ELF machine {built}")
        return f"built for {name}, this host is {machine}"
    built_bits = 32 if header[4] == 1 else 64
    if built_bits != bits:
        return f"built for {built_bits}-bit, this host is {bits}-bit"
    return ""


class Unsettled(str):
    """A load problem that says nothing sure about the file: the loading process ran out of
    time (a node busy starting its Pods is enough, as is a library that hangs), was killed with
    SIGKILL (the agent container's memory limit), or could not start. Tried again after
    `RETRY_UNSETTLED_S` although the file did not change."""


def load_problem(path: str, timeout_s: float = LOAD_TIMEOUT_S) -> str:
    """dlopen `path` in a subprocess of this interpreter: empty when it loads, else why (the
    last line the loader wrote); `Unsettled` when the attempt, not the file, failed."""
    argv = [sys.executable, "-I", "-S", "-c", LOADER, path]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Unsettled(f"dlopen did not return within {timeout_s:g} s")
    except OSError as error:
        return Unsettled(f"dlopen could not be tried: {error}")
    if done.returncode == 0:
        return ""
    if done.returncode == -signal.SIGKILL:
        killed = int(signal.SIGKILL)
        return Unsettled(f"dlopen failed: the loading process was killed by signal {killed}")
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if lines:
        return f"dlopen failed: {lines[-1]}"
    if done.returncode < 0:
        return f"dlopen failed: the loading process was killed by signal {-done.returncode}"
    return f"dlopen failed: the loading process exited {done.returncode}"


FileKey = tuple[str, int, int, int]
"""(path, size, mtime in ns, inode): a file's identity for the kept verdicts."""
Kept = tuple[FileKey, str, float]
"""A kept verdict: the file's identity when judged, the verdict, and when (`clock`)."""


class IsolationCheck:
    """Says, for one group, whether its slices' isolation files are usable on this host.

    `root` is where the host's filesystem is read (`/` in the agent, which mounts the staged
    directory at its host path; a preflight's `--host-root`); every path it reports is the
    host's. `load`, `machine`, `bits` and `clock` stand in for the subprocess, the host and
    the time in tests."""

    def __init__(
        self,
        responders: Mapping[str, Responder] | None = None,
        lib_dir: str = OPERATOR_LIB_DIR,
        root: str = "/",
        load: Callable[[str], str] = load_problem,
        machine: str | None = None,
        bits: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.responders = RESPONDERS if responders is None else responders
        self.lib_dir = lib_dir
        self.root = root
        self.load = load
        self.machine = machine or os.uname().machine
        self.bits = bits or struct.calcsize("P") * 8
        self.clock = clock
        self.kept: dict[str, Kept] = {}
        """Per file, the identity it had when last judged, the verdict (a shared object's) and
        when it was given."""
        self.loads = 0
        """Subprocesses started (what the kept verdicts save)."""

    def __call__(self, group: DevicesGroup) -> Slicing:
        """The group's verdict, by its manufacturer's responder (none, or one that does not
        slice: not served)."""
        responder = self.responders.get(group.manufacturer)
        if responder is None or not responder.slices:
            return NOT_SERVED
        return self.verdict(responder, group)

    def verdict(self, responder: Responder, group: DevicesGroup) -> Slicing:
        """Whether every file `responder` names for a slice of `group` is usable."""
        problems = []
        for staged in responder.isolation_libraries(group, self.lib_dir):
            problem = self.problem(staged)
            if problem:
                problems.append(f"{staged.path}: {problem}")
        return Slicing(problem="; ".join(problems)) if problems else OFFERED

    def problem(self, staged: IsolationFile) -> str:
        """What is wrong with one staged file; empty when nothing is."""
        where = os.path.join(self.root, staged.path.lstrip("/"))
        try:
            found = os.stat(where)
        except FileNotFoundError:
            return "missing"
        except OSError as error:
            return f"cannot be read: {error.strerror or error}"
        if not stat.S_ISREG(found.st_mode):
            return "not a regular file"
        if not staged.shared_object:
            return ""
        key = (where, found.st_size, found.st_mtime_ns, found.st_ino)
        kept = self.kept.get(where)
        if kept is not None and self._still_holds(kept, key):
            return kept[1]
        verdict = self._judge(where)
        self.kept[where] = (key, verdict, self.clock())
        return verdict

    def _still_holds(self, kept: Kept, key: FileKey) -> bool:
        """Whether a kept verdict answers for the file `key` names now: the same file, and
        not an `Unsettled` verdict older than `RETRY_UNSETTLED_S`."""
        judged, verdict, at = kept
        if judged != key:
            return False
        return not isinstance(verdict, Unsettled) or self.clock() - at < RETRY_UNSETTLED_S

    def _judge(self, where: str) -> str:
        try:
            with open(where, "rb") as library:
                header = library.read(HEADER_BYTES)
        except OSError as error:
            return f"cannot be read: {error.strerror or error}"
        problem = elf_problem(header, self.machine, self.bits)
        if problem:
            return problem
        self.loads += 1
        return self.load(where)
