"""The agent reacts to its node's Pods as the watch brings them (`running.Follower`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kubeapi.watch import Cache, Event
from nodeagent.plugin import running
from nodeagent.plugin.running import Changes, Changing, Follower


def pod(name: str, version: str) -> dict[str, object]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}


def test_every_change_is_reacted_to_and_a_failed_reaction_does_not_stop_it() -> None:
    cache = Cache()
    reacted = threading.Semaphore(0)
    calls: list[int] = []

    def react() -> None:
        calls.append(len(cache.items()))
        reacted.release()
        if len(calls) == 1:
            raise RuntimeError("the API server said no")

    follower = Follower(cache, react)
    follower.start()
    try:
        cache.replace([pod("a", "1")], "1")
        assert reacted.acquire(timeout=5)
        cache.apply(Event("ADDED", pod("b", "2")))
        assert reacted.acquire(timeout=5)
        assert calls[-1] == 2
        cache.apply(Event("BOOKMARK", {"metadata": {"resourceVersion": "3"}}))
        assert not reacted.acquire(timeout=0.3)  # a bookmark moves nothing
    finally:
        follower.stop()


@pytest.mark.parametrize("changing", [Cache, Changes], ids=["pod cache", "unlanded records"])
def test_a_follower_told_to_stop_ends_at_once_not_after_its_tick(
    changing: Callable[[], Changing], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's shutdown waits for its followers: each must end when told, however long its
    tick (an hour here; before, a stop waited out the tick, a second of every agent's stop)."""
    monkeypatch.setattr(running, "FOLLOW_TICK_S", 3600.0)
    follower = Follower(changing(), lambda: None)
    follower.start()
    stopping = threading.Thread(target=follower.stop, daemon=True)
    stopping.start()
    stopping.join(30)  # a bound for a loaded machine, far below the tick
    assert not stopping.is_alive(), "the follower waited out its tick"
