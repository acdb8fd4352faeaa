"""The partition reclaimer (docs/design/node-agent.md, "The reclaimer"): sweeps over the simulated
NVML, with a fake clock."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chain.partitions import Placement
from nodeagent.plugin.mig import Marker, Markers, Partitioner
from nodeagent.plugin.reclaim import MigReclaimer, ReclaimLoop
from nodeagent.simulate import SimulatedNvml
from nodeagent.vendors.nvidia.simulate import load_profile

P = Placement
CARD_MIB = 40960


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def nvml() -> SimulatedNvml:
    simulated = SimulatedNvml(load_profile("a100-40gb-mig"))
    simulated.nvmlInit()
    return simulated


@pytest.fixture
def partitioner(nvml: SimulatedNvml, tmp_path: Path) -> Partitioner:
    return Partitioner(nvml, Markers(str(tmp_path)))


class Rig:
    def __init__(self, nvml: SimulatedNvml, partitioner: Partitioner) -> None:
        self.nvml = nvml
        self.partitioner = partitioner
        self.clock = Clock()
        self.slept: list[float] = []
        self.cards = [card.uuid for card in nvml.profile.cards[:2]]
        self.reclaimer = MigReclaimer(
            partitioner,
            lambda: self.cards,
            clock=self.clock,
            sleep=self.slept.append,
            debounce_s=300,
            tries=3,
            backoff_s=0.5,
        )

    def make(self, pod: str, start: int = 0, number: int = 0) -> str:
        card = self.cards[number]
        return self.partitioner.create(
            card, "1g.5gb", P(start, 1), (pod, "main"), CARD_MIB
        ).mig_uuid

    def slots(self) -> list[tuple[str, int]]:
        return [(view.card, view.start) for view in self.nvml.instances()]


@pytest.fixture
def rig(nvml: SimulatedNvml, partitioner: Partitioner) -> Rig:
    return Rig(nvml, partitioner)


def test_instances_of_gone_pods_are_destroyed_and_live_ones_kept(rig: Rig) -> None:
    rig.make("uid-live", 0)
    rig.make("uid-gone", 1)
    rig.make("uid-gone2", 0, number=1)
    sweep = rig.reclaimer.reconcile(frozenset({"uid-live"}))
    assert sorted(sweep.destroyed) == [(rig.cards[0], 1), (rig.cards[1], 0)]
    assert rig.slots() == [(rig.cards[0], 0)]
    assert [m.pod_uid for m in rig.partitioner.markers.all()] == ["uid-live"]


def test_an_instance_with_a_running_process_is_left_alone(rig: Rig) -> None:
    mig = rig.make("uid-gone", 3)
    rig.nvml.run_process(mig, 77)
    sweep = rig.reclaimer.reconcile(frozenset())
    assert sweep.kept_busy == [(rig.cards[0], 3)] and sweep.destroyed == []
    assert rig.slots() == [(rig.cards[0], 3)]
    rig.nvml.end_process(mig, 77)
    assert rig.reclaimer.reconcile(frozenset()).destroyed == [(rig.cards[0], 3)]


def test_orphans_are_destroyed_only_after_the_debounce(rig: Rig) -> None:
    rig.make("uid-x", 5)
    rig.partitioner.markers.remove(rig.cards[0], 5)  # now nobody's: an orphan
    assert rig.reclaimer.reconcile(frozenset()).destroyed == []
    rig.clock.now += 299
    assert rig.reclaimer.reconcile(frozenset()).destroyed == []
    assert rig.slots() == [(rig.cards[0], 5)]
    rig.clock.now += 1
    assert rig.reclaimer.reconcile(frozenset()).destroyed == [(rig.cards[0], 5)]
    assert rig.slots() == []


def test_an_orphan_that_gains_a_marker_starts_its_debounce_again(rig: Rig) -> None:
    rig.make("uid-x", 5)
    marker = rig.partitioner.markers.read(rig.cards[0], 5)
    assert marker is not None
    rig.partitioner.markers.remove(rig.cards[0], 5)
    rig.reclaimer.reconcile(frozenset())
    rig.partitioner.markers.write(marker)  # the owner's marker landed after all
    rig.clock.now += 200
    rig.reclaimer.reconcile(frozenset({"uid-x"}))
    rig.partitioner.markers.remove(rig.cards[0], 5)
    rig.clock.now += 200
    assert rig.reclaimer.reconcile(frozenset()).destroyed == []


def test_a_hand_subdivided_gpu_instance_stops_the_whole_sweep(rig: Rig) -> None:
    rig.make("uid-gone", 0)
    handle = rig.nvml.nvmlDeviceGetHandleByIndex(1)
    slot = rig.nvml.c_nvmlGpuInstancePlacement_t()
    slot.start, slot.size = 0, 2
    gpu = rig.nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
        handle, 14, ctypes.pointer(slot)
    )  # 2g.10gb
    rig.nvml.nvmlGpuInstanceCreateComputeInstance(gpu, 0)
    rig.nvml.nvmlGpuInstanceCreateComputeInstance(gpu, 0)  # two 1-slice compute instances
    sweep = rig.reclaimer.reconcile(frozenset())
    assert "2 compute instances" in sweep.stopped
    assert sweep.destroyed == []
    assert len(rig.slots()) == 2


def test_in_use_is_retried_a_bounded_number_of_times(rig: Rig) -> None:
    rig.make("uid-gone", 2)
    rig.nvml.fail_next("nvmlComputeInstanceDestroy", "IN_USE")
    assert rig.reclaimer.reconcile(frozenset()).destroyed == [(rig.cards[0], 2)]
    assert rig.slept == [0.5]
    rig.make("uid-gone", 2)
    rig.reclaimer.tries = 1
    rig.nvml.fail_next("nvmlComputeInstanceDestroy", "IN_USE")
    sweep = rig.reclaimer.reconcile(frozenset())
    assert sweep.failed == [(rig.cards[0], 2)] and rig.slept == [0.5]
    assert rig.reclaimer.reconcile(frozenset()).destroyed == [(rig.cards[0], 2)]


def test_a_marker_without_instance_is_dropped_once_its_pod_is_gone(rig: Rig) -> None:
    rig.make("uid-a", 4)
    marker = rig.partitioner.markers.read(rig.cards[0], 4)
    assert marker is not None
    rig.partitioner.destroy(rig.cards[0], P(4, 1))
    rig.partitioner.markers.write(marker)
    rig.reclaimer.reconcile(frozenset({"uid-a"}))
    assert rig.partitioner.markers.read(rig.cards[0], 4) is not None
    rig.reclaimer.reconcile(frozenset())
    assert rig.partitioner.markers.read(rig.cards[0], 4) is None


def test_a_partition_made_during_a_sweep_keeps_its_instance_and_its_marker(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's live set was listed before a new Pod's Allocate; its instance is cut after
    the sweep listed the card and before it read the markers (found by benchmarks/churn.py: the
    marker was dropped, the instance left without one, an orphan nobody reclaimed in time)."""
    on_node = {"uid-new"}
    rig.reclaimer.live_now = lambda: frozenset(on_node)
    markers = rig.partitioner.markers
    listed = markers.all

    def granted_meanwhile() -> Iterator[Marker]:
        if not rig.slots():
            rig.make("uid-new", 2)
        return listed()

    monkeypatch.setattr(markers, "all", granted_meanwhile)
    sweep = rig.reclaimer.reconcile(frozenset())
    assert sweep.destroyed == []
    assert rig.slots() == [(rig.cards[0], 2)]
    assert markers.read(rig.cards[0], 2) is not None
    # And swept again with the same stale set, its instance is not unmade either.
    assert rig.reclaimer.reconcile(frozenset()).destroyed == []
    assert rig.slots() == [(rig.cards[0], 2)]
    on_node.clear()  # the Pod is gone: now it goes
    assert rig.reclaimer.reconcile(frozenset()).destroyed == [(rig.cards[0], 2)]


