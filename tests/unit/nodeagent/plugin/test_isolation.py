"""The slicing isolation check: which staged files a slice of a group needs (asked of each
responder, and the same files its sliced response mounts), and whether each is usable here,
against real shared objects built at test time with `cc`."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from chain.accelerators import Accelerator, AcceleratorStatus, LogicalSliced
from chain.devices import DevicesGroup
from nodeagent.plugin.grants import (
    DeviceNodes,
    GrantedCard,
    IsolationFile,
    Responder,
    SliceRequest,
)
from nodeagent.plugin.isolation import (
    MACHINE_NAMES,
    MACHINES,
    NOT_SERVED,
    OFFERED,
    RETRY_UNSETTLED_S,
    IsolationCheck,
    Unsettled,
    elf_problem,
    load_problem,
)
from nodeagent.plugin.responders import RESPONDERS
from nodeagent.vendors.amd.grants import Amd
from nodeagent.vendors.iluvatar.grants import Iluvatar
from nodeagent.vendors.mthreads.grants import MThreads
from nodeagent.vendors.nvidia.grants import Nvidia
from nodeagent.vendors.thead.grants import Thead
from tests.unit.nodeagent.helpers import shared_object
from tests.unit.nodeagent.plugin.test_cumask import HOST as AMD_HOST
from tests.unit.nodeagent.plugin.test_cumask import mi300x
from tests.unit.nodeagent.plugin.test_vendors import (
    NO_NODES,
    THEAD_NODES,
    FakeShare,
    ascend,
    cards,
    request,
)

MACHINE = os.uname().machine


def counting(load: Callable[[str], str] = load_problem) -> tuple[Callable[[str], str], list[str]]:
    """`load` that records each path it is asked to load."""
    asked: list[str] = []

    def counted(path: str) -> str:
        asked.append(path)
        return load(path)

    return counted, asked


def problem(path: Path, check: IsolationCheck | None = None) -> str:
    return (check or IsolationCheck()).problem(IsolationFile(str(path)))


# --- One file ----------------------------------------------------------------------------------


def test_a_real_shared_object_loads(tmp_path: Path) -> None:
    assert problem(shared_object(tmp_path / "libvgpu.so")) == ""


def test_a_text_placeholder_is_not_an_elf_shared_object(tmp_path: Path) -> None:
    placeholder = tmp_path / "libvgpu.so"
    placeholder.write_text("staged\n")
    load, asked = counting()
    assert problem(placeholder, IsolationCheck(load=load)) == "not an ELF shared object"
    assert asked == []  # refused from its header, nothing loaded


def test_a_library_built_for_another_machine_is_refused(tmp_path: Path) -> None:
    if MACHINE not in MACHINES:
        pytest.skip(f"this host's machine {MACHINE} has no known ELF machine")
    built = shared_object(tmp_path / "built.so")
    foreign = 183 if MACHINES[MACHINE] == 62 else 62
    copy = tmp_path / "libvgpu.so"
    shutil.copy(built, copy)
    data = bytearray(copy.read_bytes())
    order = "<" if data[5] == 1 else ">"
    data[18:20] = struct.pack(order + "H", foreign)
    copy.write_bytes(bytes(data))
    assert problem(copy) == f"built for {MACHINE_NAMES[foreign]}, this host is {MACHINE}"


def test_an_unresolvable_dependency_fails_dlopen_with_the_loaders_message(tmp_path: Path) -> None:
    deps = tmp_path / "deps"
    dependency = shared_object(deps / "libgpustackdep.so")
    rpath = [f"-Wl,-rpath,{deps}"]
    calls = "int gpustack_probe(void);\nint gpustack_hook(void) { return gpustack_probe(); }\n"
    library = shared_object(tmp_path / "libvgpu.so", calls, needs=[dependency], flags=rpath)
    assert problem(library) == ""  # its dependency is found through the run path
    dependency.unlink()
    assert problem(library) == (
        "dlopen failed: libgpustackdep.so: cannot open shared object file: No such file or "
        "directory"
    )


def test_a_missing_file_is_missing(tmp_path: Path) -> None:
    assert problem(tmp_path / "libvgpu.so") == "missing"
    check = IsolationCheck()
    assert check.problem(IsolationFile(str(tmp_path / "ld.so.preload"), False)) == "missing"
    (tmp_path / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    assert check.problem(IsolationFile(str(tmp_path / "ld.so.preload"), False)) == ""
    (tmp_path / "dir.so").mkdir()
    assert problem(tmp_path / "dir.so") == "not a regular file"


def test_a_library_whose_constructor_crashes_takes_only_the_subprocess(tmp_path: Path) -> None:
    source = (
        "#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n"
    )
    crashing = shared_object(tmp_path / "libvgpu.so", source)
    found = problem(crashing)
    assert found.startswith("dlopen failed: ") and "signal 6" in found
    assert not isinstance(found, Unsettled)  # the file's fault: kept until it changes


def test_the_verdict_is_kept_until_the_file_changes(tmp_path: Path) -> None:
    library = shared_object(tmp_path / "libvgpu.so")
    load, asked = counting()
    check = IsolationCheck(load=load)
    assert problem(library, check) == "" and problem(library, check) == ""
    assert len(asked) == 1  # the second answer was kept
    library.write_text("overwritten\n")
    assert problem(library, check) == "not an ELF shared object"
    shared_object(library)  # staged again: a new file, loaded again
    assert problem(library, check) == ""
    assert len(asked) == 2 and check.loads == 2
    library.unlink()
    assert problem(library, check) == "missing"


def test_a_load_that_ran_out_of_time_is_tried_again_on_the_unchanged_file(
    tmp_path: Path,
) -> None:
    """A node busy starting its Pods may not start the loading process in time: the verdict is
    about the attempt, so it is kept a while (a hanging library is not loaded every round) and
    then the same file is loaded again (#35)."""
    library = shared_object(tmp_path / "libvgpu.so")
    timeout_s, now = [0.001], [1000.0]  # no interpreter starts and loads within a millisecond
    check = IsolationCheck(load=lambda path: load_problem(path, timeout_s[0]), clock=lambda: now[0])
    found = problem(library, check)
    assert found == "dlopen did not return within 0.001 s" and isinstance(found, Unsettled)
    timeout_s[0] = 120.0  # the node is quiet again
    now[0] += RETRY_UNSETTLED_S / 2
    assert problem(library, check) == found and check.loads == 1  # kept a while
    now[0] += RETRY_UNSETTLED_S / 2
    assert problem(library, check) == ""  # the unchanged file, loaded again
    now[0] += RETRY_UNSETTLED_S * 10
    assert problem(library, check) == "" and check.loads == 2  # a settled verdict stays kept


def test_a_loading_process_killed_with_sigkill_is_tried_again(tmp_path: Path) -> None:
    """SIGKILL is what the container's memory limit sends: not the file's fault."""
    crowded = tmp_path / "crowded"
    crowded.touch()
    source = (
        "#include <signal.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void oom(void) {\n"
        f'  if (access("{crowded}", F_OK) == 0) kill(getpid(), SIGKILL);\n'
        "}\n"
    )
    library = shared_object(tmp_path / "libvgpu.so", source)
    now = [0.0]
    check = IsolationCheck(clock=lambda: now[0])
    found = problem(library, check)
    assert found == "dlopen failed: the loading process was killed by signal 9"
    assert isinstance(found, Unsettled)
    crowded.unlink()
    now[0] = RETRY_UNSETTLED_S
    assert problem(library, check) == ""


@pytest.mark.parametrize(
    ("header", "found"),
    [
        (b"\x7fELF\x01\x01\x01" + bytes(9) + struct.pack("<HH", 3, 3), "i386, this host is x86_64"),
        (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 2, 62), "ELF type 2"),
        (b"\x7fELF\x01\x01\x01" + bytes(9) + struct.pack("<HH", 3, 62), "32-bit, this host"),
        (b"\x7fELF\x02\x03\x01" + bytes(9) + struct.pack("<HH", 3, 62), "unknown class"),
        (b"\x7fELF\x02\x01", "not an ELF shared object"),
        (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 3, 62), ""),
        (b"\x7fELF\x02\x02\x01" + bytes(9) + struct.pack(">HH", 3, 62), ""),
    ],
)
def test_elf_headers(header: bytes, found: str) -> None:
    got = elf_problem(header, "x86_64", 64)
    assert found in got if found else got == ""


