"""The agent's sleep ends when its Node's labels change or a stop signal comes, not otherwise."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from typing import Any

import pytest

from kubeapi.watch import Cache, Event
from nodeagent import agent
from nodeagent.agent import label_waker, stop_on_signals


def _node(labels: dict[str, str], heartbeat: str = "t0") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "labels": labels, "resourceVersion": heartbeat},
        "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": heartbeat}]},
    }


def _sleeping(sleep: Any, seconds: float) -> tuple[threading.Thread, list[float]]:
    took: list[float] = []

    def run() -> None:
        start = time.monotonic()
        sleep(seconds)
        took.append(time.monotonic() - start)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, took


HOST = {"kubernetes.io/hostname": "node-a"}


def test_a_label_change_ends_the_sleep_and_a_heartbeat_does_not() -> None:
    nodes = Cache()
    nodes.replace([_node(HOST)], "1")
    sleep = label_waker(threading.Event(), nodes, "node-a", lambda: HOST)
    thread, took = _sleeping(sleep, 20)
    time.sleep(0.2)
    nodes.apply(Event("MODIFIED", _node({"kubernetes.io/hostname": "node-a"}, "t1")))
    time.sleep(0.5)
    assert thread.is_alive(), "a status-only write woke the loop"
    nodes.apply(
        Event(
            "MODIFIED", _node({"kubernetes.io/hostname": "node-a", "gpustack.ai/managed": "true"})
        )
    )
    thread.join(5)
    assert took and took[0] < 3


def test_a_stop_signal_ends_the_sleep() -> None:
    nodes = Cache()
    stopping = threading.Event()
    thread, took = _sleeping(label_waker(stopping, nodes, "node-a", lambda: None), 20)
    time.sleep(0.2)
    stopping.set()
    thread.join(5)
    assert took and took[0] < 3


def test_a_stop_signal_wakes_the_sleep_at_once_not_at_its_next_poll(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM sets the stop event and wakes the Node cache the sleep waits on: the agent's
    shutdown does not wait out a poll (an hour here; a second each shutdown before)."""
    monkeypatch.setattr(agent, "LABEL_POLL_SECONDS", 3600.0)
    nodes = Cache()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stopping = stop_on_signals(wake=nodes.wake)
        thread, took = _sleeping(label_waker(stopping, nodes, "node-a", lambda: None), 7200)
        time.sleep(0.2)
        # The handler runs in the main thread, as it does in the agent, and wakes the other.
        signal.raise_signal(signal.SIGTERM)
        thread.join(30)  # a bound for a loaded machine, far below the poll
        assert stopping.is_set()
        assert took, "the sleep waited out its poll"
        # Its last line says how long the shutdown took, from the first signal.
        since = stopping.since
        assert since is not None
        signal.raise_signal(signal.SIGINT)
        assert stopping.since == since
        with caplog.at_level(logging.INFO, logger=agent.log.name):
            stopping.stopped()
        (line,) = [r.getMessage() for r in caplog.records if "after the signal" in r.getMessage()]
        assert re.fullmatch(r"stopped [0-9]+\.[0-9]{2} s after the signal", line), line
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_without_a_change_it_sleeps_its_time() -> None:
    nodes = Cache()
    nodes.replace([_node({})], "1")
    start = time.monotonic()
    label_waker(threading.Event(), nodes, "node-a", lambda: {})(0.3)
    assert time.monotonic() - start >= 0.3


def test_a_change_during_the_report_ends_the_next_sleep_at_once() -> None:
    """The labels moved after the report read the Node but before the sleep began: the sleep
    compares with what was reported, so it does not sleep through the change; and having
    woken once for those labels, it does not wake for them again."""
    nodes = Cache()
    managed = {**HOST, "gpustack.ai/managed": "true"}
    nodes.replace([_node(managed)], "1")
    sleep = label_waker(threading.Event(), nodes, "node-a", lambda: HOST)
    start = time.monotonic()
    sleep(20)
    assert time.monotonic() - start < 1
    start = time.monotonic()
    sleep(0.3)  # still unreported (say the report failed): no busy loop on the same labels
    assert time.monotonic() - start >= 0.3
