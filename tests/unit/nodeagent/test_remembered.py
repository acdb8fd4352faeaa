"""A failed pass is not an empty manufacturer; an empty pass is; the PCI pre-check gates both."""

from __future__ import annotations

from pathlib import Path

from chain.devices import Accelerator, DevicesGroup
from nodeagent.detect.base import CardMetrics
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.detect.sysfs import Sysfs
from nodeagent.simulate import simulated_node
from nodeagent.vendors.nvidia.simulate import PCI_VENDOR
from tests.unit.nodeagent.helpers import nvidia_node, small_profile, write

GROUP = DevicesGroup("t4", "nvidia", "Tesla T4", 16384, accelerators=(Accelerator("GPU-0", 0),))


class Scripted:
    """A detector that answers from a script: a tuple of groups, or an exception to raise."""

    manufacturer = "nvidia"

    def __init__(self, *answers: tuple[DevicesGroup, ...] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def detect(self) -> tuple[DevicesGroup, ...]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def monitor(self) -> tuple[CardMetrics, ...]:
        raise RuntimeError("no monitor")


def on_bus(tmp_path: Path) -> Sysfs:
    folder = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    write(folder / "vendor", "0x10de")
    write(folder / "class", "0x030200")
    return Sysfs(tmp_path)


def held(detector: Scripted, sysfs: Sysfs) -> ManufacturerDetection:
    return ManufacturerDetection(detector, sysfs, "10de", ("03",))


def test_a_failed_pass_reports_the_last_result_unmeasured(tmp_path: Path) -> None:
    detection = held(Scripted((GROUP,), RuntimeError("boom")), on_bus(tmp_path))
    assert detection.detect().groups == (GROUP,)
    failed = detection.detect()
    assert failed.groups == (GROUP,)
    assert not failed.measured and failed.error == "boom"
    assert failed.detected  # still counts as present


def test_an_empty_pass_drops_the_held_result(tmp_path: Path) -> None:
    detection = held(Scripted((GROUP,), (), RuntimeError("boom")), on_bus(tmp_path))
    detection.detect()
    empty = detection.detect()
    assert empty.measured and empty.groups == () and not empty.detected
    # A pulled card is not resurrected by a later failure.
    assert detection.detect().groups == ()


def test_a_first_pass_failure_has_nothing_to_hold(tmp_path: Path) -> None:
    failed = held(Scripted(RuntimeError("boom")), on_bus(tmp_path)).detect()
    assert (failed.groups, failed.measured) == ((), False)


def test_no_device_on_the_bus_skips_the_driver(tmp_path: Path) -> None:
    detector = Scripted((GROUP,))
    result = held(detector, Sysfs(tmp_path)).detect()
    assert result.measured and result.groups == () and detector.calls == 0


def test_no_pci_check_asks_the_driver_anyway(tmp_path: Path) -> None:
    detector = Scripted((GROUP,))
    assert held(detector, Sysfs(tmp_path)).detect(no_pci_check=True).groups == (GROUP,)


def test_wsl_forces_no_pci_check(tmp_path: Path) -> None:
    write(tmp_path / "proc/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2")
    assert held(Scripted((GROUP,)), Sysfs(tmp_path)).detect().groups == (GROUP,)


def test_monitor_failure_is_unmeasured(tmp_path: Path) -> None:
    assert held(Scripted(), Sysfs(tmp_path)).monitor() == ()  # nothing on the bus
    assert held(Scripted(), on_bus(tmp_path)).monitor() is None


def test_simulated_panic_then_recovery() -> None:
    profile = small_profile(faults=[{"kind": "panic", "from": 2, "until": 2}])
    with nvidia_node(profile) as (detector, _, sysfs):
        detection = ManufacturerDetection(detector, sysfs, "10de", ("03",))
        first = detection.detect()
        second = detection.detect()
        third = detection.detect()
    assert first.measured and len(first.groups[0].accelerators) == 2
    assert not second.measured and second.groups == first.groups
    assert "simulated fault" in second.error
    assert third.measured and third.groups == first.groups


def test_simulated_node_without_cards_on_the_bus() -> None:
    # The real pre-check over the simulated tree: AMD has no device there.
    with simulated_node(small_profile(), PCI_VENDOR) as (_, sysfs):
        assert sysfs.has_device("10de", ("03",))
        assert not sysfs.has_device("1002", ("03",))