def test_an_unknown_host_machine_is_not_compared() -> None:
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 3, 9999)
    assert elf_problem(header, "vax", 64) == ""
    assert "ELF machine 9999" in elf_problem(header, "x86_64", 64)


# --- A group ---------------------------------------------------------------------------------


def group(manufacturer: str, runtime: str = "13.0", family: str = "") -> DevicesGroup:
    sliceable = AcceleratorStatus(logical_sliced=LogicalSliced(count=4))
    return DevicesGroup(
        id="model",
        manufacturer=manufacturer,
        name="Model X",
        memory=16384,
        runtime_version=runtime,
        family=family,
        accelerators=(Accelerator(id=f"{manufacturer}-0", index=0, status=sliceable),),
    )


def stage_hami_core(lib: Path, build: str) -> None:
    shared_object(lib / "nvidia" / build / "libvgpu.so")
    (lib / "nvidia" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")


def test_an_nvidia_group_needs_the_build_of_its_cuda_major(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    check = IsolationCheck(lib_dir=str(lib))
    assert check(group("nvidia", "13.0")).problem == (
        f"{lib}/nvidia/ld.so.preload: missing; {lib}/nvidia/cuda-13/libvgpu.so: missing"
    )
    stage_hami_core(lib, "cuda-12")
    assert check(group("nvidia", "12.4")) == OFFERED
    assert check(group("nvidia", "")) == OFFERED  # an unknown runtime takes the CUDA 12 build
    assert check(group("nvidia", "13.0")).problem == f"{lib}/nvidia/cuda-13/libvgpu.so: missing"


def test_slices_the_driver_makes_need_no_library_and_unserved_slices_are_not_served(
    tmp_path: Path,
) -> None:
    check = IsolationCheck(lib_dir=str(tmp_path))
    for manufacturer in ("metax", "cambricon", "mthreads", "hygon"):
        assert RESPONDERS[manufacturer].isolation_libraries(group(manufacturer), "/lib") == ()
        assert check(group(manufacturer)) == OFFERED
    assert check(group("intel")) == NOT_SERVED
    unsliced = MThreads()
    unsliced.slices = False
    assert IsolationCheck({"mthreads": unsliced})(group("mthreads")) == NOT_SERVED


def test_every_preloading_manufacturer_names_its_library() -> None:
    needing = {
        name
        for name, responder in RESPONDERS.items()
        if any(f.shared_object for f in responder.isolation_libraries(group(name), "/lib"))
    }
    assert needing == {"nvidia", "iluvatar", "amd", "ascend", "thead"}


# --- The files named are the files a slice mounts ----------------------------------------------

STAGED = "/staged"


def mounts_what_it_names(
    responder: Responder,
    granted: tuple[GrantedCard, ...],
    make: SliceRequest,
    nodes: DeviceNodes = NO_NODES,
) -> None:
    """A slice rendered with its libraries staged under STAGED mounts, read-only, exactly the
    files the responder names for the group."""
    response = responder.sliced(granted, replace(make, lib_dir=STAGED), nodes)
    mounted = [m for m in response.mounts if m.host_path.startswith(STAGED + "/")]
    named = responder.isolation_libraries(granted[0].group, STAGED)
    assert {m.host_path for m in mounted} == {f.path for f in named}
    assert all(m.read_only for m in mounted)


def test_the_files_named_are_the_files_a_slice_mounts(tmp_path: Path) -> None:
    mounts_what_it_names(Nvidia(), cards("nvidia", (0,), runtime="13.0"), request())
    iluvatar = request(runtime_class="iluvatar", runtime_name="iluvatar")
    mounts_what_it_names(Iluvatar(), cards("iluvatar", (0,)), iluvatar)
    mounts_what_it_names(Thead(), cards("thead", (7,)), request(), THEAD_NODES)
    npu = cards("ascend", (4, 2, 0), family="910B", runtime="8.1")
    mounts_what_it_names(ascend(FakeShare()), npu, request(pods_dir=str(tmp_path / "ascend")))
    amd = request(pods_dir=str(tmp_path / "amd"))
    mounts_what_it_names(Amd(), (mi300x(),), amd, AMD_HOST)
