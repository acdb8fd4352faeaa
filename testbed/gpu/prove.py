"""The GPU proof: the NVIDIA detector and HAMi-core slicing on a real card (docs/nodeagent.md,
"On a real GPU").

Run on a machine with an NVIDIA card, from the repository root, with PYTHONPATH at the root
(`testbed/gpu/prove.sh` does this). It needs `nvidia-smi`, NVML (nvidia-ml-py), and for the
slicing part a C compiler, CMake, the CUDA headers, HAMi-core's source and PyTorch. In order:

1. `nvidia-smi -L`, `-q`, `--query-gpu` and `topo -m` are recorded;
2. `python -m nodeagent detect -o json` and `preflight -o json` run with the real NVML, and
   the detected groups are compared with nvidia-smi field by field (name, memory, UUID, PCI bus
   id, compute capability, driver and CUDA versions, MIG mode, NUMA node): a MATCH or MISMATCH
   line each;
3. `libvgpu.so` is built from HAMi-core's source with CMake, staged by the init container's own
   script (`nodeagent.staging.STAGE_SCRIPT`) into a throwaway `--lib-dir`, and preflight runs
   again: the group's slicing goes from unavailable (naming the missing library) to available.
   A `--library` built elsewhere is staged instead of building; with neither it nor the source,
   the testbed's stand-in is (it loads and enforces nothing: the enforcement claims then fail);
4. the NVIDIA responder renders a sliced grant of the card, exactly as Allocate does (the
   container's limits parsed by `SlicedLimits.from_container`), and `workload.py` runs with
   its environment and mounts: in a private mount namespace where each mount is bind-mounted
   from its host path to its container path (the staged `ld.so.preload` over
   `/etc/ld.so.preload`), or with `LD_PRELOAD` when no namespace can be made. Under the limit an
   allocation succeeds, over it one fails with out-of-memory; the same program without the
   library allocates over the limit (the control).

Every step has a timeout and the proof goes on after a failure; the end is a table of what was
proven, PASS or FAIL each, and `results.json` in the output directory.

The parsers and the comparison (`parse_smi_q`, `parse_smi_csv`, `parse_topology`, `compare`)
are pure, and tested against hand-written nvidia-smi output (tests/unit/test_gpu_proof.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NVIDIA = "nvidia"
SMI_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    "mig.mode.current",
)
"""The `--query-gpu` fields compared (`compute_cap` needs a driver of 2022 or later)."""
RESULT_TAG = "WORKLOAD-RESULT "
"""The line prefix `workload.py` reports after (kept equal to its own)."""
WORKLOAD = Path(__file__).with_name("workload.py")
STEP_TIMEOUT_S = 90
BUILD_TIMEOUT_S = 300
WORKLOAD_TIMEOUT_S = 150
MISSING = "(none)"
STANDIN = Path("testbed/isolation/standin.c")
"""The testbed's stand-in isolation library, relative to the repository root."""


@dataclass
class Run:
    """One command and what it did."""

    argv: list[str]
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.error


def run(
    argv: Sequence[str],
    timeout_s: float = STEP_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Run:
    """Run a command with a timeout; never raises (the proof goes on after a failure)."""
    done = Run(list(argv))
    started = time.monotonic()
    try:
        finished = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
            cwd=cwd,
            check=False,
        )
        done.returncode = finished.returncode
        done.stdout, done.stderr = finished.stdout, finished.stderr
    except subprocess.TimeoutExpired as expired:
        done.error = f"timed out after {timeout_s:g} s"
        done.stdout = _text(expired.stdout)
        done.stderr = _text(expired.stderr)
    except OSError as error:
        done.error = f"could not be run: {error}"
    done.seconds = round(time.monotonic() - started, 2)
    return done


def _text(raw: str | bytes | None) -> str:
    if raw is None:
        return ""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw


# --- nvidia-smi, read purely -------------------------------------------------------------------


def bus_id(raw: str) -> str:
    """A PCI address in one spelling: nvidia-smi's `00000000:1B:00.0` and sysfs's
    `0000:1b:00.0` both become `0000:1b:00.0`."""
    text = raw.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not re.fullmatch(r"[0-9a-f]+", domain):
        return text
    return f"{int(domain, 16):04x}:{rest}"


