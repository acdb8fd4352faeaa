"""Events on the Node: what changed between two reports of its cards, and the hold-back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from chain.devices import Accelerator, AcceleratorStatus, DevicesGroup
from chain.manufacturers import default_manufacturers
from nodeagent.agent import Reporter
from nodeagent.detect.loop import DetectLoop
from nodeagent.detect.remembered import ManufacturerDetection
from nodeagent.detect.sysfs import Sysfs
from nodeagent.node_events import NodeEvent, detection_events
from tests.unit.nodeagent.test_loop import Fake, Recorder

T4 = "NVIDIA Tesla T4"


def _group(*cards: tuple[int, bool], gid: str = "tesla-t4", name: str = T4) -> DevicesGroup:
    return DevicesGroup(
        gid,
        "nvidia",
        name,
        15360,
        accelerators=tuple(
            Accelerator(f"GPU-{gid}-{index}", index, status=AcceleratorStatus(unhealthy=bad))
            for index, bad in cards
        ),
    )


def test_a_first_report_announces_every_card() -> None:
    assert detection_events(None, [_group((0, False), (1, False))]) == [
        NodeEvent("Normal", "CardsDetected", f"2 {T4} cards detected (nvidia-tesla-t4; index 0, 1)")
    ]


def test_the_same_cards_again_say_nothing() -> None:
    group = _group((0, False), (1, False))
    assert detection_events([group], [group]) == []


def test_lost_and_new_cards_and_health_flips_are_each_one_event() -> None:
    before = [
        _group((0, False), (1, False), (2, True)),
        _group((0, False), gid="a10g", name="A10G"),
    ]
    after = [_group((0, True), (2, False), (3, False))]
    assert detection_events(before, after) == [
        NodeEvent("Normal", "CardsDetected", f"1 {T4} card detected (nvidia-tesla-t4; index 3)"),
        NodeEvent(
            "Warning",
            "CardUnhealthy",
            f"{T4} index 0 (GPU-tesla-t4-0) is unhealthy (uncorrected memory errors): the device "
            "plugin offers it no more; Pods already on it keep running",
        ),
        NodeEvent(
            "Normal",
            "CardHealthy",
            f"{T4} index 2 (GPU-tesla-t4-2) is healthy again: the device plugin offers it again",
        ),
        NodeEvent(
            "Warning",
            "CardsLost",
            f"1 of 3 {T4} cards no longer detected (nvidia-tesla-t4; index 1): their pools shrink",
        ),
        NodeEvent(
            "Warning",
            "CardsLost",
            "1 of 1 A10G card no longer detected (nvidia-a10g; index 0): their pools shrink",
        ),
    ]


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def event(self, regarding: Any, type_: str, reason: str, note: str, action: str) -> None:
        self.recorded.append((regarding["metadata"]["name"], type_, reason, action))


class FakeKube:
    """The Node and its Devices as the API server holds them; applies stored as they come."""

    def __init__(self, devices: Any) -> None:
        self.devices = devices
        self.node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return self.node if kind == "Node" else self.devices

    def apply(self, obj: Any, manager: str = "", subresource: str | None = None) -> Any:
        self.devices = obj
        return obj


def test_the_reporter_compares_with_the_devices_the_server_holds() -> None:
    from chain.devices import Devices, DevicesSpec

    held = Devices("n1", DevicesSpec((_group((0, False), (1, False)),))).render()
    kube = FakeKube(held)
    events = Events()
    reporter = Reporter(
        kube,  # type: ignore[arg-type]
        "n1",
        "gpustack-system",
        ("nvidia",),
        default_manufacturers(),
        events=events,  # type: ignore[arg-type]
    )
    same = [_group((0, False), (1, False))]
    reporter._devices(kube.node, same)
    assert events.recorded == []  # a restarted agent finding the same cards says nothing
    reporter._devices(kube.node, [replace(same[0], accelerators=same[0].accelerators[:1])])
    assert events.recorded == [("n1", "Warning", "CardsLost", "Detected")]


def test_the_hold_back_is_told_each_round_it_holds_back(tmp_path: Path) -> None:
    told: list[str] = []
    recorder = Recorder()
    entry = ManufacturerDetection(Fake([(), ()]), Sysfs(tmp_path), "10de", ("03",))
    agent = DetectLoop(
        [entry],
        ["nvidia"],
        recorder.publish,
        recorder.report,
        no_pci_check=True,
        sleep=recorder.sleep,
        held_back=told.append,
    )
    agent.run_round(lambda: False)
    agent.run_round(lambda: False)
    assert len(told) == 2
    assert told[0].startswith("manufacturer nvidia is expected but not detected")
