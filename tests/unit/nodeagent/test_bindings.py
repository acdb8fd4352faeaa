"""The ctypes bindings against stand-in vendor libraries built from `vendor/*/fake_*.c`.

The detector tests replay recordings through each binding's Protocol; these check the layer
under it: symbol names, argument order, struct layouts and status codes, by running the real
binding and detector over a shared library that answers like the vendor's. Skipped where no C
compiler is installed.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from chain.ledger import Mode
from chain.manufacturers import ManufacturerTable
from chain.partitions import Placement
from nodeagent.detect.sysfs import Sysfs
from nodeagent.detect.vendor import Library, VendorError, load_library
from nodeagent.plugin.grants import GrantedCard, SimulatedNodes
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.mig import Markers, Partitioner, PartitionError
from nodeagent.vendors.ascend.dcmi import API_V1, API_V2, DcmiLibrary, initialise, open_dcmi
from nodeagent.vendors.ascend.detect import AscendDetector
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.cambricon.detect import CambriconDetector
from nodeagent.vendors.common.nvmlike import HGML_SYMBOLS, IXML_SYMBOLS, open_nvmlike
from nodeagent.vendors.hygon.detect import HygonDetector
from nodeagent.vendors.hygon.dmi import DmiProfile, absent, open_dmi
from nodeagent.vendors.hygon.driver import DmiMig, HygonNaming, registry_uuid
from nodeagent.vendors.hygon.rsmi import open_rsmi
from nodeagent.vendors.iluvatar.detect import IluvatarDetector
from nodeagent.vendors.metax.detect import MetaxDetector
from nodeagent.vendors.mthreads.detect import MthreadsDetector
from nodeagent.vendors.mthreads.mtml import open_mtml
from nodeagent.vendors.thead.detect import TheadDetector
from nodeagent.vendors.thead.driver import TheadNaming, open_hgml_mig
from tests.unit.nodeagent.vendor_data import VENDOR_DIR, recorded

Build = Callable[[str, Path, tuple[str, ...]], Path]
NO_NODES = SimulatedNodes({})


def open_dcmi_at(library: Path) -> DcmiLibrary | None:
    cdll = load_library([str(library)])
    assert cdll is not None
    return initialise(Library(cdll))


@pytest.fixture(scope="session")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in vendor libraries")
    folder = tmp_path_factory.mktemp("vendor-libraries")

    def compile_library(source: str, target: Path, defines: tuple[str, ...] = ()) -> Path:
        output = folder / target
        output.parent.mkdir(parents=True, exist_ok=True)
        command = [compiler, "-shared", "-fPIC", "-O0", "-Wall", "-Werror", *defines]
        subprocess.run([*command, "-o", str(output), str(VENDOR_DIR / source)], check=True)
        return output

    return compile_library


def test_dcmi_v1(build: Build, table: ManufacturerTable) -> None:
    library = build("ascend/fake_dcmi.c", Path("v1/driver/lib64/driver/libdcmi.so"), ())
    home = str(library.parents[3])
    dcmi = open_dcmi({"CANN_HOME": home})
    assert dcmi is not None and dcmi.api == API_V1
    ascend = AscendDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["ascend"],
        environ={"CANN_HOME": home},
        runtime_version=lambda: "8.0.RC2",
    )
    (group,) = ascend.detect()
    assert (group.name, group.memory, group.cores, group.driver_version, group.family) == (
        "910B3",
        65536,
        20,
        "24.1.rc2",
        "910B",
    )
    first, second = group.accelerators  # card 0's MCU is no NPU
    assert first.id == "A0000000 A0000001 A0000002 A0000003 A0000004"
    assert second.id == "A0000100 A0000101 A0000102 A0000103 A0000104"
    assert (first.topology.pci_bus_id, second.topology.pci_bus_id) == (
        "0000:c1:00.0",
        "0000:01:00.0",
    )
    assert (first.physical_indexes, second.physical_indexes) == ((4, 0, 0), (5, 1, 0))
    assert dcmi.super_pod_type(0, 0) == 2  # V1 reads the same record with (card, device)
    with pytest.raises(VendorError):
        dcmi.mainboard_id(0, 0)  # no V1 reader, as upstream
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)
    assert first.status.logical_sliced.count == 63
    assert [m.memory_used_mib for m in ascend.monitor()] == [3349, 3350]


def test_dcmi_v1_older_queries(build: Build, table: ManufacturerTable) -> None:
    library = build("ascend/fake_dcmi.c", Path("old/libdcmi.so"), ("-DDCMI_OLD",))
    ascend = AscendDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["ascend"],
        opener=lambda: open_dcmi_at(library),
        runtime_version=lambda: "8.0.RC2",
    )
    (group,) = ascend.detect()
    assert (group.name, group.memory, group.cores, group.family) == ("310P3", 44280, 8, "310P")
    assert [card.topology.pci_bus_id for card in group.accelerators] == [
        "0000:3b:00.0",
        "0000:3c:00.0",
    ]
    # Memory came from the detailed query, so the DDR counters (clean here) decide health.
    assert not any(card.status.unhealthy for card in group.accelerators)


def test_dcmi_v2(build: Build, table: ManufacturerTable) -> None:
    library = build("ascend/fake_dcmi.c", Path("v2/libdcmi.so"), ("-DDCMI_V2",))
    dcmi = open_dcmi_at(library)
    assert dcmi is not None and dcmi.api == API_V2
    ascend = AscendDetector(
        dcmi, Sysfs("/nonexistent"), table["ascend"], runtime_version=lambda: "9.0.0"
    )
    (group,) = ascend.detect()
    assert (group.name, group.memory, group.family, group.driver_version) == (
        "950PR",
        131072,
        "950",
        "",
    )
    assert [card.id.split()[0] for card in group.accelerators] == ["A0000A00", "A0000B00"]
    assert [card.physical_indexes for card in group.accelerators] == [(8, 0, 0), (9, 1, 0)]
    assert [card.topology.pci_bus_id for card in group.accelerators] == [
        "0000:1a:00.0",
        "0000:1b:00.0",
    ]
    # The A5 product: the carrier board first, then the super pod's type (byte 20 of 48).
    assert [dcmi.mainboard_id(n, 0) for n in (0, 1)] == [0x44, 0x6C]
    assert dcmi.super_pod_type(0, 0) == 2
    topology = Ascend(lambda: dcmi).shown(
        (GrantedCard(group, group.accelerators[1]),), Mode.EXCLUSIVE, Channel("x", ""), NO_NODES
    )
    assert topology.envs["HCCL_TOPO_FILE_PATH"].endswith("/atlas_350_3.json")


def test_rocm_smi(build: Build, table: ManufacturerTable) -> None:
    library = build("hygon/fake_rocm_smi.c", Path("librocm_smi64.so"), ())
    hygon = HygonDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["hygon"],
        opener=lambda: open_rsmi([str(library)]),
        runtime_version=lambda: "24.04",
    )
    (group,) = hygon.detect()
    assert (group.name, group.memory, group.compute_capability) == ("K100_AI", 65520, "gfx928")
    first, second = group.accelerators  # the AMD card between them is not Hygon's
    assert (first.id, second.id) == ("GPU-6a1f3e7c2b9d0e4", "GPU-6a1f3e7c2b9d0e6")
    assert (first.topology.pci_bus_id, second.topology.pci_bus_id) == (
        "0000:3d:00.0",
        "0000:9c:00.0",
    )
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)
    assert [m.memory_used_mib for m in hygon.monitor()] == [24, 72]


def test_cndev(build: Build, table: ManufacturerTable) -> None:
    library = build("cambricon/fake_cndev.c", Path("neuware/lib64/libcndev.so"), ())
    cambricon = CambriconDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["cambricon"],
        environ={"NEUWARE_HOME": str(library.parents[1])},
        runtime_version=lambda: "3.8.4",
    )
    (group,) = cambricon.detect()
    assert (group.name, group.memory, group.driver_version) == ("MLU370-X8", 49152, "5.10")
    first, second = group.accelerators
    assert first.id == "MLU-7c4b6f2a-3e91-4d0a-8b5e-2f6c9d1a0e37"
    assert second.topology.pci_bus_id == "0000:3d:00.0"
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)
    assert [m.memory_used_mib for m in cambricon.monitor()] == [1024, 40960]


def test_ixml(build: Build, table: ManufacturerTable) -> None:
    library = build("iluvatar/fake_nvml_like.c", Path("corex/lib64/libixml.so"), ())
    iluvatar = IluvatarDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["iluvatar"],
        environ={"COREX_HOME": str(library.parents[1])},
    )
    (group,) = iluvatar.detect()
    assert (group.name, group.memory, group.runtime_version) == ("Iluvatar BI-V150", 32768, "10.2")
    # The stand-in library and the answers the detector tests replay describe the same card.
    replayed = recorded("iluvatar", "bi-v150-x2")["cards"][0]
    assert (group.name, group.memory) == (replayed["name"], replayed["memory"][0] >> 20)
    assert (group.driver_version, group.compute_capability) == ("4.1.0", "8.0")
    first, second = group.accelerators
    assert first.id == "GPU-8c3d9e1f-2a4b-5c6d-7e8f-90a1b2c3d4e5"
    assert (first.topology.pci_bus_id, second.topology.pci_bus_id) == (
        "0000:3b:00.0",
        "0000:3c:00.0",
    )
    assert (first.physical_indexes, second.physical_indexes) == ((4,), (5,))
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)


def test_hgml(build: Build, table: ManufacturerTable) -> None:
    library = build("iluvatar/fake_nvml_like.c", Path("libhgml.so"), ("-DHGML",))
    thead = TheadDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["thead"],
        opener=lambda: open_nvmlike([str(library)], HGML_SYMBOLS),
    )
    (group,) = thead.detect()
    assert (group.name, group.memory, group.cores) == ("PPU-ZW810E", 98304, 8192)
    assert (group.driver_version, group.runtime_version, group.compute_capability) == (
        "1.5.2",
        "1.5",
        "1.5",
    )
    logical, partitioned = group.accelerators
    assert (logical.physical_indexes, partitioned.physical_indexes) == ((4,), None)
    assert (logical.status.unhealthy, partitioned.status.unhealthy) == (True, False)
    assert logical.status.logical_sliced.count == 128
    profiles = partitioned.status.physical_sliced.profiles
    assert [(p.name, p.count, p.memory_slices, len(p.placements)) for p in profiles] == [
        ("1g.12gb", 8, 1, 8),
        ("4g.48gb", 2, 4, 2),
    ]
    assert partitioned.status.physical_sliced.count == 8


def test_ixml_symbols_are_not_hgml_ones(build: Build) -> None:
    library = build("iluvatar/fake_nvml_like.c", Path("other/libixml.so"), ())
    assert open_nvmlike([str(library)], HGML_SYMBOLS) is None  # no hgmlInit in IXML
    assert open_nvmlike([str(library)], IXML_SYMBOLS) is not None


def test_mxsml(build: Build, table: ManufacturerTable) -> None:
    library = build("metax/fake_mxsml.c", Path("maca/lib64/libmxsml.so"), ())
    metax = MetaxDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["metax"],
        environ={"MACA_HOME": str(library.parents[1])},
    )
    (group,) = metax.detect()
    assert (group.name, group.memory, group.family) == ("MXC500", 65536, "MXC")
    assert (group.driver_version, group.runtime_version) == ("2.12.13", "2.29.0.19")
    first, second = group.accelerators  # the virtual function is not a card of this node
    assert first.id == "GPU-3e1b007a-90c2-58d4-1f6e-a7b8c9d0e1f0"
    assert (first.topology.pci_bus_id, second.topology.pci_bus_id) == (
        "0000:0e:00.0",
        "0000:0f:00.0",
    )
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)


def test_mtml(build: Build, table: ManufacturerTable) -> None:
    library = build("mthreads/fake_mtml.c", Path("libmtml.so"), ())
    mthreads = MthreadsDetector(
        sysfs=Sysfs("/nonexistent"),
        maker=table["mthreads"],
        opener=lambda: open_mtml([str(library)]),
    )
    (group,) = mthreads.detect()
    assert (group.name, group.memory, group.cores, group.driver_version) == (
        "MTT S4000",
        49152,
        8192,
        "2.7.0",
    )
    first, second = group.accelerators  # the guest virtual device is left out
    assert (first.physical_indexes, second.physical_indexes) == ((0,), (2,))
    assert (first.topology.pci_bus_id, second.topology.pci_bus_id) == (
        "0000:1a:00.0",
        "0000:5a:00.0",
    )
    assert (first.status.unhealthy, second.status.unhealthy) == (False, True)
    assert [m.memory_used_mib for m in mthreads.monitor()] == [0, 40000]
    live = ctypes.CDLL(str(library)).fake_live_objects
    assert live() == 0  # every device, memory and system object was freed


def test_hgml_partitions_through_pynvml(build: Build, tmp_path: Path) -> None:
    """pynvml over HGML's renamed calls makes, finds and unmakes a PPU partition: the probe
    index and the creation id differ, the placement goes by pointer, `hgmlInit_v2` stands in for
    `nvmlInitWithFlags` and `hgmlComputeInstanceGetInfo` for its `_v2`."""
    library = build("thead/fake_hgml_mig.c", Path("mig/libhgml.so"), ())
    assert open_hgml_mig({}, [str(tmp_path / "absent.so")]) is None
    hgml = open_hgml_mig({}, [str(library)])
    assert hgml is not None
    card = "GPU-5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"
    partitioner = Partitioner(hgml, Markers(str(tmp_path / "mig-thead")), TheadNaming())
    made = partitioner.create(card, "4g48gb", Placement(4, 4), ("uid-a", "main"), 98304)
    assert made.new and (made.card, made.gpu_instance, made.compute_instance) == (card, 1, 0)
    assert made.mig_uuid.startswith("MIG-")
    (instance,) = partitioner.instances(card)
    assert (instance.profile_id, instance.placement) == (5, Placement(4, 4))
    assert instance.mig_uuids == (made.mig_uuid,) and instance.compute_ids == (0,)
    again = partitioner.create(card, "4g48gb", Placement(4, 4), ("uid-a", "main"), 98304)
    assert again == replace(made, new=False)  # a retry finds the same instance
    live = partitioner.live_partition("uid-a", "main")
    assert live is not None and live.mig_uuid == made.mig_uuid
    with pytest.raises(PartitionError, match="overlaps"):
        partitioner.create(card, "4g48gb", Placement(4, 4), ("uid-b", "main"), 98304)
    with pytest.raises(PartitionError, match="no MIG profile 1g12gb\\+me"):
        partitioner.create(card, "1g12gb+me", Placement(0, 1), ("uid-c", "main"), 98304)
    assert partitioner.destroy(card, Placement(4, 4))
    assert partitioner.instances(card) == []
    assert partitioner.live_partition("uid-a", "main") is None


def test_dmi_partitions_through_the_partitioner(
    build: Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hygon's DMI: the node-wide mode, cards by PCI address, profiles by width with ids of
    their own, and a partition made, named by its registry file, found again and unmade
    through `mig.Partitioner`."""
    library = build("hygon/fake_dmi.c", Path("dmi/libhydmi_mig.so.1"), ())
    registry = tmp_path / "dmi_mig_config"
    (registry / "ci").mkdir(parents=True)
    monkeypatch.setenv("FAKE_DMI_REGISTRY", str(registry))
    assert open_dmi([str(tmp_path / "absent.so")]) is None
    dmi = open_dmi([str(library)])
    assert dmi is not None and dmi.system_mig_mode() == 1
    card = dmi.handle_by_bus("0000:0a:00.0")
    assert dmi.index(card) == 1
    with pytest.raises(VendorError) as short:
        dmi.handle_by_bus("0a:00.0")
    assert absent(short.value)
    assert dmi.profile(card, 1) == DmiProfile(3, 4, 20, 1, 16380, "MIG 2g.15gb")
    assert dmi.profile(card, 4) == DmiProfile(0, 1, 80, 4, 65520, "MIG 8g.63gb")
    with pytest.raises(VendorError):
        dmi.profile(card, 3)  # no 3-slice profile
    assert dmi.placements(card, 1) == (Placement(0, 2), Placement(2, 2))

    partitioner = Partitioner(
        DmiMig(dmi, str(registry)),
        Markers(str(tmp_path / "mig-hygon")),
        HygonNaming(),
        address=lambda uuid: {"GPU-b": "0000:0a:00.0"}[uuid],
    )
    made = partitioner.create("GPU-b", "4g.31gb", Placement(2, 2), ("uid-a", "main"), 65520)
    assert made.new and (made.card, made.gpu_instance, made.compute_instance) == ("GPU-b", 1, 0)
    conf = registry / "ci/dev1gi1ci0.conf"
    assert made.mig_uuid == "MIG-" + registry_uuid(conf.read_text())
    (instance,) = partitioner.instances("GPU-b")
    assert (instance.profile_id, instance.placement) == (1, Placement(2, 2))
    again = partitioner.create("GPU-b", "4g.31gb", Placement(2, 2), ("uid-a", "main"), 65520)
    assert again == replace(made, new=False)
    live = partitioner.live_partition("uid-a", "main")
    assert live is not None and live.mig_uuid == made.mig_uuid
    assert partitioner.destroy("GPU-b", Placement(2, 2))
    assert partitioner.instances("GPU-b") == [] and not conf.exists()