def parse_smi_csv(text: str, fields: Sequence[str] = SMI_FIELDS) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`: one row per card."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            continue
        rows.append(dict(zip(fields, values, strict=True)))
    return rows


@dataclass
class SmiCard:
    """One card's block of `nvidia-smi -q`."""

    bus_id: str
    values: dict[str, str] = field(default_factory=dict)
    """`Section/Key` (sections joined by `/`) to the printed value."""


@dataclass
class SmiReport:
    """`nvidia-smi -q`: the top-level values (driver, CUDA version) and each card's block."""

    values: dict[str, str] = field(default_factory=dict)
    cards: list[SmiCard] = field(default_factory=list)

    @property
    def cuda_version(self) -> str:
        for key, value in self.values.items():
            if "CUDA" in key and "Version" in key:
                return value
        return ""


def parse_smi_q(text: str) -> SmiReport:
    """`nvidia-smi -q`: `Key : Value` lines nested by indentation under section headers (a
    line without a colon-separated value); each card's block starts at column 0 with
    `GPU <bus id>`."""
    report = SmiReport()
    card: SmiCard | None = None
    sections: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if indent == 0 and re.fullmatch(
            r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.\d+", stripped
        ):
            card = SmiCard(bus_id(stripped.split(" ", 1)[1]))
            report.cards.append(card)
            sections = []
            continue
        while sections and sections[-1][0] >= indent:
            sections.pop()
        key, colon, value = stripped.partition(":")
        if not colon:
            sections.append((indent, stripped))
            continue
        path = "/".join([name for _, name in sections] + [key.strip()])
        target = report.values if card is None or indent == 0 else card.values
        target.setdefault(path, value.strip())
    return report


def parse_topology(text: str) -> dict[str, str]:
    """`nvidia-smi topo -m`: each `GPU<i>` row's `NUMA Affinity` (tab-separated columns, the
    header naming them; the row's first cell is its name, which the header leaves blank)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    header = [cell.strip() for cell in lines[0].split("\t")]
    if "NUMA Affinity" not in header:
        return {}
    column = header.index("NUMA Affinity")
    found = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.split("\t")]
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > column:
            found[cells[0]] = cells[column]
    return found


def no_value(raw: str) -> bool:
    return raw.strip().strip("[]").upper() in ("N/A", "", "NOT SUPPORTED")


@dataclass(frozen=True)
class Comparison:
    """One field of one card: what the detector says against what nvidia-smi says."""

    card: str
    field: str
    detected: str
    smi: str
    match: bool
    note: str = ""

    def line(self) -> str:
        verdict = "MATCH" if self.match else "MISMATCH"
        note = f" ({self.note})" if self.note else ""
        return (
            f"{verdict:8} {self.card} {self.field}: detected {self.detected!r}, "
            f"nvidia-smi {self.smi!r}{note}"
        )


def compare(
    groups: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, str]],
    report: SmiReport,
    numa: Mapping[str, str] | None = None,
    sysfs_numa: Mapping[str, str] | None = None,
    host_nodes: Sequence[int] = (),
) -> list[Comparison]:
    """Each NVIDIA card the detector found (its `spec.groups` as printed by `detect -o json`)
    against nvidia-smi's row with the same UUID (the `--query-gpu` rows), the `-q` report
    (CUDA version), `topo -m`'s NUMA affinity by `GPU<index>` (`numa`) and the sysfs
    `numa_node` by bus id (`sysfs_numa`; a -1 there stands for the host's node when
    `host_nodes` lists only one, as the detector reads it). A card nvidia-smi lists and the
    detector does not is one MISMATCH line, and the other way round."""
    results: list[Comparison] = []
    by_uuid = {row.get("uuid", ""): row for row in rows}
    seen: set[str] = set()
    cuda = report.cuda_version
    for group in groups:
        if group.get("manufacturer") != NVIDIA:
            continue
        for card in group.get("accelerators", []):
            uuid = str(card.get("id", ""))
            row = by_uuid.get(uuid)
            if row is None:
                results.append(Comparison(uuid, "present", "yes", "no", False))
                continue
            seen.add(uuid)
            nodes = (numa or {}, sysfs_numa or {}, host_nodes)
            results.extend(_compare_card(group, card, row, cuda, *nodes))
    for uuid in by_uuid:
        if uuid not in seen:
            results.append(Comparison(uuid, "present", "no", "yes", False))
    return results


def _compare_card(
    group: Mapping[str, Any],
    card: Mapping[str, Any],
    row: Mapping[str, str],
    cuda: str,
    numa: Mapping[str, str],
    sysfs_numa: Mapping[str, str],
    host_nodes: Sequence[int],
) -> list[Comparison]:
    uuid = str(card.get("id", ""))
    topology = card.get("topology") or {}
    status = card.get("status") or {}

    def same(name: str, detected: object, smi: str, note: str = "") -> Comparison:
        mine = str(detected)
        return Comparison(uuid, name, mine, smi, mine == smi, note)

    memory = int(group.get("memory", 0))
    smi_memory = row.get("memory.total", "")
    memory_note = ""
    if smi_memory.isdigit() and memory == int(smi_memory) * 16 // 15 != int(smi_memory):
        memory_note = "ECC-restored: nvidia-smi's figure times 16/15, as the detector documents"
        smi_memory = str(memory)
    detected_bus = bus_id(str(topology.get("pciBusId", "")))
    mig = "Enabled" if status.get("physicalSliced") else "Disabled"
    smi_mig = row.get("mig.mode.current", "")
    smi_mig = "Disabled" if no_value(smi_mig) else smi_mig
    results = [
        same("name", group.get("name", ""), row.get("name", "")),
        same("memory MiB", memory, smi_memory, memory_note),
        same("UUID", uuid, row.get("uuid", "")),
        same("PCI bus id", detected_bus, bus_id(row.get("pci.bus_id", ""))),
        same("compute capability", group.get("computeCapability", ""), row.get("compute_cap", "")),
        same("driver version", group.get("driverVersion", ""), row.get("driver_version", "")),
        same("CUDA version", group.get("runtimeVersion", ""), cuda),
        same("MIG mode", mig, smi_mig),
    ]
    detected_numa = str(topology.get("numaAffinity", ""))
    smi_numa = numa.get(f"GPU{row.get('index', '')}")
    if smi_numa is not None:
        shown = "" if no_value(smi_numa) else smi_numa
        results.append(same("NUMA (topo -m)", detected_numa, shown))
    node = sysfs_numa.get(detected_bus)
    if node is not None:
        shown, note = (node if node.isdigit() else ""), ""
        if node == "-1" and len(host_nodes) == 1:
            # docs/topology.md: no node on a one-node host is that node.
            shown, note = str(host_nodes[0]), "numa_node -1 on a host with one NUMA node"
        results.append(same("NUMA (sysfs numa_node)", detected_numa, shown, note))
    return results


# --- the project's own answers --------------------------------------------------------------------


def nvidia_checks(preflight: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    for entry in preflight.get("accelerators", []):
        if entry.get("manufacturer") == NVIDIA:
            return list(entry.get("checks", []))
    return []


def nvidia_detection(preflight: Mapping[str, Any]) -> Mapping[str, Any]:
    for entry in preflight.get("accelerators", []):
        if entry.get("manufacturer") == NVIDIA:
            return dict(entry.get("detection", {}))
    return {}


def isolation_rows(preflight: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in nvidia_checks(preflight) if c.get("capability") == "isolation-library"]


def sliced_grant(
    group_obj: Mapping[str, Any], memory_mib: int, lib_dir: str, pods_dir: str
) -> tuple[Any, Any]:
    """The NVIDIA responder's sliced grant of the group's first card, as Allocate renders it:
    the container's limits parsed from a Pod container (`SlicedLimits.from_container`), the
    card from the detected group, the work dirs under `pods_dir` (created, as Allocate does)."""
    from chain.devices import DevicesGroup
    from chain.families import SLICED_MEMORY_MIB
    from chain.manufacturers import default_manufacturers
    from nodeagent.plugin.grants import DeviceNodes, GrantedCard, SlicedLimits, SliceRequest
    from nodeagent.plugin.injection import Channel
    from nodeagent.plugin.responders import RESPONDERS

    group = DevicesGroup.parse(group_obj, "spec.groups[0]")
    maker = default_manufacturers()[NVIDIA]
    container = {
        "name": "main",
        "resources": {"limits": {f"{maker.resource_name}{SLICED_MEMORY_MIB}": str(memory_mib)}},
    }
    request = SliceRequest(
        SlicedLimits.from_container(container, maker.resource_name),
        "gpu-proof",
        "main",
        Channel(maker.name, maker.runtime_name),
        pods_dir=pods_dir,
        lib_dir=lib_dir,
    )
    cards = (GrantedCard(group, group.accelerators[0]),)
    response = RESPONDERS[NVIDIA].sliced(cards, request, DeviceNodes("/"))
    for directory in response.directories:
        os.makedirs(directory, mode=0o777, exist_ok=True)
    return group, response


def stage(library: Path, lib_dir: str) -> Run:
    """Stage `library` into `lib_dir` with the init container's own script, its targets moved
    from the operator's lib dir to `lib_dir` (the proof writes nothing under /var/lib)."""
    from nodeagent.plugin.grants import OPERATOR_LIB_DIR
    from nodeagent.staging import STAGE_SCRIPT
    from nodeagent.vendors.nvidia.staging import STAGING

    def moved(path: str) -> str:
        return lib_dir + path.removeprefix(OPERATOR_LIB_DIR)

    env = {
        **os.environ,
        "SOURCE": str(library),
        "TARGETS": " ".join(moved(target) for target in STAGING.targets),
        "PRELOAD": STAGING.preload,
        "PRELOAD_FILE": moved(STAGING.preload_file),
    }
    return run(["sh", "-c", STAGE_SCRIPT], env=env)


def mapped_env(envs: Mapping[str, str], mounts: Sequence[Any]) -> dict[str, str]:
    """The grant's environment with every value under a mount's container path moved to its
    host path (without a mount namespace the process sees the host's paths)."""
    moved = {}
    for name, value in envs.items():
        for mount in mounts:
            inside = str(mount.container_path).rstrip("/")
            if value == inside or value.startswith(inside + "/"):
                value = str(mount.host_path) + value[len(inside) :]
                break
        moved[name] = value
    return moved


def namespace_script(mounts: Sequence[Any]) -> str:
    """A shell script that bind-mounts each of the grant's mounts at its container path in a
    private mount namespace (`unshare --mount`), then runs its arguments. The preload list goes
    last: every program started after it (`mount` included) would load the library."""
    from nodeagent.plugin.grants import LD_SO_PRELOAD

    lines = ["set -e"]
    ordered = sorted(mounts, key=lambda m: m.container_path == LD_SO_PRELOAD)
    for mount in ordered:
        inside, outside = str(mount.container_path), str(mount.host_path)
        if inside == outside:
            continue
        quoted_in, quoted_out = shlex.quote(inside), shlex.quote(outside)
        if os.path.isdir(outside):
            lines.append(f"mkdir -p {quoted_in}")
        else:
            lines.append(f"mkdir -p {shlex.quote(os.path.dirname(inside))}")
            lines.append(f"[ -e {quoted_in} ] || : > {quoted_in}")
        lines.append(f"mount --bind {quoted_out} {quoted_in}")
    lines.append('exec "$@"')
    return "\n".join(lines) + "\n"


def workload_report(done: Run) -> dict[str, Any]:
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            report: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
            return report
    return {"error": done.error or f"no result (exit {done.returncode})"}


# --- the proof ------------------------------------------------------------------------------------


@dataclass
class Proof:
    """What was proven, in order, and everything it is based on."""

    out: Path
    rows: list[tuple[str, bool, str]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    def record(self, claim: str, passed: bool, detail: str = "") -> None:
        self.rows.append((claim, passed, detail))
        print(f"[{'PASS' if passed else 'FAIL'}] {claim}{': ' + detail if detail else ''}")

    def table(self) -> str:
        width = max((len(claim) for claim, _, _ in self.rows), default=10)
        lines = [f"{'what was proven':{width}}  result", f"{'-' * width}  ------"]
        for claim, passed, detail in self.rows:
            lines.append(f"{claim:{width}}  {'PASS' if passed else 'FAIL'}  {detail}")
        return "\n".join(lines)

    def save(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)


def heading(title: str) -> None:
    print(f"\n=== {title} ===", flush=True)


def smi_part(
    proof: Proof, smi_text: list[str]
) -> tuple[list[dict[str, str]], SmiReport, dict[str, str]]:
    heading("nvidia-smi")
    listed = run(["nvidia-smi", "-L"])
    query = run(
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    fields: Sequence[str] = SMI_FIELDS
    if not query.ok:  # an older driver without compute_cap
        fields = [name for name in SMI_FIELDS if name != "compute_cap"]
        query = run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        )
    full = run(["nvidia-smi", "-q"])
    topology = run(["nvidia-smi", "topo", "-m"])
    for done in (listed, query, full, topology):
        smi_text.append(f"$ {shlex.join(done.argv)}  (exit {done.returncode}, {done.seconds} s)")
        smi_text.append(done.stdout + done.stderr + done.error)
    print(listed.stdout.strip() or listed.stderr.strip() or listed.error)
    print(query.stdout.strip())
    rows = parse_smi_csv(query.stdout, fields)
    proof.record("nvidia-smi lists the cards", listed.ok and bool(rows), f"{len(rows)} card(s)")
    return rows, parse_smi_q(full.stdout), parse_topology(topology.stdout)


def sysfs_numa_nodes(rows: Sequence[Mapping[str, str]]) -> dict[str, str]:
    found = {}
    for row in rows:
        address = bus_id(row.get("pci.bus_id", ""))
        try:
            found[address] = Path(f"/sys/bus/pci/devices/{address}/numa_node").read_text().strip()
        except OSError:
            continue
    return found


def host_numa_nodes() -> list[int]:
    """The host's NUMA nodes (`/sys/devices/system/node/node<N>`); empty without NUMA."""
    try:
        names = [entry.name for entry in Path("/sys/devices/system/node").iterdir()]
    except OSError:
        return []
    return sorted(int(name[4:]) for name in names if re.fullmatch(r"node\d+", name))


def agent(args: Sequence[str]) -> tuple[Run, Any]:
    done = run([sys.executable, "-m", "nodeagent", *args, "-o", "json"])
    try:
        return done, json.loads(done.stdout)
    except ValueError:
        return done, None


def show_run(done: Run) -> None:
    print(f"$ {shlex.join(done.argv)}  (exit {done.returncode}, {done.seconds} s) {done.error}")
    if done.stderr.strip():
        print(done.stderr.strip()[-3000:])


def detect_part(
    proof: Proof, rows: list[dict[str, str]], report: SmiReport, numa: dict[str, str]
) -> list[dict[str, Any]]:
    heading("python -m nodeagent detect")
    done, groups = agent(["detect", "--manufacturer", NVIDIA])
    show_run(done)
    groups = groups if isinstance(groups, list) else []
    proof.save("detect.json", json.dumps(groups, indent=2))
    print(json.dumps(groups, indent=2)[:6000])
    cards = [card for group in groups for card in group.get("accelerators", [])]
    proof.record(
        "detect finds every card nvidia-smi lists",
        done.ok and len(cards) == len(rows) > 0,
        f"detect {len(cards)}, nvidia-smi {len(rows)}",
    )
    heading("detect against nvidia-smi, field by field")
    compared = compare(groups, rows, report, numa, sysfs_numa_nodes(rows), host_numa_nodes())
    for item in compared:
        print(item.line())
    proof.results["comparison"] = [asdict(item) for item in compared]
    mismatched = [f"{item.field}" for item in compared if not item.match]
    proof.record(
        "detected fields equal nvidia-smi's",
        bool(compared) and not mismatched,
        f"{len(compared) - len(mismatched)}/{len(compared)} match"
        + (f"; mismatched: {', '.join(mismatched)}" if mismatched else ""),
    )
    return groups


def preflight_part(proof: Proof, lib_dir: str, when: str) -> dict[str, Any]:
    heading(f"python -m nodeagent preflight ({when})")
    done, answer = agent(
        ["preflight", "--manufacturer", NVIDIA, "--host-root", "/", "--lib-dir", lib_dir]
    )
    show_run(done)
    answer = answer if isinstance(answer, dict) else {}
    proof.results.setdefault("preflight", {})[when] = answer
    print(json.dumps(nvidia_detection(answer), indent=2))
    for check in nvidia_checks(answer):
        print(
            f"  {check.get('capability')} [{check.get('mode')}] {check.get('accelerator')}: "
            f"{check.get('state')} ({check.get('depth')}) "
            f"{check.get('reason') or check.get('detail') or ''}"[:600]
        )
    return answer


def build_part(proof: Proof, source: Path, work: Path) -> Path | None:
    heading("build HAMi-core's libvgpu.so")
    if not (source / "CMakeLists.txt").is_file():
        proof.record("libvgpu.so builds from HAMi-core's source", False, f"no source at {source}")
        return None
    tree = work / "hami-core"
    shutil.copytree(source, tree)
    nvcc = shutil.which("nvcc")
    cuda_home = os.environ.get("CUDA_HOME") or (
        str(Path(os.path.realpath(nvcc)).parent.parent) if nvcc else "/usr/local/cuda"
    )
    stubs = [f"{cuda_home}/lib64/stubs", f"{cuda_home}/targets/x86_64-linux/lib/stubs"]
    env = {
        **os.environ,
        "CUDA_HOME": cuda_home,
        # libvgpu.so links -lcuda -lnvidia-ml: the toolkit's stubs stand in at link time.
        "LIBRARY_PATH": ":".join([*stubs, os.environ.get("LIBRARY_PATH", "")]).rstrip(":"),
    }
    started = time.monotonic()
    configure = run(
        ["cmake", "-S", str(tree), "-B", str(tree / "build"), "-DCMAKE_BUILD_TYPE=Release"],
        timeout_s=BUILD_TIMEOUT_S,
        env=env,
    )
    jobs = str(os.cpu_count() or 4)
    compile_ = (
        run(
            ["cmake", "--build", str(tree / "build"), "-j", jobs],
            timeout_s=BUILD_TIMEOUT_S,
            env=env,
        )
        if configure.ok
        else configure
    )
    seconds = round(time.monotonic() - started, 1)
    log = [f"CUDA_HOME={cuda_home}"]
    for done in (configure, compile_):
        log.append(
            f"$ {shlex.join(done.argv)}  (exit {done.returncode}, {done.seconds} s) {done.error}"
        )
        log.append(done.stdout + done.stderr)
    proof.save("build.log", "\n".join(log))
    print("\n".join(log)[-4000:])
    built = next(iter(sorted((tree / "build").rglob("libvgpu.so"))), None)
    proof.results["build_seconds"] = seconds
    proof.record(
        "libvgpu.so builds from HAMi-core's source",
        compile_.ok and built is not None,
        f"{seconds} s with {jobs} jobs" + ("" if built else "; no libvgpu.so"),
    )
    return built if compile_.ok else None


def standin_part(proof: Proof, source: Path, work: Path) -> Path | None:
    """Without HAMi-core: the testbed's stand-in (it loads and enforces nothing), so the staging,
    the agent's loading check and the grant's preload are still proven on the real machine."""
    heading("build the testbed's stand-in libvgpu.so (HAMi-core is not there)")
    library = work / "standin" / "libvgpu.so"
    library.parent.mkdir(parents=True)
    argv = ["cc", "-shared", "-fPIC", "-Wl,-soname,libvgpu.so", "-o", str(library), str(source)]
    done = run(argv)
    show_run(done)
    proof.record("the stand-in libvgpu.so builds (it enforces nothing)", done.ok, str(source))
    return library if done.ok else None


def slicing_verdicts(
    proof: Proof, before: Mapping[str, Any], after: Mapping[str, Any] | None, kind: str = ""
) -> None:
    rows = isolation_rows(before)
    unavailable = bool(rows) and all(row.get("state") == "unavailable" for row in rows)
    names_library = any("libvgpu.so" in str(row.get("reason", "")) for row in rows)
    proof.record(
        "slicing unavailable before staging, naming the library",
        unavailable and names_library,
        "; ".join(str(row.get("reason", ""))[:200] for row in rows) or "no isolation-library row",
    )
    if after is None:
        proof.record("slicing available once libvgpu.so is staged", False, "nothing was staged")
        return
    rows = isolation_rows(after)
    available = bool(rows) and all(row.get("state") == "ok" for row in rows)
    proof.record(
        "slicing available once libvgpu.so is staged",
        available,
        f"{kind}: "
        + ("; ".join(f"{row.get('state')} ({row.get('depth')})" for row in rows) or "no row"),
    )


def grant_part(
    proof: Proof, groups: list[dict[str, Any]], memory_mib: int, lib_dir: str, work: Path
) -> Any:
    heading(f"the responder's sliced grant ({memory_mib} MiB)")
    nvidia = [group for group in groups if group.get("manufacturer") == NVIDIA]
    if not nvidia:
        proof.record("the responder renders a sliced grant", False, "no NVIDIA group detected")
        return None
    try:
        _, response = sliced_grant(nvidia[0], memory_mib, lib_dir, str(work / "pods"))
    except Exception as error:  # the proof goes on and says why
        proof.record("the responder renders a sliced grant", False, repr(error))
        return None
    shown = {
        "envs": dict(response.envs),
        "mounts": [asdict(mount) for mount in response.mounts],
        "directories": list(response.directories),
    }
    proof.results["grant"] = shown
    print(json.dumps(shown, indent=2))
    limit = response.envs.get("CUDA_DEVICE_MEMORY_LIMIT_0", "")
    proof.record(
        "the responder renders a sliced grant",
        limit == f"{memory_mib}m",
        f"CUDA_DEVICE_MEMORY_LIMIT_0={limit}",
    )
    return response


def workload_part(proof: Proof, response: Any, memory_mib: int, kind: str) -> None:
    from nodeagent.plugin.grants import LD_SO_PRELOAD
    from nodeagent.vendors.common.hami_core import LIBVGPU

    under, over = memory_mib // 2, memory_mib * 3 // 2
    command = [sys.executable, str(WORKLOAD), "--under-mib", str(under), "--over-mib", str(over)]
    base = {key: value for key, value in os.environ.items() if key != "LD_PRELOAD"}
    mounts = list(response.mounts)
    preload_list = next((m for m in mounts if m.container_path == LD_SO_PRELOAD), None)
    library = next((m for m in mounts if m.container_path == LIBVGPU), None)
    runs: dict[str, Any] = {}

    heading("workload with the grant's mounts, in a private mount namespace")
    created = [path for path in (LD_SO_PRELOAD, LIBVGPU) if not os.path.exists(path)]
    wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    wrapped += [namespace_script(mounts), "sh", *command]
    done = run(wrapped, timeout_s=WORKLOAD_TIMEOUT_S, env={**base, **response.envs})
    for path in created:  # the empty mount points the script made on the host
        if os.path.exists(path) and os.path.getsize(path) == 0:
            os.remove(path)
    show_run(done)
    sliced = workload_report(done)
    how = "mount namespace (ld.so.preload bind-mounted)"
    if "device" not in sliced and library is not None:
        heading("workload with LD_PRELOAD (no mount namespace could be made)")
        env = {**base, **mapped_env(response.envs, mounts), "LD_PRELOAD": str(library.host_path)}
        done = run(command, timeout_s=WORKLOAD_TIMEOUT_S, env=env)
        show_run(done)
        sliced = workload_report(done)
        how = "LD_PRELOAD of the mount's host path"
    sliced["how"] = how
    sliced["preload_list"] = _read(preload_list.host_path) if preload_list else MISSING
    runs["sliced"] = sliced
    print(json.dumps(sliced, indent=2))

    if sliced.get("over", {}).get("ok") and kind != "stand-in":
        heading("enforcement did not hold: the same run with HAMi-core's log at level 4")
        loud = {**base, **mapped_env(response.envs, mounts), "LIBCUDA_LOG_LEVEL": "4"}
        if library is not None:
            loud["LD_PRELOAD"] = str(library.host_path)
        done = run(command, timeout_s=WORKLOAD_TIMEOUT_S, env=loud)
        runs["sliced_log"] = (done.stdout + done.stderr)[-20000:]
        print(runs["sliced_log"][-6000:])

    heading("control: the same program without the library")
    done = run(command, timeout_s=WORKLOAD_TIMEOUT_S, env={**base, **response.envs})
    show_run(done)
    control = workload_report(done)
    runs["control"] = control
    print(json.dumps(control, indent=2))
    proof.results["workload"] = runs
    proof.save("workload.json", json.dumps(runs, indent=2))

    mapped = sliced.get("preloaded") or []
    proof.record(
        f"the grant's mounts preload the {kind} library into the CUDA process",
        bool(mapped),
        f"{', '.join(mapped) or 'no libvgpu.so mapped'}; {how}",
    )
    caveat = "the stand-in enforces nothing: " if kind == "stand-in" else ""
    seen = sliced.get("cuda_total_mib")
    proof.record(
        "under the grant CUDA sees the limit as the card's memory",
        isinstance(seen, int) and abs(seen - memory_mib) <= memory_mib // 100 + 1,
        f"{caveat}cuda total {seen} MiB, nvidia-smi {sliced.get('smi')}, limit {memory_mib} MiB",
    )
    proof.record(
        f"under the grant {under} MiB allocates",
        bool(sliced.get("under", {}).get("ok")),
        caveat + str(sliced.get("under", sliced.get("error", ""))),
    )
    proof.record(
        f"under the grant {over} MiB fails with out-of-memory",
        bool(sliced.get("over", {}).get("out_of_memory")),
        caveat + str(sliced.get("over", sliced.get("error", ""))),
    )
    proof.record(
        f"without the library {over} MiB allocates (control)",
        bool(control.get("over", {}).get("ok")),
        str(control.get("over", control.get("error", ""))),
    )


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        return f"unreadable: {error}"


def environment() -> str:
    lines = [f"python {sys.version.split()[0]} at {sys.executable}", f"uname {os.uname()}"]
    for argv in (["nvcc", "--version"], ["cmake", "--version"], ["cc", "--version"]):
        done = run(argv, timeout_s=30)
        text = (done.stdout or done.stderr or done.error).strip().splitlines()
        lines.append(f"{argv[0]}: {text[-1] if text else '?'}")
    torch = run([sys.executable, "-c", "import torch; print(torch.__version__)"], timeout_s=60)
    lines.append(f"torch: {(torch.stdout or torch.stderr or torch.error).strip()[-200:]}")
    return "\n".join(lines)


def prove(
    out: Path, source: Path, memory_mib: int, given: Path | None = None, standin: Path = STANDIN
) -> int:
    out.mkdir(parents=True, exist_ok=True)
    proof = Proof(out)
    heading("environment")
    print(environment())
    smi_text: list[str] = []
    rows, report, numa = smi_part(proof, smi_text)
    proof.save("nvidia-smi.txt", "\n".join(smi_text))
    groups = detect_part(proof, rows, report, numa)
    with tempfile.TemporaryDirectory(prefix="gpu-proof-") as scratch:
        work = Path(scratch)
        lib_dir = str(work / "lib")
        os.makedirs(lib_dir)
        before = preflight_part(proof, lib_dir, "before staging")
        detection = nvidia_detection(before)
        proof.record(
            "preflight: detection ok and cross-checked with nvidia-smi -L",
            detection.get("state") == "ok" and "reason" not in detection.get("host", {}),
            str(detection.get("detail", "")),
        )
        kind = "HAMi-core"
        if given is not None:
            library: Path | None = given if given.is_file() else None
            kind = "given"
            proof.record("a built libvgpu.so is given", library is not None, str(given))
        else:
            library = build_part(proof, source, work)
        if library is None and standin.is_file():
            library, kind = standin_part(proof, standin, work), "stand-in"
        proof.results["library"] = {"kind": kind, "path": str(library)}
        after = None
        if library is not None:
            staged = stage(library, lib_dir)
            show_run(staged)
            print(staged.stdout.strip())
            after = preflight_part(proof, lib_dir, "after staging")
        slicing_verdicts(proof, before, after, kind)
        response = grant_part(proof, groups, memory_mib, lib_dir, work)
        if response is not None and after is not None:
            workload_part(proof, response, memory_mib, kind)
        else:
            proof.record("the workload ran under the grant", False, "no grant or no library")
    heading("what was proven")
    table = proof.table()
    print(table)
    proof.results["table"] = [
        {"claim": claim, "pass": passed, "detail": detail} for claim, passed, detail in proof.rows
    ]
    proof.save("results.json", json.dumps(proof.results, indent=2, default=str))
    return 0 if all(passed for _, passed, _ in proof.rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-proof-out")
    parser.add_argument("--source", default=".gpuproof/hami-core", help="HAMi-core's source tree")
    parser.add_argument("--memory-mib", type=int, default=10240, help="the slice's memory limit")
    parser.add_argument(
        "--library",
        default=os.environ.get("HAMI_CORE_LIBRARY", ""),
        help="a libvgpu.so already built (HAMi's image keeps one in /k8s-vgpu/lib/nvidia/): "
        "staged instead of building --source",
    )
    parser.add_argument(
        "--standin",
        default=str(STANDIN),
        help="the testbed's stand-in, built and staged when HAMi-core is not there",
    )
    args = parser.parse_args(argv)
    given = Path(args.library) if args.library else None
    return prove(Path(args.out), Path(args.source), args.memory_mib, given, Path(args.standin))


if __name__ == "__main__":
    sys.exit(main())
