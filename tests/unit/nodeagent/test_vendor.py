"""What the non-NVIDIA detectors share: libraries, readings to groups, host readers."""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import pytest

from chain.devices import AcceleratorStatus, LogicalSliced
from chain.manufacturers import ManufacturerTable
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import (
    FUNCTION_NOT_FOUND,
    CardReading,
    Connection,
    GroupFacts,
    Library,
    VendorError,
    build_groups,
    bus_address,
    drm_nodes,
    key_value,
    leading_version,
    library_candidates,
    load_library,
    logically_sliced,
    optional,
    read_first,
    text,
)
from tests.unit.nodeagent.helpers import write
from tests.unit.nodeagent.vendor_data import fake_sysfs


def libc() -> Library:
    name = ctypes.util.find_library("c")
    cdll = load_library([name] if name else [])
    if cdll is None:
        pytest.skip("no C library to call")
    return Library(cdll)


def test_absent_libraries_load_as_none(tmp_path: Path) -> None:
    assert load_library(library_candidates("libnothing.so", [tmp_path])) is None
    write(tmp_path / "libbroken.so", "not an ELF file")
    assert load_library([str(tmp_path / "libbroken.so")]) is None


def test_library_candidates() -> None:
    assert library_candidates("libx.so", ["/a", Path("/b/lib")]) == [
        "libx.so",
        "/a/libx.so",
        "/b/lib/libx.so",
    ]


def test_calls_and_their_codes() -> None:
    lib = libc()
    lib.call("abs", ctypes.c_int(0))  # 0 is success
    with pytest.raises(VendorError) as refused:
        lib.call("abs", ctypes.c_int(-5))
    assert (refused.value.call, refused.value.code) == ("abs", 5)
    assert lib.value("abs", ctypes.c_int(-7)) == 7
    with pytest.raises(VendorError) as missing:
        lib.call("no_such_symbol_anywhere")
    assert missing.value.code == FUNCTION_NOT_FOUND
    assert not lib.has("no_such_symbol_anywhere")
    lib.first(("no_such_symbol_anywhere", "abs"), ctypes.c_int(0))  # the one it has
    with pytest.raises(VendorError):
        lib.first(("no_such_symbol_anywhere",))


def test_optional() -> None:
    def refused() -> int:
        raise VendorError("query", 2)

    assert optional(refused, 7) == 7
    assert optional(lambda: 3, 7) == 3


def test_text() -> None:
    assert text(b"910B3\0garbage") == "910B3"
    assert text(b"  MLU370 \0") == "MLU370"
    assert text("abc\0def") == "abc"
    assert text(b"\xff\xfe\0") == "\ufffd\ufffd"


@pytest.mark.parametrize(
    ("raw", "address"),
    [
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0001:C1:1F.7", "0001:c1:1f.7"),
    ],
)
def test_bus_address(raw: str, address: str) -> None:
    assert bus_address(raw) == address


@pytest.mark.parametrize("raw", ["", "3b:00.0", "GPU-0", "0000:3b:00.8", "0000:zz:00.0"])
def test_bus_address_rejects_what_is_no_bus_id(raw: str) -> None:
    with pytest.raises(ValueError):
        bus_address(raw)


def test_drm_nodes(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path, "1002", ["0000:05:00.0"], {"0000:05:00.0": (3, 130)})
    assert drm_nodes(sysfs, "0000:05:00.0", ()) == (3, 130)
    # The driver's own binding directory is asked first.
    (tmp_path / "drv/0000:05:00.0/drm/card9").mkdir(parents=True)
    assert drm_nodes(sysfs, "0000:05:00.0", ("drv",)) == (9,)
    (tmp_path / "drv/0000:06:00.0/drm/renderD128").mkdir(parents=True)
    assert drm_nodes(sysfs, "0000:06:00.0", ("drv",)) is None  # no card node
    assert drm_nodes(sysfs, "0000:07:00.0", ("drv",)) is None


def test_versions_and_files(tmp_path: Path) -> None:
    assert leading_version("6.4.1-123") == "6.4.1"
    assert leading_version("V1.2 build 7") == "1.2"
    assert leading_version("none") == ""
    write(tmp_path / "b", "second")
    assert read_first([tmp_path / "a", tmp_path / "b"]) == "second"
    assert read_first([tmp_path / "a"]) == ""
    assert key_value("a=1\nVersion = 8.0.RC2 \nVersion=9", "Version") == "8.0.RC2"
    assert key_value("nothing here", "Version") == ""


def test_groups_by_name_and_memory(tmp_path: Path, table: ManufacturerTable) -> None:
    sysfs = fake_sysfs(tmp_path, "1ed5", ["0000:01:00.0", "0000:02:00.0"], numa="2")
    sliced = logically_sliced(16, False)
    cards = [
        CardReading("a", "MTT S4000", 49152, "0000:01:00.0", (0,), sliced),
        CardReading("b", "MTT S80", 16384, "0000:02:00.0", (1,), sliced),
        CardReading("c", "MTT S4000", 49152, status=AcceleratorStatus(True)),
    ]
    asked: list[str] = []

    def facts(card: CardReading) -> GroupFacts:
        asked.append(card.id)
        return GroupFacts(cores=8192, driver_version="2.7.0")

    s4000, s80 = build_groups(table["mthreads"], cards, facts, sysfs, with_memory=True)
    assert asked == ["a", "b"]  # once per new group
    assert (s4000.id, s80.id) == ("mtt-s4000-48g", "mtt-s80-16g")
    assert [(card.id, card.index) for card in s4000.accelerators] == [("a", 0), ("c", 2)]
    assert s4000.accelerators[0].topology.numa_affinity == "2"
    assert s4000.accelerators[1].topology.pci_bus_id == ""  # no bus id, no topology
    assert (s4000.cores, s4000.driver_version) == (8192, "2.7.0")
    assert s4000.sliced_detail.logical == LogicalSliced(16, False)


@pytest.mark.parametrize(
    ("ident", "name", "memory"), [("", "X", 1), ("id", "", 1), ("id", "X", -1)]
)
def test_broken_readings(ident: str, name: str, memory: int) -> None:
    with pytest.raises(ValueError):
        CardReading(ident, name, memory)


def test_connection_is_retried_until_it_opens() -> None:
    answers: list[str | None] = [None, "library", "other"]
    connection = Connection(None, lambda: answers.pop(0))
    assert connection.get() is None
    assert connection.get() == "library"
    assert connection.get() == "library"  # opened once, kept
    assert Connection("given", lambda: None).get() == "given"


def test_sysfs_without_cards_has_no_topology(tmp_path: Path) -> None:
    assert Sysfs(tmp_path).topology("0000:01:00.0").numa_affinity == ""
