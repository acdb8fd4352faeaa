"""The AMD detector on recorded AMD SMI (Python binding) answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chain.manufacturers import ManufacturerTable
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.vendors.amd.amdsmi import AmdSmi, load_amdsmi
from nodeagent.vendors.amd.detect import AmdDetector, card_id, rocm_version
from tests.unit.nodeagent.helpers import write
from tests.unit.nodeagent.vendor_data import fake_sysfs, recorded

MI300X = "AMD Instinct MI300X"
DRM_DIR = "sys/module/amdgpu/drivers/pci:amdgpu"


class AmdSmiException(Exception):
    """The fake's own error type (the real one takes a status code)."""


class Flags:
    INIT_AMD_GPUS = 2


class Block:
    UMC = 1


class FakeAmdSmi:
    """The `amdsmi` surface answering from a recording; `"refused"` answers raise."""

    AmdSmiException = AmdSmiException
    AmdSmiInitFlags = Flags
    AmdSmiGpuBlock = Block

    def __init__(self, recording: dict[str, Any]) -> None:
        self.cards: list[dict[str, Any]] = recording["cards"]
        self.rocm: Any = recording.get("rocm_version")
        if isinstance(self.rocm, list):
            self.rocm = tuple(self.rocm)  # the binding answers a tuple; JSON keeps lists
        self.handles_refused = False

    def _answer(self, handle: int, key: str) -> Any:
        answer = self.cards[handle][key]
        if answer == "refused":
            raise AmdSmiException(f"{key} not supported")
        return answer

    def amdsmi_init(self, flag: Any = 0, /) -> None:
        assert flag == Flags.INIT_AMD_GPUS

    def amdsmi_get_processor_handles(self) -> list[Any]:
        if self.handles_refused:
            raise AmdSmiException("driver not loaded")
        return list(range(len(self.cards)))

    def amdsmi_get_gpu_asic_info(self, handle: Any, /) -> dict[str, Any]:
        answer: dict[str, Any] = self._answer(handle, "asic_info")
        return answer

    def amdsmi_get_gpu_device_bdf(self, handle: Any, /) -> str:
        return str(self._answer(handle, "bdf"))

    def amdsmi_get_gpu_vram_usage(self, handle: Any, /) -> dict[str, Any]:
        answer: dict[str, Any] = self._answer(handle, "vram_usage")
        return answer

    def amdsmi_get_gpu_ecc_count(self, handle: Any, block: Any, /) -> dict[str, Any]:
        assert block == Block.UMC
        answer: dict[str, Any] = self._answer(handle, "ecc_count")
        return answer

    def amdsmi_get_gpu_driver_info(self, handle: Any, /) -> dict[str, Any]:
        answer: dict[str, Any] = self._answer(handle, "driver_info")
        return answer

    def amdsmi_get_rocm_version(self) -> Any:
        if self.rocm is None:
            raise AmdSmiException("no rocm")
        return self.rocm


def detector(
    smi: FakeAmdSmi, tmp_path: Path, table: ManufacturerTable, with_memory: bool = False
) -> AmdDetector:
    buses = [card["bdf"] for card in smi.cards]
    drm = {bus: (number + 1, 128 + number) for number, bus in enumerate(buses)}
    sysfs = fake_sysfs(tmp_path, "1002", buses, drm, DRM_DIR)
    return AmdDetector(smi, sysfs, table["amd"], with_memory, environ={"ROCM_PATH": "/nowhere"})


def test_the_fake_is_an_amdsmi_surface() -> None:
    surface: AmdSmi = FakeAmdSmi(recorded("amd", "mi300x-x8"))  # checked by mypy
    assert surface.AmdSmiGpuBlock.UMC == 1


def test_no_binding_means_no_cards(table: ManufacturerTable) -> None:
    absent = AmdDetector(maker=table["amd"], opener=lambda: None)
    assert absent.detect() == ()
    assert absent.monitor() == ()


def test_the_binding_is_not_installed_here() -> None:
    # This machine has no ROCm: the real loader answers None rather than raising.
    assert load_amdsmi() is None