# --- the loop -----------------------------------------------------------------------------------


def test_loop_waits_for_the_first_broadcast_then_runs_on_each_and_every_period() -> None:
    clock = Clock()
    seen: list[frozenset[str]] = []
    loop = ReclaimLoop(seen.append, period_s=60, clock=clock)
    clock.now += 3600
    assert not loop.tick() and seen == []  # never before the first live set
    loop.broadcast({"a"})
    assert loop.tick() and seen == [frozenset({"a"})]
    assert not loop.tick()
    clock.now += 59
    assert not loop.tick()
    clock.now += 1
    assert loop.tick() and seen[-1] == frozenset({"a"})  # the period reuses the last set
    loop.broadcast({"b"})
    loop.broadcast({"c"})  # broadcasts coalesce into one sweep with the newest set
    assert loop.tick() and seen[-1] == frozenset({"c"})
    assert len(seen) == 3


def test_loop_thread_sweeps_on_broadcast_and_survives_a_failing_sweep() -> None:
    swept = threading.Event()
    calls: list[frozenset[str]] = []

    def reconcile(live: frozenset[str]) -> None:
        calls.append(live)
        if len(calls) == 1:
            raise RuntimeError("NVML went away")
        swept.set()

    loop = ReclaimLoop(reconcile, period_s=3600)
    loop.start()
    try:
        loop.broadcast({"a"})
        loop.broadcast({"b"})
        for _ in range(50):
            if swept.wait(0.1):
                break
            loop.broadcast({"b"})
        assert swept.is_set()
    finally:
        loop.stop()
    assert calls[-1] == frozenset({"b"})
