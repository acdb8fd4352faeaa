"""The detect loop: hold-back, publishing, reporting and the re-detect triggers."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.devices import Accelerator, DevicesGroup
from nodeagent.detect.base import CardMetrics
from nodeagent.detect.loop import DetectionRound, DetectLoop, HeldBack
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.detect.sysfs import Sysfs
from tests.unit.nodeagent.helpers import nvidia_node, small_profile

HEALTHY = DevicesGroup("t4", "nvidia", "Tesla T4", 16384, accelerators=(Accelerator("GPU-0", 0),))
METRICS = (CardMetrics("nvidia", "GPU-0", 0),)


class Fake:
    """A detector with scripted detections (the last one repeats) and monitor answers."""

    def __init__(
        self,
        detections: list[tuple[DevicesGroup, ...] | Exception],
        monitors: list[tuple[CardMetrics, ...] | Exception] | None = None,
        manufacturer: str = "nvidia",
    ) -> None:
        self.manufacturer = manufacturer
        self.detections = detections
        self.monitors = monitors or [METRICS]
        self.detect_calls = 0
        self.monitor_calls = 0

    def detect(self) -> tuple[DevicesGroup, ...]:
        answer = self.detections[min(self.detect_calls, len(self.detections) - 1)]
        self.detect_calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    def monitor(self) -> tuple[CardMetrics, ...]:
        answer = self.monitors[min(self.monitor_calls, len(self.monitors) - 1)]
        self.monitor_calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


class Recorder:
    def __init__(self, fail_reports: int = 0) -> None:
        self.published: list[frozenset[str]] = []
        self.reported: list[DetectionRound] = []
        self.sleeps: list[float] = []
        self.fail_reports = fail_reports

    def publish(self, manufacturers: frozenset[str]) -> None:
        self.published.append(manufacturers)

    def report(self, current: DetectionRound) -> None:
        self.reported.append(current)
        if self.fail_reports:
            self.fail_reports -= 1
            raise RuntimeError("API down")

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def loop(
    tmp_path: Path,
    detectors: list[Fake],
    recorder: Recorder,
    expected: tuple[str, ...] = ("nvidia",),
    no_fast_failed: bool = False,
    redetect_every: int = 40,
) -> DetectLoop:
    # no_pci_check: the fakes stand for cards without a sysfs tree.
    detections = [ManufacturerDetection(d, Sysfs(tmp_path), "10de", ("03",)) for d in detectors]
    return DetectLoop(
        detections,
        expected,
        recorder.publish,
        recorder.report,
        no_pci_check=True,
        period=15.0,
        sleep=recorder.sleep,
        no_fast_failed=no_fast_failed,
        redetect_every=redetect_every,
    )


def never() -> bool:
    return False


def test_one_manufacturer_holds_back_an_empty_first_pass(tmp_path: Path) -> None:
    # docs/design/vectors.md, "Detector": nothing published and detection repeated.
    fake = Fake([(), (), (HEALTHY,)])
    recorder = Recorder()
    agent = loop(tmp_path, [fake], recorder, redetect_every=1)
    with pytest.raises(HeldBack, match="manufacturer nvidia is expected but not detected"):
        agent.detect()
    agent.run_round(never)
    assert (recorder.published, recorder.reported, recorder.sleeps) == ([], [], [15.0])
    agent.run_round(never)
    assert recorder.published == [frozenset({"nvidia"})]
    assert len(recorder.reported) == 1
    assert fake.detect_calls == 3


def test_no_fast_failed_publishes_the_empty_first_pass(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = loop(tmp_path, [Fake([()])], recorder, no_fast_failed=True, redetect_every=1)
    agent.run_round(never)
    assert recorder.published == [frozenset()]
    assert recorder.reported[0].groups == ()


def test_several_manufacturers_never_hold_back(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = loop(tmp_path, [Fake([()])], recorder, expected=("nvidia", "amd"), redetect_every=1)
    agent.run_round(never)
    assert recorder.published == [frozenset()]


def test_the_hold_back_ends_with_the_first_detection(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = loop(tmp_path, [Fake([(HEALTHY,), ()])], recorder, redetect_every=1)
    agent.run_round(never)
    agent.run_round(never)  # the card is gone: published and reported as such
    assert recorder.published == [frozenset({"nvidia"}), frozenset()]
    assert recorder.reported[1].groups == ()


def test_an_unmeasured_manufacturer_is_detected_again_next_period(tmp_path: Path) -> None:
    fake = Fake([(HEALTHY,), RuntimeError("driver hiccup")])
    recorder = Recorder()
    agent = loop(tmp_path, [fake], recorder, redetect_every=40)
    agent.run_round(never)
    assert fake.monitor_calls == 40  # stable: monitored until the periodic re-detect
    agent.run_round(never)
    failed = recorder.reported[1]
    assert failed.unmeasured == {"nvidia"} and failed.groups == (HEALTHY,)
    assert recorder.published[1] == frozenset({"nvidia"})  # held result still counts
    assert fake.monitor_calls == 40  # no monitoring after an unmeasured pass
    assert len(recorder.sleeps) == 41


def test_a_health_change_triggers_a_redetect(tmp_path: Path) -> None:
    sick = (CardMetrics("nvidia", "GPU-0", 0, unhealthy=True),)
    fake = Fake([(HEALTHY,)], monitors=[METRICS, METRICS, sick])
    recorder = Recorder()
    loop(tmp_path, [fake], recorder).run_round(never)
    assert fake.monitor_calls == 3 and len(recorder.sleeps) == 3


def test_a_new_card_triggers_a_redetect(tmp_path: Path) -> None:
    more = (*METRICS, CardMetrics("nvidia", "GPU-1", 1))
    fake = Fake([(HEALTHY,)], monitors=[more])
    recorder = Recorder()
    loop(tmp_path, [fake], recorder).run_round(never)
    assert fake.monitor_calls == 1


def test_a_manufacturer_the_monitor_cannot_measure_is_ignored(tmp_path: Path) -> None:
    fake = Fake([(HEALTHY,)], monitors=[RuntimeError("busy")])
    other = Fake([()], monitors=[()], manufacturer="amd")
    recorder = Recorder()
    agent = loop(tmp_path, [fake, other], recorder, expected=("nvidia", "amd"), redetect_every=5)
    agent.run_round(never)
    assert fake.monitor_calls == 5  # never a reason to re-detect


def test_a_failed_report_forces_a_redetect(tmp_path: Path) -> None:
    fake = Fake([(HEALTHY,)])
    recorder = Recorder(fail_reports=1)
    agent = loop(tmp_path, [fake], recorder)
    agent.run_round(never)
    assert fake.monitor_calls == 0 and recorder.sleeps == [15.0]
    agent.run_round(never)
    assert fake.detect_calls == 2 and len(recorder.reported) == 2


def test_run_stops(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = loop(tmp_path, [Fake([(HEALTHY,)])], recorder)

    def after_three_sleeps() -> bool:
        return len(recorder.sleeps) >= 3

    agent.run(after_three_sleeps)
    assert len(recorder.reported) == 1 and len(recorder.sleeps) == 3


def test_simulated_card_turning_unhealthy_is_reported() -> None:
    # Pass 1 detects, passes 2-3 monitor; from pass 3 card 1 has ECC errors.
    profile = small_profile(faults=[{"kind": "unhealthy", "card": 1, "from": 3}])
    recorder = Recorder()
    with nvidia_node(profile) as (detector, nvml, sysfs):
        detection = ManufacturerDetection(detector, sysfs, "10de", ("03",))
        agent = DetectLoop(
            [detection], ("nvidia",), recorder.publish, recorder.report, sleep=recorder.sleep
        )
        agent.run(lambda: len(recorder.reported) >= 2)
        assert nvml.passes == 4
    first, second = (report.groups[0].accelerators for report in recorder.reported)
    assert [card.status.unhealthy for card in first] == [False, False]
    assert [card.status.unhealthy for card in second] == [False, True]


class _NoDriver:
    """pynvml on a node whose driver is not loaded: `nvmlInit` fails."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self) -> None:
        raise self.NVMLError("Driver Not Loaded")


def test_the_hold_back_says_why_nothing_was_found(tmp_path: Path) -> None:
    from nodeagent.vendors.nvidia.detect import NvidiaDetector

    def held_back(detector: object, no_pci_check: bool) -> str:
        entry = ManufacturerDetection(detector, Sysfs(tmp_path), "10de", ("03",))  # type: ignore[arg-type]
        agent = DetectLoop([entry], ["nvidia"], lambda _: None, lambda _: None)
        agent.no_pci_check = no_pci_check
        with pytest.raises(HeldBack) as held:
            agent.detect()
        return str(held.value)

    no_driver = NvidiaDetector(nvml=_NoDriver(), sysfs=Sysfs(tmp_path))  # type: ignore[arg-type]
    message = held_back(no_driver, no_pci_check=True)
    assert message.startswith("manufacturer nvidia is expected but not detected: NVML did not")
    assert "Driver Not Loaded" in message
    # The pre-check found no NVIDIA device at all (an empty sysfs): that is the cause.
    assert "no PCI device of vendor 10de" in held_back(no_driver, no_pci_check=False)