def test_eight_mi300x(tmp_path: Path, table: ManufacturerTable) -> None:
    (group,) = detector(FakeAmdSmi(recorded("amd", "mi300x-x8")), tmp_path, table).detect()
    assert (group.id, group.manufacturer, group.name) == ("instinct-mi300x", "amd", MI300X)
    assert (group.memory, group.cores) == (196592, 304)
    assert (group.driver_version, group.runtime_version) == ("6.10.5", "6.4.1")
    assert (group.compute_capability, group.family) == ("gfx942", "")
    cards = group.accelerators
    assert [card.index for card in cards] == list(range(8))
    assert cards[0].id == "GPU-5b4c6e3a7d2f1a09"
    assert cards[3].id == "GPU-7f6e5d4c3b2a1908"
    assert cards[0].physical_indexes == (1, 128)
    assert cards[7].physical_indexes == (8, 135)
    assert cards[2].topology.pci_bus_id == "0000:46:00.0"
    assert (cards[2].topology.numa_affinity, cards[2].topology.cpu_affinity) == ("0", "0-31")
    assert [card.status.unhealthy for card in cards] == [False] * 6 + [True, False]
    assert {
        (c.status.logical_sliced.count, c.status.logical_sliced.cores_percentage_overcommit)
        for c in cards
    } == {(128, True)}
    assert group.sliced_detail.logical.count == 8 * 128
    assert group.sliced_detail.logical.cores_percentage_overcommit


def test_group_id_with_memory(tmp_path: Path, table: ManufacturerTable) -> None:
    smi = FakeAmdSmi(recorded("amd", "mi300x-x8"))
    (group,) = detector(smi, tmp_path, table, with_memory=True).detect()
    assert group.id == "instinct-mi300x-191g"


def test_workstation_skips_what_it_cannot_identify(
    tmp_path: Path, table: ManufacturerTable
) -> None:
    groups = detector(FakeAmdSmi(recorded("amd", "workstation")), tmp_path, table).detect()
    # The APU has no serial and the third card no VRAM answer: both are left out, and the
    # nameless fourth card is named by its PCI device id.
    assert [(g.name, g.memory, [c.index for c in g.accelerators]) for g in groups] == [
        ("AMD Radeon PRO W7900", 49136, [0]),
        ("0x744c", 24560, [1]),
    ]
    w7900, nameless = groups
    assert (w7900.id, w7900.cores, w7900.compute_capability) == ("radeon-pro-w7900", 96, "gfx1100")
    assert (w7900.runtime_version, w7900.driver_version) == ("6.2.4", "6.8.0-45-generic")
    assert not w7900.accelerators[0].status.unhealthy  # ECC not supported is not a failure
    assert (nameless.cores, nameless.driver_version) == (0, "")


def test_monitor_sees_the_same_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    amd = detector(FakeAmdSmi(recorded("amd", "mi300x-x8")), tmp_path, table)
    metrics = amd.monitor()
    assert [m.id for m in metrics] == [c.id for c in amd.detect()[0].accelerators]
    assert (metrics[3].memory_total_mib, metrics[3].memory_used_mib) == (196592, 150211)
    assert [m.unhealthy for m in metrics].count(True) == 1


def test_no_handles_means_no_cards(tmp_path: Path, table: ManufacturerTable) -> None:
    smi = FakeAmdSmi(recorded("amd", "mi300x-x8"))
    smi.handles_refused = True
    assert detector(smi, tmp_path, table).detect() == ()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("bdf", "GPU 3"),
        ("vram_usage", {"vram_total": "lots"}),
        ("vram_usage", ["not", "a", "dict"]),
        ("asic_info", {"market_name": MI300X, "asic_serial": "0xZZ"}),
    ],
)
def test_malformed_answers_fail_the_pass(
    key: str, value: Any, tmp_path: Path, table: ManufacturerTable
) -> None:
    smi = FakeAmdSmi(recorded("amd", "mi300x-x8"))
    smi.cards[1][key] = value
    amd = detector(smi, tmp_path, table)
    with pytest.raises(ValueError):
        amd.detect()
    # The framework turns the failure into "could not measure", keeping the last result.
    detection = ManufacturerDetection(amd, amd._sysfs, "1002", ["12"])
    assert not detection.detect(no_pci_check=True).measured


@pytest.mark.parametrize(
    ("serial", "ident"),
    [
        ("0x5B4C6E3A7D2F1A09", "GPU-5b4c6e3a7d2f1a09"),
        ("5b4c6e3a7d2f1a09", "GPU-5b4c6e3a7d2f1a09"),
        ("0x0000000000000042", "GPU-0000000000000042"),
        ("N/A", ""),
        ("0xFFFFFFFF", ""),
        ("0xFFFFFFFFFFFFFFFF", ""),
        ("", ""),
    ],
)
def test_card_id(serial: str, ident: str) -> None:
    assert card_id(serial) == ident


def test_rocm_version(tmp_path: Path) -> None:
    assert rocm_version((True, "6.4.1"), tmp_path) == "6.4.1"
    assert rocm_version("6.3.0-39", tmp_path) == "6.3.0"
    write(tmp_path / ".info/version", "6.1.2-119")
    assert rocm_version((False, "librocm-core.so not found"), tmp_path) == "6.1.2"
    assert rocm_version(None, tmp_path / "missing") == ""
